"""Use the winners from Python.

    import autotune_cli

    autotune_cli.lookup(m=1024, n=4096, k=4096, dtype="bfloat16")  # the cached winner, or None
    out = autotune_cli.mm(a, b)          # runs this machine's cached winner for a @ b
    out = autotune_cli.addmm(bias, a, b)
    out = autotune_cli.bmm(a, b)
    out = autotune_cli.linear(x, weight, bias)  # x [..., K] folded, B = weight.T
    out = autotune_cli.scaled_mm(a8, b8, scale_a, scale_b, out_dtype=torch.bfloat16)  # float8

A call builds the GemmProblem from its tensors (shape, dtype, device, and the layout read
from the strides), finds the entry `autotune mm …` stored for it under this machine's
fingerprint, and runs its winner: an aten::mm|addmm|bmm winner is the torch call itself,
any other the template's kernel (built once; a Triton kernel into the cache's kernels
folder). Everything up to the kernel is worked out on the first call with given shapes,
strides and dtype and remembered, so a later call is one dict lookup away from the kernel.
Re-tuned in the same process? Call `reset()`.

The output is made as the winner was timed: where N's rows are misaligned, the alignment
templates (triton::mm_padded, aten::mm_aligned) ask for rows padded to 16 bytes or more
(`Template.out_pitch`), as Inductor's max-autotune does (stride [50264, 1] for a vocabulary
of 50257), so the result is a [M, N] view of wider rows and `out.is_contiguous()` is False.
Its values are those of torch.mm; call `.contiguous()` where a packed tensor is needed.

With nothing cached for a problem (or a problem autotune cannot express) the call falls back
to torch.mm / addmm / bmm and warns once per problem with an AutotuneFallbackWarning. Tensors
that need gradients go to torch too: the Triton kernels have no backward.

The fingerprint that selects an entry is the tuner's own (`Tuner.fingerprint`), computed
for the template selection the entry was tuned with; so an entry from another machine, or
one whose template source has changed since, is never used.
"""

from __future__ import annotations

import contextlib
import copy
import os
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .cache import Cache, entry_key
from .errors import UserError
from .problem import GemmProblem, make_problem

__all__ = [
    "AutotuneFallbackWarning", "Built", "Dispatch", "Dispatcher", "addmm", "bmm", "dispatch_info",
    "linear", "lookup", "lookup_entry", "mm", "reset", "scaled_mm",
]


class AutotuneFallbackWarning(UserWarning):
    """A call ran torch's own op because no cached winner applies."""


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


_DTYPES = {"float16": "float16", "bfloat16": "bfloat16", "float32": "float32"}


def _layout(tensor) -> tuple[str, bool]:
    """(letter, needs a contiguous copy): 'n' when the last dim is contiguous, 't' when the
    one before it is (the transpose of a contiguous matrix); anything else is copied."""
    strides = tensor.stride()
    if strides[-1] == 1:
        return "n", False
    if strides[-2] == 1:
        return "t", False
    return "n", True


class _Torch:
    """What the hot path needs from torch, read once."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.float32 = torch.float32
        # torch.backends.cuda.matmul.allow_tf32 reads this getter through a Python
        # __getattr__ that costs ~1.5 us; call the getter itself where it exists.
        getter = getattr(torch._C, "_get_cublas_allow_tf32", None)
        self.allow_tf32 = getter if callable(getter) else (lambda: torch.backends.cuda.matmul.allow_tf32)
        self.ops = {"mm": torch.mm, "addmm": torch.addmm, "bmm": torch.bmm}


class Dispatcher:
    """Looks up and runs cached winners from one cache folder; remembers its plans.

    `cache_dir` None: $AUTOTUNE_CACHE_DIR or the user cache dir, read when a plan is made.
    """

    def __init__(self, cache_dir: str | os.PathLike | None = None) -> None:
        self._cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._t: _Torch | None = None
        self._lock = threading.Lock()
        self._mm: dict[tuple, Callable] = {}  # key from the tensors -> the function to call
        self._addmm: dict[tuple, Callable] = {}
        self._bmm: dict[tuple, Callable] = {}
        self._scaled: dict[tuple, Callable] = {}
        self._plans = {"mm": self._mm, "addmm": self._addmm, "bmm": self._bmm, "scaled_mm": self._scaled}
        self._info: dict[tuple, Dispatch] = {}
        self._built: dict[tuple, Built] = {}  # (op, key) -> the winner's kernel, where one was built
        self._warned: set[str] = set()
        self._tuners: dict[tuple, Any] = {}
        self._entries: tuple[tuple, dict] | None = None
        self._refused: dict[str, str] = {}  # key -> why its winner is not built ("" if it is fine)

    @property
    def cache_dir(self) -> Path:
        if self._cache_dir is not None:
            return self._cache_dir
        from .settings import default_cache_dir

        return default_cache_dir()

    def reset(self) -> None:
        """Forget every plan, warning and cache read (after re-tuning in this process)."""
        with self._lock:
            self._t = None
            for plans in self._plans.values():
                plans.clear()
            self._info.clear()
            self._built.clear()
            self._warned.clear()
            self._tuners.clear()
            self._entries = None
            self._refused.clear()

    # -- looking up ------------------------------------------------------------------------
    def _load_entries(self) -> dict[str, dict]:
        """The cache's entries, read again only when the file changed."""
        cache = Cache(self.cache_dir)
        try:
            stat = cache.path.stat()
            stamp = (str(cache.path), stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            return {}
        if self._entries is not None and self._entries[0] == stamp:
            return self._entries[1]
        entries = cache.load()
        for notice in cache.notices:
            warnings.warn(f"autotune: {notice}", AutotuneFallbackWarning, stacklevel=3)
        self._entries = (stamp, entries)
        self._refused = {}
        return entries

    def _fingerprint_digest(self, problem: GemmProblem, templates: tuple[str, ...] | None) -> str:
        """The digest `Tuner.fingerprint` gives this problem when tuning with `templates`
        (uids or backends; None: all). One Tuner per selection: the device is probed once."""
        from .settings import TuneSettings
        from .tuner import Tuner

        memo = (problem.device, templates)
        tuner = self._tuners.get(memo)
        if tuner is None:
            settings = TuneSettings(device=problem.device, templates=templates, cache_dir=self.cache_dir)
            tuner = self._tuners[memo] = Tuner(settings)
        return tuner.fingerprint(problem).digest()

    def lookup_entry(self, problem: GemmProblem, *, templates: str | tuple[str, ...] | None = None
                     ) -> tuple[str, dict] | None:
        """(key, entry) of the cached result for `problem` on this machine, or None.

        `templates`: only the entry tuned with exactly this selection (as `--templates`).
        Otherwise any entry for this problem whose fingerprint is this machine's, for the
        templates it was tuned with, and whose winner is registered here; the fastest wins.
        """
        if problem.device == "cuda":
            from .fingerprint import cuda_available

            if not cuda_available():
                return None  # no GPU here: no GPU winner can be this machine's
        entries = self._load_entries()
        if templates is not None:
            only = tuple(t.strip() for t in templates.split(",")) if isinstance(templates, str) else tuple(templates)
            key = entry_key(problem.key(), self._fingerprint_digest(problem, only))
            entry = entries.get(key)
            return (key, entry) if entry is not None and self._usable(key, entry) else None
        prefix = problem.key() + "@"
        best: tuple[str, dict] | None = None
        for key, entry in entries.items():
            if not key.startswith(prefix) or not self._usable(key, entry):
                continue
            uids = tuple(sorted((entry.get("fingerprint") or {}).get("templates") or ()))
            if not uids:
                continue
            try:
                digest = self._fingerprint_digest(problem, uids)
            except UserError:  # tuned with a template (a plugin's) not registered here
                continue
            if key != entry_key(problem.key(), digest):
                continue  # another machine, or a template changed since
            if best is None or entry["winner"]["ms"] < best[1]["winner"]["ms"]:
                best = (key, entry)
        return best

    def _usable(self, key: str, entry: dict) -> bool:
        """A winner whose template is registered here (a plugin's must be imported first)
        and whose params are what that template declares and derives: anyone who can write
        the cache file could otherwise put code in a kernel's source. A refused entry is a
        miss, warned about once per read of the file."""
        from .templates import get_template
        from .templates.params import winner_problem

        winner = entry.get("winner")
        if not isinstance(winner, dict) or not isinstance(winner.get("uid"), str):
            return False
        try:
            get_template(winner["uid"])
        except UserError:
            return False
        why = self._refused.get(key)
        if why is None:
            why = self._refused[key] = winner_problem(entry) or ""
            if why:
                from .text import printable

                warnings.warn(printable(f"autotune: cache entry {key} is not used: {why}"),
                              AutotuneFallbackWarning, stacklevel=4)
        return not why

    def lookup(self, problem: GemmProblem | dict | None = None, /, *,
               templates: str | tuple[str, ...] | None = None, **fields) -> dict | None:
        """The cached winner ({uid, params, ms, …}) for a problem on this machine, or None.

        Give a GemmProblem, its dict, or the fields as keywords (as the CLI's flags):
        m, n, k, batch, dtype, layout, bias ("n"/"mn"), allow_tf32, op, device (default:
        cuda where a GPU is present, else cpu).
        """
        problem = _as_problem(problem, fields)
        found = self.lookup_entry(problem, templates=templates)
        return copy.deepcopy(found[1]["winner"]) if found else None

    # -- dispatching -------------------------------------------------------------------------
    def _torch(self) -> _Torch:
        if self._t is None:
            self._t = _Torch()
        return self._t

    def mm(self, a, b):
        """a @ b with this machine's cached winner (torch.mm where there is none)."""
        t = self._t or self._torch()
        key = _key(t, a, b)
        run = self._mm.get(key)
        if run is None:
            run = self._plan("mm", key, a, b, None)
        return run(a, b)

    def bmm(self, a, b):
        """Batched a @ b with this machine's cached winner (torch.bmm where there is none)."""
        t = self._t or self._torch()
        key = _key(t, a, b)
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
        key = _key(t, a, b) + (bias.shape, bias.stride(), bias.dtype, bias.get_device(), bias.is_cuda)
        run = self._addmm.get(key)
        if run is None:
            run = self._plan("addmm", key, a, b, bias)
        return run(bias, a, b)

    def linear(self, x, weight, bias=None):
        """torch.nn.functional.linear(x, weight, bias) with the cached winner: x [..., K]
        folded to [M, K] and B = weight.T (layout "?t"), as `autotune model` reads a linear;
        addmm with a bias, else mm."""
        a = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])
        b = weight.t()
        out = self.mm(a, b) if bias is None else self.addmm(bias, a, b)
        return out if x.dim() == 2 else out.view(*x.shape[:-1], out.shape[-1])

    def scaled_mm(self, a, b, scale_a, scale_b, bias=None, out_dtype=None, use_fast_accum=False):
        """torch._scaled_mm(a, b, scale_a=, scale_b=, bias=, out_dtype=) with this machine's
        cached winner: float8_e4m3fn A (row-major) and B (column-major), fp32 scales per
        tensor or per row of A ([m, 1]) and column of B ([1, n]); use_fast_accum picks the
        problem tuned with --fast-accum. Anything else goes to torch._scaled_mm."""
        t = self._t or self._torch()
        fast = bool(use_fast_accum)
        key = _key(t, a, b) + (scale_a.shape, scale_a.stride(), scale_a.dtype, scale_b.shape, scale_b.stride(),
                               scale_b.dtype, out_dtype, fast)
        if bias is not None:
            key += (bias.shape, bias.stride(), bias.dtype)
        run = self._scaled.get(key)
        if run is None:
            run = self._plan_scaled(key, a, b, scale_a, scale_b, bias, out_dtype, fast)
        return run(a, b, scale_a, scale_b, bias)

    def _plan_scaled(self, key: tuple, a, b, scale_a, scale_b, bias, out_dtype, fast: bool) -> Callable:
        with self._lock:
            torch = self._torch().torch

            def torch_op(a, b, scale_a, scale_b, bias):
                return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, bias=bias, out_dtype=out_dtype,
                                        use_fast_accum=fast)

            try:
                problem = _scaled_problem_of(a, b, scale_a, scale_b, bias, out_dtype, fast)
            except _TorchDecides as exc:
                run, info = torch_op, Dispatch("scaled_mm", "torch._scaled_mm", None, fallback=True, reason=str(exc))
            except UserError as exc:
                run, info = torch_op, self._fallback("scaled_mm", None, f"{exc}", depth=4)
            else:
                run, info = self._plan_problem("scaled_mm", problem, _Adapt(), torch_op, a.device,
                                                ("scaled_mm", key))
            self._scaled[key] = run
            self._info[("scaled_mm", key)] = info
            return run

    def dispatch_info(self, a, b, bias=None) -> Dispatch:
        """What mm(a, b) (bmm for 3-d tensors; addmm(bias, a, b) with a bias) runs, planning
        it as a call would (a fallback warns here, then not again)."""
        t = self._t or self._torch()
        op = "addmm" if bias is not None else "bmm" if a.dim() == 3 else "mm"
        key = _key(t, a, b)
        if bias is not None:
            key += (bias.shape, bias.stride(), bias.dtype, bias.get_device(), bias.is_cuda)
        if key not in self._plans[op]:
            self._plan(op, key, a, b, bias)
        return self._info[(op, key)]

    def route(self, a, b, bias=None) -> tuple[Callable, Dispatch, "Built | None"]:
        """(the function a call with these tensors runs, what it runs, the winner's built
        kernel or None for torch's own op), planned as a call would plan it. The tensors may
        be fake (torch.compile's): planning reads only their shapes, strides, dtypes and
        devices. Used by autotune_cli.compile to route a graph's matmuls."""
        t = self._t or self._torch()
        op = "addmm" if bias is not None else "bmm" if a.dim() == 3 else "mm"
        key = _key(t, a, b)
        if bias is not None:
            key += (bias.shape, bias.stride(), bias.dtype, bias.get_device(), bias.is_cuda)
        run = self._plans[op].get(key)
        if run is None:
            run = self._plan(op, key, a, b, bias)
        return run, self._info[(op, key)], self._built.get((op, key))

    # -- planning (once per shapes/strides/dtype/device) -----------------------------------------
    def _plan(self, op: str, key: tuple, a, b, bias) -> Callable:
        with self._lock:
            t = self._torch()
            torch_op = t.ops[op]
            try:  # key[8]: whether TF32 was allowed (float32 only), as the key was made
                problem, how = _problem_of(op, a, b, bias, tf32=key[8])
            except _TorchDecides as exc:  # mismatched shapes, dtypes, devices: torch says so
                run, info = torch_op, Dispatch(op, f"torch.{op}", None, fallback=True, reason=str(exc))
            except UserError as exc:  # a GEMM autotune does not tune
                run, info = torch_op, self._fallback(op, None, f"{exc}", depth=4)
            else:
                run, info = self._plan_problem(op, problem, how, torch_op, a.device, (op, key))
            self._plans[op][key] = run
            self._info[(op, key)] = info
            return run

    def _fallback(self, op: str, problem: GemmProblem | None, reason: str, depth: int = 5) -> Dispatch:
        """A fallback to torch's op, warned about once per problem. `depth`: frames from
        here up to the caller of mm/addmm/bmm, where the warning points."""
        what = problem.describe() if problem else f"this {op}"
        memo = problem.key() if problem else reason
        torch_name = "torch._scaled_mm" if op == "scaled_mm" else f"torch.{op}"
        if memo not in self._warned:
            self._warned.add(memo)
            warnings.warn(f"autotune: {what} runs {torch_name}: {reason}", AutotuneFallbackWarning,
                          stacklevel=depth)
        return Dispatch(op, torch_name, problem, fallback=True, reason=reason)

    def _plan_problem(self, op: str, problem: GemmProblem, how: "_Adapt", torch_op, device, slot: tuple):
        """What runs `problem` (its operands on `device`): torch's op or the winner's kernel
        (then remembered in `_built[slot]`)."""
        from .templates import get_template

        found = self.lookup_entry(problem)
        if found is None:
            hint = (f"autotune mm --m {problem.m} --n {problem.n} --k {problem.k} --dtype {problem.dtype} "
                    f"--layout {problem.layout}" + (f" --batch {problem.b}" if op == "bmm" else "")
                    + (f" --bias --bias-shape {problem.bias}" if op == "addmm" else "")
                    + (f" --scale {problem.scale} --out-dtype {problem.out_dtype}" if op == "scaled_mm" else "")
                    + (" --fast-accum" if problem.fast_accum else "")
                    + (" --bias" if op == "scaled_mm" and problem.bias else "")
                    + (" --allow-tf32" if problem.allow_tf32 else "") + f" --device {problem.device}")
            return torch_op, self._fallback(op, problem, f"nothing cached for it on this machine ({hint})")
        key, entry = found
        winner = entry["winner"]
        info = Dispatch(op, winner["uid"], problem, key, dict(winner.get("params") or {}))
        template = get_template(winner["uid"])
        from .templates.aten import AtenTemplate
        from .templates.aten_scaled import AtenScaledMMTemplate

        if isinstance(template, (AtenTemplate, AtenScaledMMTemplate)):
            return torch_op, info  # the winner is torch's own call, on the tensors as given
        from .templates.triton_base import interpreting

        if problem.device == "cpu" and template.backend == "triton" and not interpreting():
            return torch_op, self._fallback(op, problem, f"its winner {winner['uid']} runs on the CPU "
                                            "only under Triton's interpreter (TRITON_INTERPRET=1)")
        params = dict(winner.get("params") or {})
        torch = self._torch().torch
        kernel_dir = str(Path(self.cache_dir) / "kernels")

        def build():
            # what a template builds on the GPU (aligned copies of operands) goes on the
            # tensors' GPU; a guard per build: a torch.cuda.device keeps the device it
            # restores on itself, and the builds of several threads may overlap
            with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
                return template.build(problem, params, kernel_dir)

        try:
            pitch = template.out_pitch(problem, params)
            kernel = build()
        except Exception as exc:  # a winner that no longer builds must not break the program
            return torch_op, self._fallback(op, problem, f"its winner {winner['uid']} failed to build: {exc}")
        if template.keeps_buffers:
            if device.type == "cuda":  # the raw stream handle: a torch.cuda.Stream costs microseconds
                raw, index = torch._C._cuda_getCurrentRawStream, device.index
                stream_of = lambda: raw(index)  # noqa: E731
            else:
                stream_of = lambda: None  # noqa: E731
            self._built[slot] = Built(problem, how, kernel, pitch, template.keeps_buffers)
            kernel = _per_caller(kernel, build, stream_of)
        else:
            self._built[slot] = Built(problem, how, kernel, pitch, False)
        if op == "scaled_mm":
            return _scaled_kernel_call(problem, kernel, self._torch(), device), info
        return _kernel_call(op, problem, how, kernel, pitch, torch_op, self._torch(), device), info


def _key(t: _Torch, a, b) -> tuple:
    """What a call's plan depends on, read cheaply: shapes, strides, dtypes, devices (as
    index and whether CUDA: a torch.device hashes slowly) and, for float32, whether TF32 is
    allowed (at index 8, where `_plan` reads it)."""
    dtype = a.dtype
    return (a.shape, a.stride(), b.shape, b.stride(), dtype, b.dtype, a.get_device(), b.get_device(),
            dtype is t.float32 and t.allow_tf32(), a.is_cuda, b.is_cuda)


class _TorchDecides(Exception):
    """The tensors do not make a valid call: let torch raise its own error."""


@dataclass(frozen=True)
class _Adapt:
    """How a call's tensors become the kernel's operands."""

    copy_a: bool = False
    copy_b: bool = False
    bias_row: bool = False  # a [1, n] bias passed as its [n] row


@dataclass(frozen=True)
class Built:
    """A winner's kernel as planned for one call signature: the problem, how the tensors
    are adapted to it, the built runnable (the planning thread's, for a template that keeps
    buffers), and the output's row pitch (None: contiguous)."""

    problem: GemmProblem
    how: _Adapt
    kernel: Callable
    pitch: int | None
    keeps_buffers: bool


def _problem_of(op: str, a, b, bias, *, tf32: bool) -> tuple[GemmProblem, _Adapt]:
    """The GemmProblem these tensors pose, and how to adapt them to it."""
    dims = 3 if op == "bmm" else 2
    if a.dim() != dims or b.dim() != dims:
        raise _TorchDecides(f"{op} needs {dims}-d operands")
    if a.shape[-1] != b.shape[-2] or (op == "bmm" and a.shape[0] != b.shape[0]):
        raise _TorchDecides("the operands' shapes do not match")
    if a.dtype != b.dtype or a.device != b.device:
        raise _TorchDecides("the operands differ in dtype or device")
    dtype = _DTYPES.get(str(a.dtype).removeprefix("torch."))
    if dtype is None:
        raise UserError(f"autotune tunes float16, bfloat16 and float32, not {a.dtype}")
    if a.device.type not in ("cuda", "cpu"):
        raise UserError(f"autotune runs on cuda or cpu, not {a.device.type}")
    m, k = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    bias_kind, bias_row = None, False
    if op == "addmm":
        if bias.dtype != a.dtype or bias.device != a.device:
            raise _TorchDecides("the bias differs in dtype or device")
        if tuple(bias.shape) == (n,):
            bias_kind = "n"
        elif tuple(bias.shape) == (1, n):
            bias_kind, bias_row = "n", True
        elif tuple(bias.shape) == (m, n):
            bias_kind = "mn"
        else:
            raise UserError(f"a bias of shape {list(bias.shape)} is not tuned (only [n] and [m, n])")
    layout_a, copy_a = _layout(a)
    layout_b, copy_b = _layout(b)
    device = a.device.type
    problem = make_problem(
        m=m, n=n, k=k, batch=a.shape[0] if op == "bmm" else None, dtype=dtype,
        layout=layout_a + layout_b, bias=bias_kind, op=op, device=device,
        allow_tf32=bool(tf32) and dtype == "float32" and device == "cuda",
    )
    return problem, _Adapt(copy_a, copy_b, bias_row)


def _scaled_problem_of(a, b, scale_a, scale_b, bias, out_dtype, fast_accum: bool) -> GemmProblem:
    """The scaled_mm problem a torch._scaled_mm call poses (UserError: one not tuned)."""
    from .problem import FP8_DTYPES, FP8_LAYOUT

    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise _TorchDecides("the operands' shapes do not match")
    if a.device != b.device or scale_a.device != a.device or scale_b.device != a.device:
        raise _TorchDecides("the operands are on different devices")
    name = str(a.dtype).removeprefix("torch.")
    if name not in FP8_DTYPES or b.dtype != a.dtype:
        raise UserError(f"autotune tunes scaled GEMMs of {', '.join(FP8_DTYPES)}, not {a.dtype} x {b.dtype}")
    if out_dtype is None:
        raise UserError("a float8 output (out_dtype None) is not tuned")
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    if scale_a.dtype != scale_b.dtype or str(scale_a.dtype) != "torch.float32":
        raise UserError(f"scales of {scale_a.dtype} are not tuned (float32 only)")
    if scale_a.numel() == 1 and scale_b.numel() == 1:
        scale = "tensor"
    elif tuple(scale_a.shape) == (m, 1) and tuple(scale_b.shape) == (1, n):
        scale = "row"
    else:
        raise UserError(f"scales of shapes {list(scale_a.shape)} and {list(scale_b.shape)} are not tuned "
                        "(per tensor, or [m, 1] and [1, n])")
    (layout_a, copy_a), (layout_b, copy_b) = _layout(a), _layout(b)
    if copy_a or copy_b or layout_a + layout_b != FP8_LAYOUT:
        raise UserError(f"float8 operands of layout {layout_a}{layout_b} are not tuned "
                        "(A row-major, B column-major only)")
    if bias is not None and (tuple(bias.shape) != (n,) or bias.device != a.device or bias.stride(0) != 1):
        raise UserError(f"a bias of shape {list(bias.shape)} is not tuned (a contiguous [n])")
    if bias is not None and bias.dtype != out_dtype:
        raise _TorchDecides("the bias's dtype is not the output's")
    return make_problem(m=m, n=n, k=k, dtype=name, layout=FP8_LAYOUT, bias="n" if bias is not None else None,
                        device=a.device.type, scale=scale, out_dtype=str(out_dtype).removeprefix("torch."),
                        fast_accum=fast_accum)


def _scaled_kernel_call(problem: GemmProblem, kernel, t: _Torch, device) -> Callable:
    """torch._scaled_mm's operands (a, b, scale_a, scale_b, bias) run through a built kernel
    into a fresh output of the problem's output dtype."""
    from .templates.base import Operands, out_allocator, torch_dtype

    torch = t.torch
    new_out = out_allocator(problem.out_shape(), None)
    dtype, device = torch_dtype(problem.result_dtype), torch.device(device)
    on_cuda = problem.device == "cuda"
    current_device = torch.cuda.current_device if on_cuda else None
    index = device.index if on_cuda else None

    def call(a, b, scale_a, scale_b, bias):
        out = new_out(dtype, device)
        ops = Operands(a, b, out, bias, scale_a, scale_b)
        if on_cuda and current_device() != index:
            with torch.cuda.device(index):  # Triton launches on the current device
                kernel(ops)
        else:
            kernel(ops)
        return out

    return call


def _per_caller(first: Callable, build: Callable[[], Callable], stream_of: Callable[[], Any]) -> Callable:
    """A kernel that keeps buffers (`Template.keeps_buffers`), built once per calling thread
    and, on the GPU, per current stream (`stream_of`): two callers would otherwise write one
    padded copy of their operands at once. Calls from one thread on one stream are ordered,
    on the GPU too; a kernel built for a stream fills its buffers on that stream first."""
    local = threading.local()
    local.kernels = {stream_of(): first}  # the planning thread's, on its stream

    def run(ops) -> None:
        kernels = getattr(local, "kernels", None)
        if kernels is None:
            kernels = local.kernels = {}
        stream = stream_of()
        kernel = kernels.get(stream)
        if kernel is None:
            kernel = kernels[stream] = build()
        kernel(ops)

    return run


def _kernel_call(op: str, problem: GemmProblem, how: _Adapt, kernel, pitch: int | None, torch_op,
                 t: _Torch, device) -> Callable:
    """A function with torch's signature for `op` that runs a built kernel, for operands on
    `device`, into an output with the row pitch its template asked for (`pitch`; None:
    contiguous). Everything but the tensors is fixed when it is made: a call costs what the
    kernel's own launch costs plus an allocation."""
    from .templates.base import Operands, out_allocator, torch_dtype

    torch = t.torch
    grad_enabled = torch.is_grad_enabled
    # the plan's tensors all have one dtype and device (both in its key)
    new_out = out_allocator(problem.out_shape(), pitch)
    dtype, device = torch_dtype(problem.dtype), torch.device(device)
    copy_a, copy_b, bias_row = how.copy_a, how.copy_b, how.bias_row
    on_cuda = problem.device == "cuda"
    current_device = torch.cuda.current_device if on_cuda else None
    index = device.index if on_cuda else None
    device_guard = torch.cuda.device if on_cuda else None

    def launch(a, b, bias):
        if copy_a:
            a = a.contiguous()
        if copy_b:
            b = b.contiguous()
        if bias_row:
            bias = bias[0]
        out = new_out(dtype, device)
        ops = Operands(a, b, out, bias)
        if on_cuda and current_device() != index:
            with device_guard(index):  # Triton launches on the current device
                kernel(ops)
        else:
            kernel(ops)
        return out

    if op == "addmm":
        def call(bias, a, b):
            if (a.requires_grad or b.requires_grad or bias.requires_grad) and grad_enabled():
                return torch_op(bias, a, b)
            return launch(a, b, bias)
    else:
        def call(a, b):
            if (a.requires_grad or b.requires_grad) and grad_enabled():
                return torch_op(a, b)
            return launch(a, b, None)
    return call


def _as_problem(problem: GemmProblem | dict | None, fields: dict) -> GemmProblem:
    if isinstance(problem, GemmProblem):
        if fields:
            raise TypeError("give a problem or its fields, not both")
        return problem
    if isinstance(problem, dict):
        if fields:
            raise TypeError("give a problem or its fields, not both")
        return GemmProblem.from_dict(problem)
    if problem is not None:
        raise TypeError(f"expected a GemmProblem or a dict, got {type(problem).__name__}")
    fields = dict(fields)
    if fields.get("device") is None:
        from .fingerprint import cuda_available

        fields["device"] = "cuda" if cuda_available() else "cpu"
    return make_problem(**fields)


# -- the default dispatcher: autotune_cli.mm and friends -------------------------------------------

_default = Dispatcher()
mm = _default.mm
addmm = _default.addmm
bmm = _default.bmm
linear = _default.linear
scaled_mm = _default.scaled_mm
lookup = _default.lookup
lookup_entry = _default.lookup_entry
dispatch_info = _default.dispatch_info
reset = _default.reset
