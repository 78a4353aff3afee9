"""A matmul with one dynamic size in a compiled graph: winners tuned at a set of values of
that size, and the one to run chosen per call inside the compiled graph. The size is M (a
batch's rows) or, in a training step's backward, K (a weight's gradient A^T @ dC sums over
the batch's rows): `DynamicPlan.dim`.

The values tuned (`tuned_m_values`): the powers of two from 1 up to the size the graph was
traced at rounded up to a power of two (at least DYNAMIC_M_FLOOR), and that size itself,
within the bounds torch knows for it. A call runs the winner tuned at the least of them that
is >= its size: at that size itself, the tuned kernel; below it, the same config built for
the call (its derived params made anew) and checked once against float64 before it is used;
above the largest, or where the config does not fit or its check fails, torch's own op.
The choice is made once per size and remembered: under CUDA graphs it is made while the
graph of that size warms up, and the replays run the kernel alone.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any, Callable, NamedTuple

from .sites import DYNAMIC_IN_STEP, concrete, is_static
from ..problem import GemmProblem

__all__ = ["DYNAMIC_M_FLOOR", "DynamicCall", "DynamicPlan", "dynamic_problem", "dynamic_route", "tuned_m_values"]

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


class DynamicPlan(NamedTuple):
    """How a matmul with a dynamic size is routed: its problem at the size's hint, the values
    of the size tuned, and which size it is ("m" or "k")."""

    problem: GemmProblem
    values: tuple[int, ...]
    dim: str = "m"

    def at(self, size: int) -> GemmProblem:
        return replace(self.problem, **{self.dim: size})

    def problems(self) -> list[GemmProblem]:
        """The problems tuned for it, one per value."""
        return [self.at(v) for v in self.values]

    @property
    def name(self) -> str:
        return self.dim.upper()


class DynamicCall:
    """The function a dynamic route runs: (a, b) or (bias, a, b) as torch's op takes them,
    planned once per value of the dynamic size (see the module)."""

    def __init__(self, dispatcher, op: str, plan: DynamicPlan, torch_op) -> None:
        self.dispatcher, self.op, self.plan = dispatcher, op, plan
        self.torch_op = torch_op
        self.plans: dict[tuple, Callable] = {}
        self.chosen: dict[int, str] = {}  # the size -> what runs it (uid, or why torch's op)
        self._lock = threading.Lock()

    @property
    def problem(self) -> GemmProblem:
        """The problem at the dynamic size's hint."""
        return self.plan.problem

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
        plan, name = self.plan, self.plan.name
        m = a.shape[-2] if plan.dim == "m" else a.shape[-1]  # the dynamic size, M or K
        values = plan.values
        # the least value tuned that is >= the call's; none for a K shorter than the least
        # tuned (MIN_GEMM_K: no GEMM), left to torch's op
        bucket = next((v for v in values if v >= m), None) if plan.dim == "m" or m >= values[0] else None
        capturing = a.is_cuda and torch.cuda.is_current_stream_capturing()
        with self._lock, warnings.catch_warnings():
            warnings.simplefilter("ignore", AutotuneFallbackWarning)  # said in `chosen`
            run, why = self.torch_op, (f"{name} = {m} is above the largest tuned ({values[-1]})"
                                       if m > values[-1] else f"{name} = {m} is below the least tuned")
            found = self.dispatcher.lookup_entry(plan.at(bucket)) if bucket else None
            if bucket is not None and found is None:
                why = f"nothing cached at {name} = {bucket}"
            elif found is not None and bucket == m:
                run, info, built = self.dispatcher.route(a, b, bias)
                why = info.reason if info.fallback else info.uid
                run = _rows_whole(run) if built is not None and built.pitch is not None else run
            elif found is not None and capturing:
                # no check can run inside a capture: torch's op, planned again after it
                return self.torch_op
            elif found is not None:
                run, info, built = self.dispatcher.plan_borrowed(a, b, bias, found)
                why = info.reason if info.fallback else f"{info.uid} (tuned at {name} = {bucket})"
                if built is not None:
                    failed = self._check(run, plan.at(m), args)
                    if failed:
                        why = f"{info.uid} tuned at {name} = {bucket} failed its check at {name} = {m}: {failed}"
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


def dynamic_problem(dispatcher, a, b, bias, k_too: bool = False) -> DynamicPlan | str:
    """How a matmul whose M alone is dynamic (fake tensors: A [M, K] or [batch, M, K] with M
    symbolic) is routed: its problem at M's hint and the M values to tune; or why not. With
    `k_too` (a training step's graphs, where B or the bias is dynamic), a matmul whose K alone
    is dynamic (`_k_plan`), else why not."""
    import torch

    if k_too:  # B or the bias dynamic: only K alone may be (the M path below reads neither)
        if concrete(a.shape[-2]) is not None and concrete(a.shape[-1]) is None:
            return _k_plan(dispatcher, a, b, bias)
        return DYNAMIC_IN_STEP
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
    return DynamicPlan(replace(problem, m=hint), tuned_m_values(hint, lower, upper))


def _k_plan(dispatcher, a, b, bias) -> DynamicPlan | str:
    """A 2-D matmul whose K alone is dynamic: a weight's gradient A^T @ dC summed over a
    dynamic batch's rows (A^T [M, K], dC [K, N], M and N static, every stride static). Its
    problem at K's hint, tuned at the values `tuned_m_values` gives (from MIN_GEMM_K: a
    shorter K is no GEMM)."""
    import torch

    from ..problem import MIN_GEMM_K

    sizes = m_hint(a.shape[-1])
    if sizes is None:
        return "a dynamic shape torch gives no hint for"
    hint, lower, upper = sizes
    fixed = [concrete(s) for s in (a.shape[-2], b.shape[-1], *a.stride(), *b.stride())]
    if a.dim() != 2 or b.dim() != 2 or any(s is None for s in fixed) or (bias is not None and not is_static(bias)):
        return "a dynamic shape (other than M or K)"
    fake_mode = getattr(a, "fake_mode", None)
    if fake_mode is None:
        return "a dynamic shape"
    m, n, a_strides, b_strides = fixed[0], fixed[1], fixed[2:4], fixed[4:6]
    k = max(hint, MIN_GEMM_K)
    with fake_mode:
        stand_a = torch.empty_strided((m, k), a_strides, dtype=a.dtype, device=a.device)
        stand_b = torch.empty_strided((k, n), b_strides, dtype=b.dtype, device=b.device)
    problem = dispatcher.problem_for(stand_a, stand_b, bias)
    if problem is None:
        return "not a problem autotune tunes"
    values = tuple(v for v in tuned_m_values(hint, lower, upper) if v >= MIN_GEMM_K)
    return DynamicPlan(replace(problem, k=hint), values, "k") if values else DYNAMIC_IN_STEP


def dynamic_route(dispatcher, routes: list, op: str, plan: DynamicPlan) -> str | None:
    """The name of the route (the opaque op's) over a DynamicCall of a matmul with a dynamic
    size (`plan`), where a winner is cached at one of its values at least; else None, the
    matmul said in `routes` to stay the compiler's. `routes` gets its Dispatch either way."""
    from ..api import Dispatch
    from .ops import LOCK, ROUTES, Route, route_name

    problem, name = plan.problem, plan.name
    tuned = [v for v in plan.values if dispatcher.lookup_entry(plan.at(v)) is not None]
    if not tuned:
        routes.append(Dispatch(op, f"torch.{op}", problem, fallback=True,
                               reason=f"a dynamic {name} with nothing cached at {name} = "
                                      + ", ".join(map(str, plan.values))))
        return None
    t = dispatcher._torch()
    # the name says which cache it reads: its plans are made per call from that cache
    where = {plan.dim: list(plan.values), "cache": str(dispatcher.cache_dir)}
    route = route_name(Dispatch(op, "dynamic", problem, None, where), (), "dynamic", None)
    call = DynamicCall(dispatcher, op, plan, t.ops[op])
    with LOCK:  # a new compile plans anew (the cache may have changed since the last)
        ROUTES[route] = Route(Dispatch(op, "dynamic", problem), call, None, None, None, None)
    routes.append(Dispatch(op, "dynamic", problem, None, {plan.dim: list(plan.values)},
                           reason=f"per call, from the winners at {name} = {', '.join(map(str, tuned))}"))
    return route
