"""One candidate's steps in a timing or compile process: build, inputs, first run, check,
timing, the check after the timing (CandidateRunner), and the compile-only path of a
compile-pool process. Consecutive candidates of one problem share its random inputs and
float64 reference. A candidate that fails is a typed result (a `Candidate`, or a compile's
`CompileAnswer`), never an exception; `fatal` says the process should not go on (a CUDA
error). The process that runs these steps is worker.py's; its tasks are runner/messages.py's
`WorkerTask`.
"""

from __future__ import annotations

import math
import time

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..store.results import SKIPPED
from .messages import CompileAnswer, WorkerTask

if TYPE_CHECKING:
    from ..store.results import Candidate

COMPILE_ERROR_NAMES = ("CompilationError", "OutOfResources", "CompileTimeAssertionFailure")
# A build that failed on the file system (a kernels folder that cannot be written, a full
# disk) says nothing about the kernel: recorded as skipped, with this prefix, so that no
# cache keeps it as the kernel's failure and the next tune measures it again.
ENVIRONMENT_FAILURE = "not built (the environment, not the kernel): "
# A candidate whose first runs were far slower than the problem's best so far
# (TimingPolicy.give_up_over) is recorded as skipped with this prefix: it cannot win.
GAVE_UP = "given up after "


def short_error(exc: BaseException) -> str:
    """The error in one line: its first line (what happened: a CUDA error's name comes
    first, its advice after) and, for a longer text, its last two (where)."""
    text = f"{type(exc).__name__}: {exc}".strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) > 3:
        lines = [lines[0], "...", *lines[-2:]]
    return " | ".join(lines)[:600]


def _is_compile_error(exc: BaseException) -> bool:
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & set(COMPILE_ERROR_NAMES)) or type(exc).__module__.startswith("triton.compiler")


def _prepare_launcher(kernel) -> None:
    """Build a compiled kernel's host-side launcher now, in the compile pool: Triton builds
    one per kernel signature (with a C compiler, in some versions: ~1 s) at the first
    launch and keeps it in its cache, where the timing process then finds it. Best effort:
    the internals differ between Triton versions, and the first launch builds it anyway."""
    try:
        from triton.runtime.driver import driver

        driver.active.launcher_cls(kernel.src, kernel.metadata)
    except Exception:  # noqa: BLE001 - best effort: the first launch builds it anyway
        pass


@dataclass
class _Inputs:
    """One problem's random inputs and their float64 reference, kept between candidates."""

    key: tuple[Any, int]  # (the problem, the seed)
    placement: int  # TimingPolicy.placement: where they were made (see `CandidateRunner.inputs`)
    ops: Any  # Operands, as made
    ref: Any
    outs: dict[int | None, Any]  # an output per row pitch asked for (None: contiguous)
    # the fastest verified median timed on these inputs, per timing mode: what a candidate's
    # first runs are held against (TimingPolicy.give_up_over)
    best_ms: dict[str, float] = field(default_factory=dict)


class CandidateRunner:
    """Runs one candidate: build, verify against a float64 reference, time.

    The random inputs and the reference are made once per (problem, seed) and kept for the
    next candidates (one problem's at a time: a float64 matmul saved per candidate;
    bench/README.md, "Cold tuning"); before each candidate the output is filled
    with NaN again. Each candidate gets its output with the row pitch its template asks for
    (`Template.out_pitch`), made at the first ask and kept with the inputs: a kernel is timed
    on the strides it will run with. A faulty kernel may write out of bounds into the kept A,
    B or bias, so:
    - the reference was computed from the inputs as they were made, and a candidate is
      checked against it; corrupted inputs can therefore make a correct kernel fail the
      check, never make a wrong one pass (it would have to produce the product of inputs
      it was not given);
    - a candidate that fails the check on kept inputs is launched and checked once more on
      fresh ones (made anew, with a new reference), and only that second verdict counts: a
      correct kernel is never recorded wrong because an earlier candidate corrupted the
      inputs, even one that corrupted them and still wrote the right output (recorded OK);
    - whatever does not end OK (an exception, a wrong result) after the inputs were handed
      to the kernel drops the kept inputs, so the next candidate starts on fresh ones.
    Each candidate gets its own `Operands` around the kept tensors, so a runnable that
    rebinds a field of its `Operands` changes nothing for the next one; what is checked is
    the output tensor handed in, never what the field points at afterwards. Verified: the
    first launch, the last timed run (its output NaN-filled before it) and
    TimingPolicy.confirm_launches after the timing (each NaN-filled again), so a kernel
    right only at its first call, or on a random part of its calls, does not pass.
    """

    # How far a placement's operands move: `placement` of these bytes into a buffer of their
    # own (a large tensor moves by MiBs, a small one's page by 4 KiB), each tensor after the
    # one before at ALIGN_PLACED bytes
    PLACEMENT_STEP = (3 << 20) + (4 << 10)
    ALIGN_PLACED = 512

    @classmethod
    def placed(cls, ops, placement: int, out: bool = True):
        """`ops` with its tensors (the output too, where `out`) copied into one new buffer,
        `placement` x PLACEMENT_STEP bytes in: the same values, layouts and storage offsets
        at addresses of that placement's own. A buffer of their own: under pads, the
        allocator handed a later placement the blocks an earlier one had freed, and a tensor
        of its own segment (over 10 MiB) never moved."""
        names = [name for name in ("a", "b", "bias", "scale_a", "scale_b", "out")
                 if getattr(ops, name) is not None and (out or name != "out")]
        return replace(ops, **cls._into_buffer({name: getattr(ops, name) for name in names}, placement))

    @classmethod
    def _into_buffer(cls, tensors: dict, placement: int) -> dict:
        """`tensors` copied, in their order, into one buffer as `placed` says."""
        import torch

        sizes = [t.untyped_storage().nbytes() for t in tensors.values()]
        offsets, at = [], placement * cls.PLACEMENT_STEP
        for size in sizes:
            offsets.append(at)
            at += -(-size // cls.ALIGN_PLACED) * cls.ALIGN_PLACED
        buffer = torch.empty(at, dtype=torch.uint8, device=next(iter(tensors.values())).device)
        moved = {}
        for (name, t), offset, size in zip(tensors.items(), offsets, sizes):
            whole = torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())
            region = buffer[offset:offset + size]
            region.copy_(whole)
            typed = region.view(t.dtype)
            moved[name] = typed.as_strided(t.shape, t.stride(), typed.storage_offset() + t.storage_offset())
        return moved

    def __init__(self, device_type: str, l2_bytes: int) -> None:
        import torch
        import triton  # noqa: F401  (imported now, not at the first candidate)

        self.torch = torch
        self.device_type = device_type
        self.device = "cuda" if device_type == "cuda" else "cpu"
        self.compile_device = self.device  # where `compile` makes operands ("meta": no CUDA)
        self.l2_bytes = l2_bytes
        self._timer = None  # made at the first timing: a compile-pool process never needs one
        self._inputs: _Inputs | None = None  # the kept inputs of the last problem, if any
        self._exposed = False
        if device_type != "cuda":
            torch.set_num_threads(1)

    @property
    def timer(self):
        if self._timer is None:
            from . import timing

            self._timer = timing.CudaTimer(self.l2_bytes) if self.device_type == "cuda" else timing.time_cpu
        return self._timer

    def sync(self) -> None:
        if self.device_type == "cuda":
            self.torch.cuda.synchronize()

    def drop_inputs(self) -> None:
        """Forget the kept inputs (their memory goes back once nothing else holds them)."""
        self._inputs = None

    def inputs(self, problem, seed: int, pitch: int | None = None, placement: int = 0):
        """(operands with the output NaN-filled, float64 reference, whether they or the
        reference were kept from an earlier candidate: a wrong result on them is checked
        again on all made fresh, `_run`). The inputs are made anew when the problem or the seed
        differs from the kept ones, the old ones dropped first. The output has rows `pitch`
        elements apart (None: contiguous), one kept per pitch.

        `placement` (TimingPolicy.placement) other than the kept inputs': the same values are
        made again at other addresses (`placed`), the reference and the best times kept: a
        cuBLAS call's time moved by up to 10% with its operands' addresses where a Triton
        tile's moved by 2% (bench/README.md, "Placement"), so passes at several placements
        give each kernel its time over them."""
        from .verify import make_operands, poison, reference
        from ..templates.base import empty_out

        key = (problem, seed)
        kept = self._inputs
        carried = kept is not None and kept.key == key  # the reference stands for these values
        if not (carried and kept.placement == placement):
            ref, best_ms = (kept.ref, kept.best_ms) if carried else (None, {})
            kept = self._inputs = None  # the old tensors go before the new are made
            made = make_operands(problem, seed, self.device, pitch)
            if placement and self.device_type == "cuda":
                made = self.placed(made, placement)
            kept = self._inputs = _Inputs(key=key, placement=placement, ops=made,
                                          ref=ref if ref is not None else reference(problem, made),
                                          outs={pitch: made.out}, best_ms=best_ms)
            del made, ref
        out = kept.outs.get(pitch)
        if out is None:  # an output of another pitch: placed as the operands are
            out = empty_out(problem, pitch, kept.ops.out.dtype, self.device)
            if kept.placement and self.device_type == "cuda":
                out = self._into_buffer({"out": out}, kept.placement)["out"]
            kept.outs[pitch] = out
        ops = replace(kept.ops, out=out)  # its own Operands around the kept tensors
        poison(ops)
        return ops, kept.ref, carried

    def run(self, task: WorkerTask) -> tuple[Candidate, bool]:
        """Returns (the candidate's result, fatal): fatal means this process should not go on."""
        from ..store.results import OK

        self._exposed = False  # set once the kept inputs are handed to this candidate
        self._verified = False  # set when it was given up on but checked like an OK one
        try:
            candidate, fatal = self._run(task)
        except BaseException:
            self.drop_inputs()
            raise
        if candidate.status != OK and self._exposed and not self._verified:  # it may have
            self.drop_inputs()  # written where it should not
        return candidate, fatal

    def _run(self, task: WorkerTask) -> tuple[Candidate, bool]:
        from .verify import check, poison_tensor
        from ..store.results import COMPILE_ERROR, OK, RUNTIME_ERROR, WRONG_RESULT, Candidate
        from ..settings import TimingPolicy
        from ..templates import get_template

        problem = task.problem
        template = get_template(task.uid)
        params = template.full_params(problem, dict(task.config))
        pitch = template.out_pitch(problem, params)
        policy = task.timing or TimingPolicy()

        worst_of_allowed: list[float] = []  # each check's largest entry error over its slack

        def result(status: str, **fields) -> Candidate:
            worst = max(worst_of_allowed, default=None)
            return Candidate(uid=template.uid, params=params, status=status, worst_of_allowed=worst, **fields)

        def checked(out, ref):
            verdict = check(problem, out, ref)
            if verdict.worst_of_allowed is not None:
                worst_of_allowed.append(verdict.worst_of_allowed)
            return verdict

        started = time.perf_counter()
        phases: dict[str, float] = {}  # seconds per step: where a candidate's time goes
        mark = [started]

        def lap(name: str) -> None:
            now = time.perf_counter()
            phases[name] = round(now - mark[0], 4)
            mark[0] = now

        try:
            runnable = template.build(problem, params, task.kernel_dir)
        except OSError as exc:  # the file system's doing, not the kernel's: measured again later
            return result(SKIPPED, error=ENVIRONMENT_FAILURE + short_error(exc)), False
        except Exception as exc:  # noqa: BLE001 - a template that fails to build is reported
            return result(COMPILE_ERROR, error=short_error(exc)), False
        lap("build")

        def prepare():
            try:
                made = self.inputs(problem, task.seed, pitch, policy.placement)
                self.sync()
                return made, None
            except Exception as exc:  # noqa: BLE001 - the inputs did not fit, or the device failed
                fatal = self.device_type == "cuda"
                return None, (result(RUNTIME_ERROR, error="preparing inputs: " + short_error(exc)), fatal)

        def launch(ops):
            try:
                runnable(ops)  # the first launch compiles
                self.sync()
                return None
            except OSError as exc:  # a cache or kernel file that could not be written or read
                return result(SKIPPED, error=ENVIRONMENT_FAILURE + short_error(exc)), False
            except Exception as exc:  # noqa: BLE001 - what the first launch raised is reported
                if _is_compile_error(exc):
                    return result(COMPILE_ERROR, error=short_error(exc)), False
                return result(RUNTIME_ERROR, error=short_error(exc)), self.device_type == "cuda"

        self._exposed = True
        made, failure = prepare()
        if failure:
            return failure
        ops, ref, reused = made
        out = ops.out  # the tensor the caller owns: checked, whatever the kernel rebinds
        lap("inputs")  # ~0 when the inputs were kept: only the NaN fill
        failure = launch(ops)
        if failure:
            return failure
        compile_s = time.perf_counter() - started
        lap("first_run")
        verdict = checked(out, ref)
        lap("check")
        if not verdict.ok and reused:
            # An earlier candidate may have corrupted the kept inputs: once more on fresh
            # ones, and only this verdict counts (see the class docstring).
            del ops, ref, made, out  # nothing holds the kept tensors before the fresh ones are made
            self.drop_inputs()
            made, failure = prepare()
            if failure:
                return failure
            ops, ref, _ = made
            out = ops.out
            failure = launch(ops)
            if failure:
                return failure
            worst_of_allowed.clear()  # only this verdict counts
            verdict = checked(out, ref)
            lap("recheck")  # fresh inputs, a launch and a check: only when it happened
        if not verdict.ok:
            return result(WRONG_RESULT, error=verdict.reason, max_rel_error=verdict.rel_error,
                          compile_s=compile_s), False
        kept = self._inputs
        best = kept.best_ms.get(policy.mode) if kept is not None else None
        give_up_ms = policy.give_up_over * best if policy.give_up_over > 0 and best else None

        def reset() -> None:  # the timers call it before the last timed run, outside the clock
            poison_tensor(out)

        try:
            if self.device_type == "cuda":
                timing = self.timer.measure(runnable, ops, policy, reset=reset, give_up_ms=give_up_ms)
            else:
                timing = self.timer(lambda: runnable(ops), policy, reset=reset, give_up_ms=give_up_ms)
            self.sync()
        except Exception as exc:  # noqa: BLE001 - what a timed run raised is reported
            return result(RUNTIME_ERROR, error="while timing: " + short_error(exc)), self.device_type == "cuda"
        lap("timing")
        # A kernel right at its first call only, or at random, may not win: the last timed
        # run's output (reset before it) is checked like the first, then confirm_launches more
        # runs' after a reset of their own (TimingPolicy states the odds).
        verdict = checked(out, ref)
        for _ in range(policy.confirm_launches):
            if not verdict.ok:
                break
            poison_tensor(out)
            failure = launch(ops)
            if failure:
                return failure
            verdict = checked(out, ref)
        lap("timed_check")
        if not verdict.ok:
            return result(WRONG_RESULT, error="after the timed runs: " + verdict.reason,
                          max_rel_error=verdict.rel_error, compile_s=compile_s), False
        if timing.gave_up:  # verified like an OK one (its inputs are kept), but it cannot win
            self._verified = True
            return result(SKIPPED, phases=phases, ms=timing.median_ms, runs=timing.runs,
                          max_rel_error=verdict.rel_error, compile_s=compile_s, timing=timing.mode,
                          error=f"{GAVE_UP}{timing.runs} run(s) at {timing.median_ms:.4f} ms, over "
                                f"{policy.give_up_over:g}x the best of the problem so far ({best:.4f} ms)"), False
        if kept is not None and kept is self._inputs:
            kept.best_ms[policy.mode] = min(timing.median_ms, kept.best_ms.get(policy.mode, math.inf))
        return result(OK, phases=phases, ms=timing.median_ms, p20=timing.p20_ms, p80=timing.p80_ms,
                      runs=timing.runs, max_rel_error=verdict.rel_error, compile_s=compile_s,
                      timing=timing.mode), False

    def compile(self, task: WorkerTask) -> tuple[CompileAnswer, bool]:
        """Build and compile without launching anything: what a compile-pool process does.
        The binary lands in Triton's cache, where the timing process finds it."""
        from .verify import empty_operands
        from ..templates.kernel import Kernel
        from ..templates import get_template

        problem = task.problem
        template = get_template(task.uid)
        started = time.perf_counter()
        try:
            params = template.full_params(problem, dict(task.config))
            runnable = template.build(problem, params, task.kernel_dir)
            compiled = None
            if isinstance(runnable, Kernel) and runnable.compiles:
                # the output has the pitch the timed run gives it: its stride is specialized
                # on, so another would compile another binary
                pitch = template.out_pitch(problem, params)
                compiled = runnable.warmup(empty_operands(problem, self.compile_device, pitch))
        except OSError as exc:
            return CompileAnswer.failure(ENVIRONMENT_FAILURE + short_error(exc), SKIPPED), False
        except Exception as exc:  # noqa: BLE001 - a config that does not compile is reported
            return CompileAnswer.failure(short_error(exc)), False
        for kernel in compiled or ():
            _prepare_launcher(kernel)
        return CompileAnswer.built(time.perf_counter() - started), False
