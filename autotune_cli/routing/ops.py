"""The ops a routed matmul becomes in a compiled graph, and the routes they run.

`autotune::gemm` (opaque: a custom op with a fake implementation, running a route's call),
`autotune::scaled_gemm` (the same for torch._scaled_mm), `autotune::gemm_group` (opaque:
linears of one input as one GEMM over their weights side by side, groups.py) and, where
Triton compiles for a GPU, `autotune::triton_gemm` / `autotune::triton_scaled_gemm`
(triton_ops: the compiler traces into them and launches the kernel itself). An op's `route`
argument names a `Route` in ROUTES (`keep_route` adds one).
"""

import threading  # no `from __future__ import annotations`: torch.library reads the ops' annotations
from dataclasses import dataclass
from typing import Any, Callable

from ..api import Built, Dispatch

__all__ = ["LOCK", "ROUTES", "Route", "contiguous", "keep_route", "register_ops", "route_name"]


@dataclass(frozen=True)
class Route:
    """What one replaced matmul runs: `call` (torch's signature: (a, b) or (bias, a, b)) in
    the opaque op; `parts` (kernel, grid, arguments, options) in the Triton op."""

    info: Dispatch
    call: Callable
    out_shape: tuple[int, ...] | None  # None: a dynamic M (dynamic.py), A's rows
    out_strides: tuple[int, ...]
    built: Built | None
    parts: tuple | None
    out_dtype: Any = None  # scaled_mm: the output's torch dtype (else the operands')
    # a group's op may place its weights side by side itself (groups.py): not where CUDA graphs
    # replay the compiled graph, whose warm-up runs allocate from the graphs' own memory pool
    places: bool = False


# An op's `route` argument names an entry here. The name is a hash of what the route runs
# (entry, winner, params, output strides, which op): Inductor caches compiled graphs on disk,
# keyed by their text, so a name must never stand for another route in another process.
ROUTES: dict[str, Route] = {}
LOCK = threading.Lock()
_OPS: dict[str, Any] = {}


def _interpreting() -> bool:
    from ..templates.triton_base import interpreting

    return interpreting()


def _operands(route: Route, a, b, bias):
    """The tensors as the kernel takes them (the copies and bias row the eager call makes)."""
    how = route.built.how
    if how.copy_a:
        a = a.contiguous()
    if how.copy_b:
        b = b.contiguous()
    if how.bias_row:
        bias = bias[0]
    return a, b, bias


def register_ops() -> dict[str, Any]:
    """Define our ops once per process: `autotune::gemm` always, `autotune::triton_gemm`
    where Triton compiles for a GPU."""
    with LOCK:
        if _OPS:
            return _OPS
        import torch
        from torch.library import custom_op

        @custom_op("autotune::gemm", mutates_args=())
        def gemm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, route: str) -> torch.Tensor:
            return _uncast(ROUTES[route].call, a, b, bias)

        @gemm.register_fake
        def _(a, b, bias, route):
            r = ROUTES[route]
            if r.out_shape is None:  # a dynamic M: A's rows by B's columns, contiguous
                return a.new_empty((*a.shape[:-1], b.shape[-1]))
            return torch.empty_strided(r.out_shape, r.out_strides, dtype=a.dtype, device=a.device)

        _OPS["gemm"] = torch.ops.autotune.gemm.default

        @custom_op("autotune::scaled_gemm", mutates_args=())
        def scaled_gemm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                        bias: torch.Tensor | None, route: str) -> torch.Tensor:
            return ROUTES[route].call(a, b, scale_a, scale_b, bias)

        @scaled_gemm.register_fake
        def _(a, b, scale_a, scale_b, bias, route):
            r = ROUTES[route]
            return torch.empty_strided(r.out_shape, r.out_strides, dtype=r.out_dtype, device=a.device)

        _OPS["scaled_gemm"] = torch.ops.autotune.scaled_gemm.default

        from . import groups

        @custom_op("autotune::gemm_group", mutates_args=())
        def gemm_group(a: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor],
                       route: str) -> torch.Tensor:
            r = ROUTES[route]
            whole = groups.wholes(weights, biases)
            if whole is None and r.places and _place_once(route, weights, biases):
                whole = groups.wholes(weights, biases)
            if whole is None:  # apart: one by one
                _apart_once(route, r)
                return torch.cat([torch.nn.functional.linear(a, w, biases[i] if biases else None)
                                  for i, w in enumerate(weights)], dim=-1)
            b, bias = whole
            return _uncast(r.call, a, b.t(), bias)

        @gemm_group.register_fake
        def _(a, weights, biases, route):
            r = ROUTES[route]
            return torch.empty_strided(r.out_shape, r.out_strides, dtype=a.dtype, device=a.device)

        _OPS["gemm_group"] = torch.ops.autotune.gemm_group.default
        if not _interpreting():
            from torch.library import triton_op, wrap_triton

            from ..templates.base import Operands

            @triton_op("autotune::triton_gemm", mutates_args={})
            def triton_gemm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
                            route: str) -> torch.Tensor:
                r = ROUTES[route]
                kernel, grid, arguments, options = r.parts
                a, b, bias = _operands(r, a, b, bias)
                out = torch.empty(r.out_shape, dtype=a.dtype, device=a.device)
                args = list(arguments(Operands(a, b, out, bias)))
                if bias is None:
                    args[3] = a  # never read without a bias: an input, not a second alias of out
                wrap_triton(kernel)[grid](*args, **options)
                return out

            _OPS["triton_gemm"] = torch.ops.autotune.triton_gemm.default

            @triton_op("autotune::triton_scaled_gemm", mutates_args={})
            def triton_scaled_gemm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                                   bias: torch.Tensor | None, route: str) -> torch.Tensor:
                r = ROUTES[route]
                kernel, grid, arguments, options = r.parts
                out = torch.empty(r.out_shape, dtype=r.out_dtype, device=a.device)
                args = list(arguments(Operands(a, b, out, bias, scale_a, scale_b)))
                if bias is None:
                    args[3] = a  # never read without a bias: an input, not a second alias of out
                wrap_triton(kernel)[grid](*args, **options)
                return out

            _OPS["triton_scaled_gemm"] = torch.ops.autotune.triton_scaled_gemm.default
        return _OPS


def _uncast(call: Callable, a, b, bias):
    """A route's call (torch's signature) with autocast off where it is on: the graph gave its
    operands the dtype the product runs in (autocast.py), and a call made under autocast runs
    torch's op instead of the winner (kernel_call), as one does where the graph runs with
    autocast on (a backend that runs Dynamo's graph as it is: its autocast regions are calls)."""
    import torch

    if torch.is_autocast_enabled(a.device.type):
        with torch.autocast(a.device.type, enabled=False):
            return call(a, b) if bias is None else call(bias, a, b)
    return call(a, b) if bias is None else call(bias, a, b)


_APART: set[str] = set()
_PLACED: set[tuple] = set()  # (route, the weights' ids) placed side by side by the op


def _place_once(name: str, weights, biases) -> bool:
    """Place a group's weights side by side from its op (groups.py), where they may move and
    it is the first time for this route and these weights (two graphs grouping them in other
    orders would otherwise move them back and forth); whether it did."""
    from . import groups

    key = (name, *map(id, weights), *map(id, biases))
    with LOCK:
        if key in _PLACED or not groups.movable(weights, biases):
            return False
        _PLACED.add(key)
    groups.place_side_by_side(weights, biases)
    return True


def _apart_once(name: str, route: Route) -> None:
    """Say once per route that a group's weights are apart and stay so (groups.py)."""
    import warnings

    from ..api import AutotuneFallbackWarning

    with LOCK:
        if name in _APART:
            return
        _APART.add(name)
    warnings.warn(f"autotune: the weights of the grouped GEMM {route.info.problem.describe()} are apart "
                  "and may not be moved now (shared, or moved before): its linears run one by one, on "
                  "torch's ops; compile again to group them, or pass group_linears=False",
                  AutotuneFallbackWarning, stacklevel=2)


def keep_route(name: str, make: Callable[[], Route]) -> None:
    """Add the route `make()` under `name` unless one is there: a route is made once per name
    (every layer's matmul of one problem shares it, and making it may run its kernel)."""
    with LOCK:
        if name in ROUTES:
            return
    route = make()
    with LOCK:
        ROUTES.setdefault(name, route)


def route_name(info: Dispatch, strides: tuple, kind: str, built: Built | None) -> str:
    import hashlib
    import json

    how = (built.how.copy_a, built.how.copy_b, built.how.bias_row) if built is not None else None
    text = json.dumps([info.op, info.key, info.uid, info.params, info.problem.to_dict(), list(strides), kind, how],
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def contiguous(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))
