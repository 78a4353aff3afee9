"""The Dispatcher: a call's tensors -> its problem -> the entry that serves it here -> a
built kernel behind a cheap call, planned once per call signature (see the package)."""

from __future__ import annotations

import contextlib
import copy
import os
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from ..store.entry import Entry
from ..errors import UserError, warn_caller
from ..problem import GemmProblem, linear_fuses_bias
from .calls import Built, Torch, kernel_call, lazily_bound, per_caller, scaled_kernel_call
from .lookup import NOTHING_CACHED, AutotuneFallbackWarning, WinnerLookup
from .problems import (TF32_AT, Adapt, TorchDecides, as_problem, bias_key, call_key, folds_as_torch, problem_of,
                       scaled_problem_of, tune_hint, wide_view)

__all__ = ["Dispatch", "Dispatcher", "current_gpu", "gpu_index"]


@dataclass(frozen=True)
class Dispatch:
    """What a call with given tensors runs."""

    op: str
    uid: str  # the winner's uid, or "torch.mm" (etc.) for a fallback
    problem: GemmProblem | None  # None: the tensors are not a problem autotune describes
    key: str | None = None  # the cache entry used
    params: dict = field(default_factory=dict)
    fallback: bool = False
    reason: str = ""


class Dispatcher:
    """Looks up and runs cached winners from one cache folder; remembers its plans.

    `cache_dir` None: $AUTOTUNE_CACHE_DIR or the user cache dir, read when a plan is made.
    """

    def __init__(self, cache_dir: str | os.PathLike | None = None) -> None:
        self._cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._t: Torch | None = None
        self._lock = threading.Lock()
        self._mm: dict[tuple, Callable] = {}  # key from the tensors -> the function to call
        self._addmm: dict[tuple, Callable] = {}
        self._bmm: dict[tuple, Callable] = {}
        self._scaled: dict[tuple, Callable] = {}
        self._plans = {"mm": self._mm, "addmm": self._addmm, "bmm": self._bmm, "scaled_mm": self._scaled}
        self._info: dict[tuple, Dispatch] = {}
        self._built: dict[tuple, Built] = {}  # (op, key) -> the winner's kernel, where one was built
        self._warned: set[str] = set()
        self._lookup = WinnerLookup(lambda: self.cache_dir)

    @property
    def cache_dir(self) -> Path:
        if self._cache_dir is not None:
            return self._cache_dir
        from ..settings import default_cache_dir

        return default_cache_dir()

    def reset(self) -> None:
        """Forget every plan, warning and cache read (after re-tuning in this process, or a
        write to a weight that torch does not see)."""
        with self._lock:
            self._t = None
            for plans in self._plans.values():
                plans.clear()
            self._info.clear()
            self._built.clear()
            self._warned.clear()
            self._lookup.reset()

    # -- looking up ------------------------------------------------------------------------
    def lookup_entry(self, problem: GemmProblem, *, templates: str | tuple[str, ...] | None = None
                     ) -> tuple[str, Entry] | None:
        """(key, entry) of the cached result for `problem` on this machine, or None.

        `templates`: the entry as a tune of this selection (as `--templates`) would have made
        it, where it covers that selection (tune/selections.answer). Otherwise any entry for this
        problem whose fingerprint is this machine's, for the templates it was tuned with, and
        whose winner is registered here; the fastest wins.
        """
        return self._lookup.find(problem, templates, current_gpu(problem))

    def lookup(self, problem: GemmProblem | dict | None = None, /, *,
               templates: str | tuple[str, ...] | None = None, **fields) -> dict | None:
        """The cached winner ({uid, params, ms, …}) for a problem on this machine, or None.

        Give a GemmProblem, its dict, or the fields as keywords (as the CLI's flags):
        m, n, k, batch, dtype, layout, bias ("n"/"mn", or True with bias_shape as in a
        --from list), allow_tf32, op, device (default: cuda where a GPU is present, else cpu).
        """
        problem = as_problem(problem, fields)
        found = self._lookup.find(problem, templates, current_gpu(problem))
        return copy.deepcopy(found[1].winner.to_dict()) if found else None

    # -- dispatching -------------------------------------------------------------------------
    def _torch(self) -> Torch:
        if self._t is None:
            self._t = Torch()
        return self._t

    def mm(self, a, b):
        """a @ b with this machine's cached winner (torch.mm where there is none)."""
        t = self._t or self._torch()
        if t.compiling():  # inside torch.compile: the compiler sees torch's op (compile routes it)
            return t.torch.mm(a, b)
        key = call_key(t.float32, t.allow_tf32, a, b)
        run = self._mm.get(key)
        if run is None:
            run = self._plan("mm", key, a, b, None)
        return run(a, b)

    def bmm(self, a, b):
        """Batched a @ b with this machine's cached winner (torch.bmm where there is none)."""
        t = self._t or self._torch()
        if t.compiling():  # inside torch.compile: the compiler sees torch's op (compile routes it)
            return t.torch.bmm(a, b)
        key = call_key(t.float32, t.allow_tf32, a, b)
        run = self._bmm.get(key)
        if run is None:
            run = self._plan("bmm", key, a, b, None)
        return run(a, b)

    def addmm(self, bias, a, b, *, beta=1, alpha=1):
        """bias + a @ b with this machine's cached winner (torch.addmm where there is none).
        Other beta or alpha go to torch.addmm."""
        t = self._t or self._torch()
        if beta != 1 or alpha != 1:
            return t.torch.addmm(bias, a, b, beta=beta, alpha=alpha)
        if t.compiling():  # inside torch.compile, as mm (no beta=, alpha=: routing reads the call as written)
            return t.torch.addmm(bias, a, b)
        key = call_key(t.float32, t.allow_tf32, a, b) + bias_key(bias)
        run = self._addmm.get(key)
        if run is None:
            run = self._plan("addmm", key, a, b, bias)
        return run(bias, a, b)

    def linear(self, x, weight, bias=None):
        """torch.nn.functional.linear(x, weight, bias) with the cached winner: x [..., K]
        folded to [M, K] and B = weight.T (layout "?t"), as `autotune model` reads a linear;
        addmm with a bias where at::linear runs one (problem.linear_fuses_bias), else mm and
        the bias added after. A 1-d x or weight (a matrix-vector product) is torch's, and so
        is a linear torch runs as a bmm over x's batch (problem.matmul_folds)."""
        fused = bias is not None and x.dim() >= 2 and linear_fuses_bias(x.dim(), x.is_contiguous(), bias.shape)
        if x.dim() < 2 or weight.dim() != 2 or not (fused or folds_as_torch(x, weight)):
            # a matrix-vector product, or a bmm over x's batch (problem.matmul_folds): torch's
            return (self._t or self._torch()).torch.nn.functional.linear(x, weight, bias)
        a = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])
        b = weight.t()
        out = self.addmm(bias, a, b) if fused else self.mm(a, b)
        out = out if x.dim() == 2 else out.view(*x.shape[:-1], out.shape[-1])
        if bias is not None and not fused:
            out.add_(bias)  # in place, as at::linear adds it: the product's dtype stays
        return out

    def scaled_mm(self, a, b, scale_a, scale_b, bias=None, out_dtype=None, use_fast_accum=False):
        """torch._scaled_mm(a, b, scale_a=, scale_b=, bias=, out_dtype=) with this machine's
        cached winner: float8_e4m3fn A (row-major) and B (column-major), fp32 scales per
        tensor, per row of A ([m, 1]) and column of B ([1, n]), or per block ([m, k/128] and
        [k/128, n/128]); use_fast_accum picks the problem tuned with --fast-accum. Anything
        else goes to torch._scaled_mm."""
        fast = bool(use_fast_accum)
        t = self._t or self._torch()
        if t.compiling():  # inside torch.compile, as mm
            return t.torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, bias=bias, out_dtype=out_dtype,
                                      use_fast_accum=fast)
        key = self._scaled_key(a, b, scale_a, scale_b, bias, out_dtype, fast)
        run = self._scaled.get(key)
        if run is None:
            run = self._plan_scaled(key, a, b, scale_a, scale_b, bias, out_dtype, fast)
        return run(a, b, scale_a, scale_b, bias)

    def _scaled_key(self, a, b, scale_a, scale_b, bias, out_dtype, fast: bool) -> tuple:
        t = self._t or self._torch()
        key = call_key(t.float32, t.allow_tf32, a, b) + (
            scale_a.shape, scale_a.stride(), scale_a.dtype, scale_b.shape, scale_b.stride(), scale_b.dtype,
            out_dtype, fast)
        if bias is not None:
            key += (bias.shape, bias.stride(), bias.dtype)
        return key

    def route_scaled(self, a, b, scale_a, scale_b, bias=None, out_dtype=None,
                     use_fast_accum=False) -> tuple[Callable, Dispatch, Built | None]:
        """`route` for torch._scaled_mm's operands: (the function a scaled_mm call with
        these tensors runs, what it runs, the winner's built kernel or None for torch's own
        call), planned as a call would plan it; the tensors may be fake."""
        fast = bool(use_fast_accum)
        key = self._scaled_key(a, b, scale_a, scale_b, bias, out_dtype, fast)
        run = self._scaled.get(key)
        if run is None:
            run = self._plan_scaled(key, a, b, scale_a, scale_b, bias, out_dtype, fast)
        return run, self._info[("scaled_mm", key)], self._built.get(("scaled_mm", key))

    def problem_for(self, a, b, bias=None) -> GemmProblem | None:
        """The problem mm(a, b) (bmm for 3-d tensors; addmm with a bias) poses, or None where
        it is not one autotune tunes; plans nothing. The tensors may be fake."""
        t = self._t or self._torch()
        op = "addmm" if bias is not None else "bmm" if a.dim() == 3 else "mm"
        try:
            return problem_of(op, a, b, bias, tf32=call_key(t.float32, t.allow_tf32, a, b)[TF32_AT])[0]
        except (TorchDecides, UserError):
            return None

    def scaled_problem_for(self, a, b, scale_a, scale_b, bias=None, out_dtype=None,
                           use_fast_accum=False) -> GemmProblem | None:
        """As `problem_for`, for torch._scaled_mm's operands."""
        try:
            return scaled_problem_of(a, b, scale_a, scale_b, bias, out_dtype, bool(use_fast_accum))
        except (TorchDecides, UserError):
            return None

    def plan_borrowed(self, a, b, bias, found: tuple[str, Entry]) -> tuple[Callable, Dispatch, Built | None]:
        """(the call, what it runs, the built kernel or None) for tensors whose problem is
        `found`'s (key, entry) at another M: its winner's config rebuilt for these tensors'
        problem (params derived anew; a config that does not fit them falls back to torch's
        op, with the reason). Not remembered here: autotune_cli.compile's dynamic routes keep
        their own plans per M and check each built kernel before it runs."""
        with self._lock:
            t = self._torch()
            op = "addmm" if bias is not None else "bmm" if a.dim() == 3 else "mm"
            problem, how = problem_of(op, a, b, bias, tf32=call_key(t.float32, t.allow_tf32, a, b)[TF32_AT])
            slot = ("borrowed", op, problem)
            run, info = self._plan_problem(op, problem, how, t.ops[op], a.device, slot, found=found,
                                           views=(a, b, bias))
            return run, info, self._built.pop(slot, None)

    def dispatch_info(self, a, b, bias=None) -> Dispatch:
        """What mm(a, b) (bmm for 3-d tensors; addmm(bias, a, b) with a bias) runs, planning
        it as a call would (a fallback warns here, then not again), this call's own checks
        included (gradients, autocast, alignment: calls.torch_runs)."""
        from .calls import torch_runs

        _, info, built = self.route(a, b, bias)
        why = "" if built is None else torch_runs(self._torch().torch, a, b, bias)  # None: torch's own call
        return replace(info, uid=f"torch.{info.op}", fallback=True, reason=why) if why else info

    def route(self, a, b, bias=None) -> tuple[Callable, Dispatch, Built | None]:
        """(the function a call with these tensors runs, what it runs, the winner's built
        kernel or None for torch's own op), planned as a call would plan it. The tensors may
        be fake (torch.compile's): planning reads only their shapes, strides, dtypes and
        devices. Used by autotune_cli.compile to route a graph's matmuls."""
        t = self._t or self._torch()
        op = "addmm" if bias is not None else "bmm" if a.dim() == 3 else "mm"
        key = call_key(t.float32, t.allow_tf32, a, b)
        if bias is not None:
            key += bias_key(bias)
        run = self._plans[op].get(key)
        if run is None:
            run = self._plan(op, key, a, b, bias)
        return run, self._info[(op, key)], self._built.get((op, key))

    # -- planning (once per shapes/strides/dtype/device) -----------------------------------------
    def _plan(self, op: str, key: tuple, a, b, bias) -> Callable:
        with self._lock:
            t = self._torch()
            torch_op = t.ops[op]
            try:  # whether TF32 was allowed (float32 only), as the key was made
                problem, how = problem_of(op, a, b, bias, tf32=key[TF32_AT])
            except TorchDecides as exc:  # mismatched shapes, dtypes, devices: torch says so
                run, info = torch_op, Dispatch(op, f"torch.{op}", None, fallback=True, reason=str(exc))
            except UserError as exc:  # a GEMM autotune does not tune
                run, info = torch_op, self._fallback(op, None, f"{exc}")
            else:
                run, info = self._plan_problem(op, problem, how, torch_op, a.device, (op, key), views=(a, b, bias))
            self._plans[op][key] = run
            self._info[(op, key)] = info
            return run

    def _plan_scaled(self, key: tuple, a, b, scale_a, scale_b, bias, out_dtype, fast: bool) -> Callable:
        with self._lock:
            torch = self._torch().torch

            def torch_op(a, b, scale_a, scale_b, bias):
                return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, bias=bias, out_dtype=out_dtype,
                                        use_fast_accum=fast)

            try:
                problem = scaled_problem_of(a, b, scale_a, scale_b, bias, out_dtype, fast)
            except TorchDecides as exc:
                run, info = torch_op, Dispatch("scaled_mm", "torch._scaled_mm", None, fallback=True, reason=str(exc))
            except UserError as exc:
                run, info = torch_op, self._fallback("scaled_mm", None, f"{exc}")
            else:
                run, info = self._plan_problem("scaled_mm", problem, Adapt(), torch_op, a.device,
                                               ("scaled_mm", key), views=(a, b, bias))
            self._scaled[key] = run
            self._info[("scaled_mm", key)] = info
            return run

    def _fallback(self, op: str, problem: GemmProblem | None, reason: str, warn: bool = True,
                  aside: str = "") -> Dispatch:
        """A fallback to torch's op, warned about once per problem (unless `warn` is false), at
        the caller's line; `aside`: what the warning adds to the reason."""
        what = problem.describe() if problem else f"this {op}"
        memo = problem.key() if problem else reason
        torch_name = "torch._scaled_mm" if op == "scaled_mm" else f"torch.{op}"
        if warn and memo not in self._warned:
            self._warned.add(memo)
            warn_caller(f"autotune: {what} runs {torch_name}: {reason}{aside}", AutotuneFallbackWarning)
        return Dispatch(op, torch_name, problem, fallback=True, reason=reason)

    def _plan_problem(self, op: str, problem: GemmProblem, how: Adapt, torch_op, device, slot: tuple,
                      found: tuple[str, Entry] | None = None, views: tuple = (None, None, None)):
        """What runs `problem` (its operands on `device`; `views`: the call's a, b and bias,
        maybe fake): torch's op or the winner's kernel (then remembered in `_built[slot]`).
        `found`: the entry of this problem at another M (plan_borrowed), in place of this
        problem's own."""
        from ..templates import get_template
        from ..templates.aten import AtenTemplate
        from ..templates.aten_scaled import AtenScaledMMTemplate
        from ..templates.kernel_files import interpreter_mismatch
        from ..templates.triton_base import interpreting

        borrowed = found is not None
        found = found or self._lookup.find(problem, index=gpu_index(device))
        if found is None:
            why = self._lookup.miss_reason(problem, index=gpu_index(device))
            reason = f"{why} ({tune_hint(op, problem)})"
            if why != NOTHING_CACHED:
                return torch_op, self._fallback(op, problem, reason)
            # one warning for all the M a product meets uncached (a server's batch sizes)
            family = (NOTHING_CACHED, replace(problem, m=1).key())
            said = family in self._warned
            self._warned.add(family)
            return torch_op, self._fallback(op, problem, reason, warn=not said, aside=(
                "; its other row counts are not warned of (autotune_cli.record lists every size a run makes)"))
        key, entry = found
        winner = entry.winner
        info = Dispatch(op, winner.uid, problem, key, dict(winner.params))
        template = get_template(winner.uid)
        if isinstance(template, (AtenTemplate, AtenScaledMMTemplate)):
            return torch_op, info  # the winner is torch's own call, on the tensors as given
        # the mode triton runs in (its helpers were made at its import), not the variable alone
        mixed = interpreter_mismatch() if template.backend == "triton" else ""
        if mixed:
            return torch_op, self._fallback(op, problem, f"its winner {winner.uid} cannot run here: {mixed}")
        if problem.device == "cpu" and template.backend == "triton" and not interpreting():
            return torch_op, self._fallback(op, problem, f"its winner {winner.uid} runs on the CPU "
                                            "only under Triton's interpreter (TRITON_INTERPRET=1)")
        # a view past 32-bit offsets that the dense problem stays within (a wide row pitch):
        # torch's op, not a kernel whose offsets were sized and verified for dense operands
        # (an aten winner's torch calls index any view)
        wide = wide_view(problem, how, *views) if template.backend != "aten" else ""
        if wide:
            return torch_op, self._fallback(op, problem, f"{wide}: its winner {winner.uid} sized its offsets "
                                            "for dense operands")
        params = dict(winner.params)
        t = self._torch()
        torch = t.torch
        kernel_dir = str(Path(self.cache_dir) / "kernels")

        def build():
            # what a template builds on the GPU (aligned copies of operands) goes on the
            # tensors' GPU; a guard per build: a torch.cuda.device keeps the device it
            # restores on itself, and the builds of several threads may overlap
            with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
                return template.build(problem, params, kernel_dir)

        try:
            if borrowed:  # the config tuned at another M, its derived params made for this one
                params = template.full_params(problem, params)
            pitch = template.out_pitch(problem, params)
            whole_rows = pitch is None or template.out_writes_padding(problem, params)
            kernel = build()
        except Exception as exc:  # noqa: BLE001 - a winner that no longer builds must not break the program
            return torch_op, self._fallback(op, problem, f"its winner {winner.uid} failed to build: {exc}")
        self._built[slot] = Built(problem, how, kernel, pitch, template.keeps_buffers, whole_rows)
        scaled = op == "scaled_mm"
        launch = kernel if scaled else lazily_bound(kernel, reuse_b=True)
        if template.keeps_buffers:
            if device.type == "cuda":  # the raw stream handle: a torch.cuda.Stream costs microseconds
                raw, index = torch._C._cuda_getCurrentRawStream, device.index
                stream_of = lambda: raw(index)  # noqa: E731
            else:
                stream_of = lambda: None  # noqa: E731
            make = build if scaled else (lambda: lazily_bound(build(), reuse_b=True))
            launch = per_caller(launch, make, stream_of)
        if scaled:
            return scaled_kernel_call(problem, launch, t, device), info
        return kernel_call(op, problem, how, launch, pitch, torch_op, t, device, whole_rows), info


def gpu_index(device) -> int:
    """The GPU a torch device names (its index, or the current GPU for a bare "cuda"); 0 for
    any other device. Each GPU's winners are looked up under its own fingerprint."""
    if getattr(device, "type", None) != "cuda":
        return 0
    if device.index is not None:
        return device.index
    import torch

    return torch.cuda.current_device()


def current_gpu(problem: GemmProblem) -> int:
    """The current GPU where torch has started CUDA (a rank's own, after set_device), else 0:
    a lookup without operands is for the device the caller's tensors would be on."""
    import sys

    torch = sys.modules.get("torch")
    if problem.device != "cuda" or torch is None or not torch.cuda.is_initialized():
        return 0
    return torch.cuda.current_device()
