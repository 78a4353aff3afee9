"""Record the matmuls eager code runs, as a list `autotune mm --from FILE` tunes.

    with autotune_cli.record("shapes.json"):
        model(x)                      # every mm, addmm, bmm, torch._scaled_mm it runs
    # or: AUTOTUNE_RECORD=shapes.json python app.py   (honoured when autotune_cli is imported)

A torch dispatch mode sees each aten op below autograd, so linear and matmul arrive as the
mm, addmm and bmm they run (4-d matmuls as a bmm of the folded batch) with their real
strides, and a training step's backward matmuls are seen too. Every op runs untouched; the
mode only reads shapes, strides and dtypes and counts each problem, as the API would pose it
(api/problems.py). On the last exit for a path the counts are added to what the file holds
(record_file.py: shapes_file.py's format, each entry with its `count`), written to a temporary file and
`os.replace`d under a lock; one line on stderr says what was written and names the calls
autotune cannot express (mv, baddbmm, float64, ...): they are counted, never dropped.

Nesting and threads: a dispatch mode sees the ops of the thread that entered it only. All
`record`s of one path share one tally, written once when the last of them exits; a thread
that already records into that tally pushes no second mode, so no call is counted twice.
Records of different paths nest: each file gets every call made inside it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

from ..errors import UserError
from ..problem import FUSED_OPS, MIN_GEMM_K, GemmProblem, one_gemm
from .problems import plain_parameter, problem_of, scaled_problem_of
from .record_file import write_list

ENVIRONMENT = "AUTOTUNE_RECORD"
RECORDED = ("mm", "addmm", "bmm", "_scaled_mm")
# Matmuls autotune has no problem for: counted and named as skipped (those a torch lacks are
# left out of the lookup).
UNEXPRESSED = ("baddbmm", "addbmm", "mv", "addmv", "dot", "vdot", "addr", "_scaled_mm_v2", "_grouped_mm",
               "_scaled_grouped_mm", "_int_mm", "_addmm_activation", "_trilinear",
               "addmm_", "baddbmm_", "addbmm_", "addmv_", "addr_",  # in place: the result written into self
               *FUSED_OPS)
MAX_OPEN_RUNS = 8  # inputs of linears a thread's record holds at once (each one's run of linears)


class _Tally:
    """The problems counted for one path while any `record` of it is open."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.problems: Counter[GemmProblem] = Counter()
        self.skipped: Counter[str] = Counter()
        # Linears of one input (q, k and v; a cross-attention's k and v of every layer): per
        # thread, per input's mark, the open run ((the input, [problems], the weights'
        # addresses)), the most recently used last, and the one GEMMs they make (groups.py:
        # what autotune_cli.compile may run in their place, and looks up)
        self.runs: dict[int, dict[tuple, tuple[Any, list[GemmProblem], set[int]]]] = {}
        self.groups: Counter[GemmProblem] = Counter()
        self.users = 0

    def follow(self, mark: tuple | None, a, weight: int, problem: GemmProblem) -> None:
        """Add `problem`, whose A is `a`, named by `mark` (None: not a linear's GEMM that a
        group may hold), and whose B is the weight at address `weight`, to this thread's run
        of linears of that input, wherever they come (as a compile groups every linear that
        reads one tensor); under the lock. A weight met again starts a new run (the same layer
        run again on the same input). A run holds its input, so that its memory cannot go to
        a new tensor with the same mark; the least recently used of more than MAX_OPEN_RUNS
        ends (an input a later linear reads again is the last used)."""
        if mark is None:
            return
        runs = self.runs.setdefault(threading.get_ident(), {})
        run = runs.pop(mark, None)
        if run is not None and weight not in run[2]:
            run[1].append(problem)
            run[2].add(weight)
            runs[mark] = run
            return
        if run is not None:
            self._count(run)
        runs[mark] = (a, [problem], {weight})
        while len(runs) > MAX_OPEN_RUNS:
            self._count(runs.pop(next(iter(runs))))

    def end_runs(self, thread: int) -> None:
        """End `thread`'s open runs (a write in place may change what a later linear reads, as
        a compile's groups.writes_between says; or the record ends); under the lock."""
        for run in self.runs.pop(thread, {}).values():
            self._count(run)

    def _count(self, run) -> None:
        """Count the one GEMM of `run`, if it held two linears or more."""
        group = one_gemm(run[1])
        if group is not None:
            self.groups[group] += 1


_tallies: dict[Path, _Tally] = {}  # resolved path -> its tally, while open
_stance = None  # torch.compiler's "force_eager" stance, held while any tally is open (_hold_eager)
_tallies_lock = threading.Lock()


def _mode_class():
    import torch
    from torch._C import DispatchKey
    from torch._ops import HigherOrderOperator
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    from .calls import Torch

    aten = torch.ops.aten
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    below: dict = {}  # op -> whether its composite kernel is what runs below the mode (no backend's own)

    def runs_composite(func, args, kwargs, in_body: bool) -> bool:
        """Under inference_mode, and in a higher-order op's body (`in_body`: run below autograd),
        a composite op (linear, matmul, an RNN) comes to the mode whole; where its composite
        kernel is what would run below, on plain tensors, it is run here, in the mode, so that
        the mm it runs is seen as under no_grad."""
        if not (in_body or torch.is_inference_mode_enabled()):
            return False
        if func not in below:
            name = func.name()
            below[func] = has_kernel(name, "CompositeImplicitAutograd") and not any(
                has_kernel(name, key) for key in ("CPU", "CUDA"))
        if not below[func]:
            return False
        leaves = tree_leaves((args, kwargs))
        return all(t.layout == torch.strided and not t.is_nested for t in leaves if isinstance(t, torch.Tensor))
    recorded = {getattr(aten, name): name for name in RECORDED}
    unexpressed = {getattr(aten, name): name for name in UNEXPRESSED if hasattr(aten, name)}
    t = Torch()

    class RecordMode(TorchDispatchMode):
        """Runs every op as given; counts the matmul problems into `tally`."""

        def __init__(self, tally: _Tally) -> None:
            super().__init__()
            self.tally = tally
            # the weights of the linears being decomposed (inference_mode keeps no view's
            # base: their transposes are known by these)
            self.linear_weights: list = []
            self.bodies = 0  # higher-order ops' bodies running (_run_higher_order)

        # torch.cond, while_loop, ... come here too: their bodies run under this mode (below)
        supports_higher_order_operators = True

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if isinstance(func, HigherOrderOperator):
                return self._run_higher_order(func, args, kwargs)
            if runs_composite(func, args, kwargs, self.bodies > 0):
                linear = func.overloadpacket is aten.linear and len(args) > 1
                if linear:
                    self.linear_weights.append(args[1])
                try:
                    with self:
                        out = func.decompose(*args, **kwargs)
                finally:
                    if linear:
                        self.linear_weights.pop()
                if out is not NotImplemented:
                    return out
            out = func(*args, **kwargs)
            packet = func.overloadpacket
            if packet in recorded or packet in unexpressed:
                self._note(func, recorded.get(packet), unexpressed.get(packet), args, kwargs)
            elif func._schema.is_mutable and self.tally.runs.get(threading.get_ident()):
                with self.tally.lock:
                    self.tally.end_runs(threading.get_ident())
            return out

        def _run_higher_order(self, func, args, kwargs):
            """A higher-order op run by its dense kernel (the one eager runs), with this mode
            on, so that the matmuls of the body it runs are recorded; one without such a
            kernel runs as it is, counted as skipped (its body's matmuls unseen)."""
            if any(isinstance(t, FakeTensor) for t in tree_leaves((args, kwargs))):
                return func(*args, **kwargs)  # torch tracing its branches (autograd's, export's): no run
            dense = func.py_kernels.get(DispatchKey.CompositeExplicitAutograd)
            if func is torch.ops.higher_order.cond:  # its dense kernel refuses to run under a mode
                dense = _run_cond
            if dense is not None:
                self.bodies += 1
                try:
                    with self:
                        return dense(*args, **kwargs)
                finally:
                    self.bodies -= 1
            with self.tally.lock:
                self.tally.skipped[f"torch.ops.higher_order.{func.name()} (its body unseen)"] += 1
            return func(*args, **kwargs)

        def _note(self, func, op, other, args, kwargs) -> None:
            named = dict(zip((arg.name for arg in func._schema.arguments), args), **kwargs)
            problem, skipped = None, None
            try:
                if other is not None:
                    skipped = _name(other, named)
                else:
                    problem = _problem(op, named, t)
            except UserError:  # a call autotune does not tune
                skipped = _name(op, named)
            except Exception:  # noqa: BLE001 - a call read wrongly must never break the program
                skipped = _name(op or other, named, known=False)
            with self.tally.lock:
                if problem is not None:
                    self.tally.problems[problem] += 1
                    a = _operand_a(op, named)
                    b = named["mat2"]
                    weight = self.linear_weights[-1] if self.linear_weights else None
                    mark = _input_mark(a, problem) if _parameter_weight(b, weight) else None
                    self.tally.follow(mark, a, b.data_ptr(), problem)
                else:
                    self.tally.skipped[skipped] += 1

    return RecordMode


def _run_cond(pred, true_fn, false_fn, operands):
    """torch.cond as eager runs it: the branch `pred` picks, on the operands."""
    return (true_fn if pred else false_fn)(*operands)


_mode_cls = None


def _mode(tally: _Tally):
    global _mode_cls
    if _mode_cls is None:
        _mode_cls = _mode_class()
    return _mode_cls(tally)


def _problem(op: str, named: dict, t) -> GemmProblem:
    """The problem an aten call with these (named) arguments poses; UserError: none."""
    if op == "_scaled_mm":
        if named.get("scale_result") is not None:
            raise UserError("a scale_result is not tuned")
        return scaled_problem_of(named["self"], named["mat2"], named["scale_a"], named["scale_b"],
                                 named.get("bias"), named.get("out_dtype"), bool(named.get("use_fast_accum")))
    a, b = _operand_a(op, named), named["mat2"]
    if op == "addmm" and (named.get("beta", 1) != 1 or named.get("alpha", 1) != 1):
        raise UserError("addmm with beta or alpha other than 1 is not tuned")
    if a.shape[-1] < MIN_GEMM_K:  # an outer product: left to the compiler, as `model` and compile leave it
        raise UserError(f"K = {a.shape[-1]} is not tuned")
    tf32 = a.dtype is t.float32 and a.is_cuda and t.allow_tf32()
    return problem_of(op, a, b, named["self"] if op == "addmm" else None, tf32=tf32)[0]


def _operand_a(op: str, named: dict):
    """An mm's or addmm's A (an addmm's `self` is its bias)."""
    return named["mat1"] if op == "addmm" else named["self"]


def _parameter_weight(b, linear_weight=None) -> bool:
    """B is a plain Parameter or its whole transpose (a Linear's weight.t()): the only weight
    a compile groups, so a group of others (a buffer, a slice) would be tuned for nothing.
    `linear_weight`: the weight of the linear being run, whose transpose B may be where no
    base is kept (inference_mode)."""
    base = b._base
    if base is None and linear_weight is not None and not plain_parameter(b):
        base = linear_weight
    if base is None:
        return plain_parameter(b)
    return plain_parameter(base) and b.data_ptr() == base.data_ptr() and tuple(b.shape) == tuple(base.shape)[::-1] \
        and tuple(b.stride()) == tuple(base.stride())[::-1]


def _input_mark(a, problem: GemmProblem) -> tuple | None:
    """What makes two linears' GEMMs read one input `a`: its storage, place, shape, strides
    and version (a write between them bumps the version); None where the call is no linear a
    group may hold (one_gemm says which may)."""
    if one_gemm([problem, problem]) is None:
        return None
    # an inference tensor has no version counter, and no write can reach it outside
    # inference mode: its version is fixed
    version = -1 if a.is_inference() else a._version
    return (a.data_ptr(), a.device, tuple(a.shape), a.stride(), version)


def _name(op: str, named: dict, known: bool = True) -> str:
    """A skipped call in a few words: the op, its operands' shapes and dtype."""
    import torch

    tensors = [value for name, value in named.items() if isinstance(value, torch.Tensor)
               and name in ("self", "mat1", "mat2", "vec", "vec1", "vec2", "other", "tensor", "batch1", "batch2",
                            "query", "src", "i1", "i2")]
    shapes = " x ".join("[" + ", ".join(map(str, value.shape)) + "]" for value in tensors)
    dtype = str(tensors[0].dtype).removeprefix("torch.") if tensors else ""
    return " ".join(part for part in (op.lstrip("_"), shapes, dtype, "" if known else "(unread)") if part)


@contextlib.contextmanager
def record(path: str | os.PathLike) -> Iterator[None]:
    """Count every matmul problem run inside (this thread; see the module's doc) and, on the
    last exit for `path`, add the counts to the `--from` list at `path`."""
    tally = _open(path)
    pushed = None
    try:
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

        if not any(getattr(mode, "tally", None) is tally for mode in _get_current_dispatch_mode_stack()):
            pushed = _mode(tally)
            pushed.__enter__()
        yield
    finally:
        if pushed is not None:
            pushed.__exit__(None, None, None)
        _close(tally)


def _open(path: str | os.PathLike) -> _Tally:
    if not str(os.fspath(path)).strip():
        raise ValueError("record: the path is empty")
    target = Path(path).expanduser().resolve()
    with _tallies_lock:
        if not _tallies:
            _hold_eager(True)
        tally = _tallies.setdefault(target, _Tally(target))
        tally.users += 1
    return tally


def _hold_eager(hold: bool) -> None:
    """While a record is open, torch.compile runs code eagerly, in every thread (the
    "force_eager" stance is the process's): code Dynamo meets under a dispatch mode is
    marked to skip, and would never compile again in this process, the record closed. A
    record opened inside a compiled region (torch refuses a stance there) records without
    it. Called under _tallies_lock."""
    global _stance
    import torch

    if hold and _stance is None:
        try:
            _stance = torch.compiler.set_stance("force_eager")
        except RuntimeError:  # inside torch.compile: the stance cannot be set there
            _stance = None
    elif not hold and _stance is not None:
        _stance.__exit__(None, None, None)  # the stance in force before
        _stance = None


def _close(tally: _Tally) -> None:
    with _tallies_lock:
        tally.users -= 1
        if tally.users:
            return
        del _tallies[tally.path]
        if not _tallies:
            _hold_eager(False)
    with tally.lock:
        for thread in list(tally.runs):
            tally.end_runs(thread)
        problems, skipped, groups = dict(tally.problems), dict(tally.skipped), dict(tally.groups)
        tally.problems.clear()
        tally.skipped.clear()
        tally.groups.clear()
    print(write_list(tally.path, problems, skipped, groups), file=sys.stderr)


def record_from_environment() -> None:
    """Record this thread's matmuls from now until the interpreter exits into the path in
    $AUTOTUNE_RECORD. The variable is removed: the processes this one starts (autotune's own
    tuning workers among them) do not record."""
    path = os.environ.pop(ENVIRONMENT, "").strip()
    if not path:
        return
    tally = _open(path)
    # The mode stays pushed to the end: at exit it may not be on top of the stack, nor the
    # exiting thread's; once the tally is written, what it still counts is dropped.
    _mode(tally).__enter__()
    atexit.register(_close, tally)
