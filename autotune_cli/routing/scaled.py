"""A torch._scaled_mm node of a compiled graph routed to its float8 winner: the Triton op
for the tiled kernel, the opaque op for the rest (see the package)."""
import warnings

from ..api import AutotuneFallbackWarning
from .eager import launch_parts, warmed_scaled_call
from .ops import Route, contiguous, keep_route, register_ops, route_name
from .sites import ScaledMatch, node_value

__all__ = ["rewrite_scaled"]


def rewrite_scaled(backend, graph, node, match: ScaledMatch, pin_aten: bool) -> bool:
    """Replace a torch._scaled_mm node by our op where its problem has a routed winner."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    values = [node_value(x) for x in (match.a, match.b, match.scale_a, match.scale_b, match.bias)]
    with unset_fake_temporarily(), warnings.catch_warnings():
        warnings.simplefilter("ignore", AutotuneFallbackWarning)  # reported in `routes`
        route = _route_scaled(backend, *values, match.out_dtype, match.fast_accum, pin_aten)
    if route is None:
        return False
    op, name = route
    with graph.inserting_before(node):
        out = graph.call_function(op, (match.a, match.b, match.scale_a, match.scale_b, match.bias, name))
    node.replace_all_uses_with(out)
    graph.erase_node(node)
    return True


def _route_scaled(backend, a, b, scale_a, scale_b, bias, out_dtype, fast: bool, pin_aten: bool):
    """(op, route name) for a torch._scaled_mm call, or None to leave it to the compiler:
    a one-kernel Triton winner (the tiled kernel) as the Triton op, the persistent TMA
    kernel (device-side descriptors need Triton's allocator, which the compiler's
    launches do not set) and split-K (its workspace) as the opaque op, an aten winner
    left as torch's call (pinned through the opaque op under max-autotune)."""
    call, info, built = backend.dispatcher.route_scaled(a, b, scale_a, scale_b, bias, out_dtype, fast)
    if info.fallback or info.problem is None:
        backend.routes.append(info)
        return None
    if built is None and not pin_aten:
        backend.routes.append(info)
        return None
    ops = register_ops()
    problem = info.problem
    shape = problem.out_shape()
    parts = launch_parts(built)
    triton_ok = (parts is not None and "triton_scaled_gemm" in ops and not built.keeps_buffers
                 and built.pitch is None and tuple(getattr(parts[0], "arg_names", ()))[:6]
                 == ("A", "B", "C", "BIAS", "SCALE_A", "SCALE_B"))
    strides = contiguous(shape)
    name = route_name(info, tuple(strides), "triton" if triton_ok else "opaque", built)

    def make() -> Route:
        import torch

        from ..templates.base import torch_dtype

        run = warmed_scaled_call(backend.dispatcher, built, (a, b, scale_a, scale_b, bias)) \
            if built is not None and not triton_ok else call
        route = Route(info, run, tuple(shape), tuple(strides), built, parts if triton_ok else None,
                      out_dtype=torch_dtype(problem.result_dtype) if out_dtype is None else out_dtype)
        assert isinstance(route.out_dtype, torch.dtype)
        return route

    keep_route(name, make)
    backend.routes.append(info)
    return (ops["triton_scaled_gemm"] if triton_ok else ops["scaled_gemm"]), name
