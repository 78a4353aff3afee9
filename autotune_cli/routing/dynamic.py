"""A matmul whose M (batch x sequence) is dynamic in a compiled graph: winners tuned at a
set of M values, and the one to run chosen per call inside the compiled graph.

The M values tuned (`tuned_m_values`): the powers of two from 1 up to the M the graph was
traced at rounded up to a power of two (at least DYNAMIC_M_FLOOR), and that M itself, within
the bounds torch knows for the size. A call with M rows runs the winner tuned at the least of
them that is >= M: at that M itself, the tuned kernel; below it, the same config built for
M rows (its derived params made anew) and checked once against float64 before it is used;
above the largest, or where the config does not fit M or its check fails, torch's own op.
The choice is made once per M and remembered: under CUDA graphs it is made while the graph
of that size warms up, and the replays run the kernel alone.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any, Callable

from .sites import concrete
from ..problem import GemmProblem

__all__ = ["DYNAMIC_M_FLOOR", "DynamicCall", "dynamic_problem", "dynamic_route", "tuned_m_values"]

# Tuned up to at least this many rows: a decode batch grows past the one it was traced at.
DYNAMIC_M_FLOOR = 16


def tuned_m_values(hint: int, lower: int = 1, upper: int | None = None) -> tuple[int, ...]:
    """The M values a dynamic M is tuned at (see the module), within [lower, upper]."""
    top = max(DYNAMIC_M_FLOOR, hint)
    values, m = {hint}, 1
    while True:
        values.add(m)
        if m >= top:
            break
        m *= 2
    return tuple(sorted(v for v in values if v >= max(lower, 1) and (upper is None or v <= upper)))


class DynamicCall:
    """The function a dynamic-M route runs: (a, b) or (bias, a, b) as torch's op takes them,
    planned once per M (see the module)."""

    def __init__(self, dispatcher, op: str, problem: GemmProblem, m_values: tuple[int, ...], torch_op) -> None:
        self.dispatcher, self.op, self.problem, self.m_values = dispatcher, op, problem, m_values
        self.torch_op = torch_op
        self.plans: dict[tuple, Callable] = {}
        self.chosen: dict[int, str] = {}  # M -> what runs it (uid, or why torch's op)
        self._lock = threading.Lock()

    def __call__(self, *args):
        a, b = args[-2], args[-1]
        key = (tuple(a.shape), a.stride(), b.stride())
        run = self.plans.get(key)
        if run is None:
            run = self._plan(key, *args)
        return run(*args)

    def _plan(self, key: tuple, *args) -> Callable:
        import warnings

        import torch

        from ..api import AutotuneFallbackWarning

        bias = args[0] if len(args) == 3 else None
        a, b = args[-2], args[-1]
        m = a.shape[-2]
        bucket = next((v for v in self.m_values if v >= m), None)
        capturing = a.is_cuda and torch.cuda.is_current_stream_capturing()
        with self._lock, warnings.catch_warnings():
            warnings.simplefilter("ignore", AutotuneFallbackWarning)  # said in `chosen`
            run, why = self.torch_op, f"M = {m} is above the largest tuned ({self.m_values[-1]})"
            found = self.dispatcher.lookup_entry(replace(self.problem, m=bucket)) if bucket else None
            if bucket is not None and found is None:
                why = f"nothing cached at M = {bucket}"
            elif found is not None and bucket == m:
                run, info, built = self.dispatcher.route(a, b, bias)
                why = info.reason if info.fallback else info.uid
                run = _rows_whole(run) if built is not None and built.pitch is not None else run
            elif found is not None and capturing:
                # no check can run inside a capture: torch's op, planned again after it
                return self.torch_op
            elif found is not None:
                run, info, built = self.dispatcher.plan_borrowed(a, b, bias, found)
                why = info.reason if info.fallback else f"{info.uid} (tuned at M = {bucket})"
                if built is not None:
                    failed = self._check(run, replace(self.problem, m=m), args)
                    if failed:
                        why = f"{info.uid} tuned at M = {bucket} failed its check at M = {m}: {failed}"
                        run = self.torch_op
                    elif built.pitch is not None:
                        run = _rows_whole(run)
            self.plans[key] = run
            self.chosen[m] = why
            return run

    @staticmethod
    def _check(run: Callable, problem: GemmProblem, args: tuple) -> str:
        """'' where `run` gives float64's product on random operands laid out as the call's
        `args` (sizes and strides: `run` binds its launch to its first call's), else why not."""
        import math

        import torch

        from ..runner.verify import check, reference_of

        generator = torch.Generator(device=args[-1].device).manual_seed(0)
        ops = [_random_like(t, generator) for t in args]
        if len(ops) == 3:  # as large as a typical product entry, so that a bias left out shows
            ops[0] = _random_like(args[0], generator, math.sqrt(problem.k))
        out = run(*ops)
        a, b, bias = ops[-2], ops[-1], (ops[0] if len(ops) == 3 else None)
        verdict = check(problem, out, reference_of(a.double(), b.double(), bias))
        return "" if verdict.ok else verdict.reason


def _rows_whole(run: Callable) -> Callable:
    """`run` with its output's rows made contiguous: the op's fake implementation says a
    dynamic M's output is (ops.py), and a winner that pads its rows (`pitch`) leaves them
    apart; one copy of C, where the padded kernel won by far more (bench/README.md)."""
    def whole(*args):
        return run(*args).contiguous()

    return whole


def _random_like(t, generator, scale: float = 1.0):
    """Random values in a tensor with `t`'s sizes, strides and dtype (a view whose entries
    overlap, as an expanded bias's do, reads repeated values)."""
    import torch

    from ..templates.base import elements_spanned

    storage = torch.randn(elements_spanned(t), generator=generator, dtype=torch.float32, device=t.device) * scale
    return storage.to(t.dtype).as_strided(t.shape, t.stride())


def m_hint(size: Any) -> tuple[int, int, int | None] | None:
    """(hint, lower, upper) of a symbolic size: the value it was traced at and the bounds
    torch knows (None: not one torch can hint)."""
    import warnings

    node = getattr(size, "node", None)
    if node is None:
        return None
    hint = getattr(node, "hint", None)
    if hint is None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # the name changes across torch versions
                hint = node.shape_env.size_hint(node.expr)
        except Exception:  # noqa: BLE001 - a size with no hint is left to the compiler
            return None
    lower, upper = 1, None
    try:
        bounds = node.shape_env.bound_sympy(node.expr)
        lower = max(1, int(bounds.lower))
        top = int(bounds.upper)  # infinite: an error, or a number past any dim
        upper = top if top < 2**31 else None
    except Exception:  # noqa: BLE001 - unknown bounds: the defaults
        pass
    return int(hint), lower, upper


def dynamic_problem(dispatcher, a, b, bias) -> tuple[GemmProblem, tuple[int, ...]] | str:
    """The problem of a matmul whose M alone is dynamic (fake tensors: A [M, K] or
    [batch, M, K] with M symbolic), at its hint, and the M values to tune; or why not."""
    import torch

    sizes = m_hint(a.shape[-2])
    if sizes is None:  # M fixed (batch 1 under dynamic=True: torch specializes 0 and 1), K symbolic
        fixed_m = concrete(a.shape[-2])
        if fixed_m is None:
            return "a dynamic shape torch gives no hint for"
        sizes = (fixed_m, fixed_m, fixed_m)
    hint, lower, upper = sizes
    fixed = [concrete(s) for s in (*a.shape[:-2], a.shape[-1], *a.stride())]
    if any(s is None for s in fixed):
        return "a dynamic shape (other than M)"
    fake_mode = getattr(a, "fake_mode", None)
    if fake_mode is None:
        return "a dynamic shape"
    lead, k, strides = fixed[:a.dim() - 2], fixed[a.dim() - 2], fixed[a.dim() - 1:]
    with fake_mode:
        stand_in = torch.empty_strided((*lead, max(hint, 2), k), strides, dtype=a.dtype, device=a.device)
    problem = dispatcher.problem_for(stand_in, b, bias)
    if problem is None:
        return "not a problem autotune tunes"
    # the stand-in has two rows at least (one row's layout reads either way); the problem, M's hint
    return replace(problem, m=hint), tuned_m_values(hint, lower, upper)


def dynamic_route(dispatcher, routes: list, op: str, problem: GemmProblem, m_values: tuple[int, ...]) -> str | None:
    """The name of the route (the opaque op's) over a DynamicCall of a matmul whose M is
    dynamic (`problem` at M's hint, tuned at `m_values`), where a winner is cached at one of
    them at least; else None, the matmul said in `routes` to stay the compiler's. `routes`
    gets its Dispatch either way."""
    from ..api import Dispatch
    from .ops import LOCK, ROUTES, Route, route_name

    tuned = [m for m in m_values if dispatcher.lookup_entry(replace(problem, m=m)) is not None]
    if not tuned:
        routes.append(Dispatch(op, f"torch.{op}", problem, fallback=True,
                               reason="a dynamic M with nothing cached at M = " + ", ".join(map(str, m_values))))
        return None
    t = dispatcher._torch()
    # the name says which cache it reads: its plans are made per call from that cache
    where = {"m": list(m_values), "cache": str(dispatcher.cache_dir)}
    name = route_name(Dispatch(op, "dynamic", problem, None, where), (), "dynamic", None)
    call = DynamicCall(dispatcher, op, problem, m_values, t.ops[op])
    with LOCK:  # a new compile plans anew (the cache may have changed since the last)
        ROUTES[name] = Route(Dispatch(op, "dynamic", problem), call, None, None, None, None)
    routes.append(Dispatch(op, "dynamic", problem, None, {"m": list(m_values)},
                           reason=f"per call, from the winners at M = {', '.join(map(str, tuned))}"))
    return name
