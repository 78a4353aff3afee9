"""An RMSNorm run inside the decode GEMM after it.

In a decode step (M of a few rows) each RMSNorm is a kernel of its own between two GEMMs:
a launch and a round trip of the row through memory, for a few kilobytes of work. Where
only our routed ops running one-launch triton::gemv winners read a norm's output, the norm
moves into those kernels (templates/triton_gemv.py, `build_norm`): each scales A's tiles by
the norm's weight as it loads them, sums their squares beside the product, and scales the
sums by the rows' 1/RMS at the end. The residual add feeding the norm (`h = x + residual`)
moves in too, and the first such kernel writes h for the layers after. Inductor's
max-autotune makes the same fusion with its own reduction kernels (bench/README.md,
"Serving loop").

The norm is matched as Hugging Face's LlamaRMSNorm (and Mistral's, Qwen2's, ...) computes it:

    f = h.to(torch.float32)
    a = weight * (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + eps)).to(h.dtype)

Each fused kernel is checked against that sequence of torch ops followed by the GEMM, on
random values, before it is used; one that fails leaves the graph as it was.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

from .sites import node_value, replace_node

__all__ = ["NormMatch", "fuse_norms", "match_norm"]

FUSABLE_UID = "triton::gemv"
ROUTED_OPS = ("gemm", "triton_gemm", "gemm_group")  # ops.py's ops whose A a norm may feed


@dataclass
class NormMatch:
    """An RMSNorm whose output only our ops `gemms` read (each through a reshape where A is
    folded: `reshapes`, None where not)."""

    a: Any  # the norm's output node, A of the GEMM
    chain: list  # the norm's nodes, `a` first: erased once the GEMM computes them
    x: Any  # h = x + residual, or h itself where residual is None
    residual: Any
    h: Any  # the norm's input node (the add, where fused)
    weight: Any
    eps: float
    gemms: list
    reshapes: list


def _method(node, name: str) -> bool:
    return node.op == "call_method" and node.target == name


def _only_user(node, user) -> bool:
    return len(node.users) == 1 and user in node.users


def _to_dtype(node):
    """The dtype a `.to(dtype)` node casts to, or None for any other node."""
    if not _method(node, "to") or len(node.args) > 2 or set(node.kwargs) - {"dtype"}:
        return None
    dtype = node.args[1] if len(node.args) == 2 else node.kwargs.get("dtype")
    import torch

    return dtype if isinstance(dtype, torch.dtype) else None


def _one_of(node, target_ok) -> tuple[Any, Any] | None:
    """(the argument that passes `target_ok`, the other) of a two-argument node."""
    if len(node.args) != 2 or node.kwargs:
        return None
    first, second = node.args
    if target_ok(first):
        return first, second
    if target_ok(second):
        return second, first
    return None


def match_norm(a) -> NormMatch | None:
    """The RMSNorm (see the module) whose output is node `a`, read by one of our ops alone."""
    import torch

    if a.op != "call_function" or a.target is not operator.mul:
        return None
    parts = _one_of(a, lambda n: hasattr(n, "op") and _to_dtype(n) is not None)
    if parts is None:
        return None
    cast, weight = parts
    product = cast.args[0]
    if not (hasattr(product, "op") and product.op == "call_function" and product.target is operator.mul):
        return None
    parts = _one_of(product, lambda n: hasattr(n, "op") and n.op == "call_function" and n.target is torch.rsqrt)
    if parts is None:
        return None
    rsqrt, f = parts
    shifted = rsqrt.args[0]
    if not (hasattr(shifted, "op") and shifted.op == "call_function" and shifted.target is operator.add):
        return None
    parts = _one_of(shifted, lambda n: isinstance(n, float))
    if parts is None:
        return None
    eps, mean = parts
    if not (hasattr(mean, "op") and _method(mean, "mean") and mean.kwargs == {"keepdim": True}
            and mean.args[1:] in ((-1,), ((-1,),), ([-1],))):
        return None
    square = mean.args[0]
    if not (hasattr(square, "op") and _method(square, "pow") and square.args[1:] == (2,) and not square.kwargs
            and square.args[0] is f):
        return None
    if _to_dtype(f) is not torch.float32:
        return None
    h = f.args[0]
    values = {name: node_value(n) for name, n in (("h", h), ("a", a), ("weight", weight))}
    if not all(isinstance(v, torch.Tensor) for v in values.values()):
        return None
    hv, av, wv = values["h"], values["a"], values["weight"]
    k = hv.shape[-1]
    if (_to_dtype(cast) is not hv.dtype or av.dtype != hv.dtype or wv.dtype != hv.dtype
            or tuple(wv.shape) != (k,) or tuple(av.shape) != tuple(hv.shape)):
        return None
    chain = [a, cast, product, rsqrt, shifted, mean, square, f]
    inside = set(chain)
    if not all(set(n.users) <= inside for n in chain[1:]):
        return None  # a step of the norm is read elsewhere too
    gemms, reshapes = [], []
    for user in a.users:  # each one of our ops (gate's and up's GEMVs, say), A folded or not
        reshape = None
        if user.op == "call_function" and user.target is torch.reshape:
            reshape, user = user, (next(iter(user.users)) if len(user.users) == 1 else None)
        if user is None or not _routed_op(user) or user.args[0] is not (reshape if reshape is not None else a):
            return None
        gemms.append(user)
        reshapes.append(reshape)
    x, residual = h, None
    if h.op == "call_function" and h.target in (operator.add, torch.add) and len(h.args) == 2 and not h.kwargs:
        first, second = (node_value(n) for n in h.args)
        if all(isinstance(v, torch.Tensor) and v.shape == hv.shape and v.dtype == hv.dtype for v in (first, second)):
            x, residual = h.args
    return NormMatch(a, chain, x, residual, h, weight, float(eps), gemms, reshapes)


def _routed_op(node) -> bool:
    from .ops import register_ops

    ops = register_ops()
    return node.op == "call_function" and any(node.target is ops.get(name) for name in ROUTED_OPS)


def fusable(route) -> str | None:
    """Why the GEMV of `route` (ops.Route) cannot take a norm in, or None where it can."""
    info, built = route.info, route.built
    if info.uid != FUSABLE_UID or built is None:
        return f"its winner is {info.uid}, not {FUSABLE_UID}"
    params = info.params
    if (params.get("SPLIT_K", 1) != 1 or params.get("PDL") or info.problem.op != "mm" or built.pitch is not None
            or built.how.copy_a or built.how.copy_b):
        return "its winner is not one plain launch (split K, PDL, a bias or copied operands)"
    return None


def fuse_norms(gm, dispatcher) -> int:
    """Move each RMSNorm that feeds one of our GEMV ops alone into that GEMV (see the
    module); how many moved."""
    from .ops import ROUTES

    graph = gm.graph
    fused, tried = 0, set()
    while True:  # one at a time: a rewrite replaces nodes the next norm's match may name
        found = None
        for node in graph.nodes:
            if node in tried:
                continue
            match = match_norm(node)
            if match is None:
                continue
            routes = [ROUTES.get(gemm.args[-1]) for gemm in match.gemms]
            if all(route is not None and route.out_shape is not None and fusable(route) is None
                   and not gemm.args[2]  # a bias (gemm, triton_gemm), biases (gemm_group)
                   for gemm, route in zip(match.gemms, routes)) and _reads_after(graph, match):
                found = match, routes
                break
        if found is None:
            break
        match, routes = found
        tried.add(match.a)
        names = [_norm_route(dispatcher, match, gemm, route) for gemm, route in zip(match.gemms, routes)]
        if None not in names:
            _rewrite(graph, match, names)
            fused += 1
    if fused:
        graph.lint()
        gm.recompile()
    return fused


def _reads_after(graph, match: NormMatch) -> bool:
    """Whether every reader of h but the norm comes after the GEMM (where the kernel's h
    output will be), where the add moves in."""
    if match.residual is None:
        return True
    order = {node: i for i, node in enumerate(graph.nodes)}
    at = min(order[gemm] for gemm in match.gemms)
    return all(order[user] > at for user in match.h.users if user not in match.chain)


def _op(name: str):
    from .ops import register_ops

    return register_ops().get(name)


def _weights(gemm) -> tuple[list, bool]:
    """(the weight nodes of our op `gemm`, whether each is stored [N, K] and B is their rows
    side by side, transposed)."""
    import torch

    if gemm.target is _op("gemm_group"):
        return list(gemm.args[1]), True
    b = gemm.args[1]
    if b.op == "call_function" and b.target is torch.t:
        return [b.args[0]], True
    return [b], False


def _norm_route(dispatcher, match: NormMatch, gemm, route) -> str | None:
    """The name of the route (in ROUTES) of the norm-and-GEMV kernel for `match`, made and
    checked once per name; None where it does not build or does not match the torch ops."""
    import hashlib

    from ..templates import get_template
    from .ops import LOCK, ROUTES, Route

    info = route.info
    residual = match.residual is not None
    _, transposed = _weights(gemm)
    name = "norm-" + hashlib.sha256(f"{route_key(route)}|{residual}|{transposed}".encode()).hexdigest()[:24]
    with LOCK:
        if name in ROUTES:
            return name
    from pathlib import Path

    template = get_template(FUSABLE_UID)
    kernel_dir = str(Path(dispatcher.cache_dir) / "kernels")
    try:
        kernel = template.build_norm(info.problem, template.full_params(info.problem, info.params), kernel_dir,
                                     residual)
    except Exception:  # noqa: BLE001 - a kernel that does not build leaves the norm where it was
        return None
    if not _checked(kernel, residual, node_value(match.x).device):
        return None
    call = NormCall(kernel, transposed, route.info.problem, name if route.places else None)
    with LOCK:
        ROUTES.setdefault(name, Route(info, call, route.out_shape, route.out_strides, route.built, None))
    return name


def route_key(route) -> str:
    info = route.info
    return f"{info.key}|{info.uid}|{sorted(info.params.items())}|{info.problem.to_dict()}"


class NormCall:
    """What `autotune::norm_gemm` runs: the norm-and-GEMV kernel on the op's tensors, or,
    where a group's weights are no longer side by side, the same sums with torch's ops."""

    def __init__(self, kernel, transposed: bool, problem, places: str | None) -> None:
        self.kernel, self.transposed, self.problem = kernel, transposed, problem
        self.places = places  # a group's route that may place its weights side by side (ops.py)

    def __call__(self, x, residual, norm_weight, eps: float, weights):
        import torch

        from . import groups
        from .ops import _place_once

        p = self.problem
        b = None
        if self.transposed:
            whole = groups.side_by_side(weights) if len(weights) > 1 else weights[0]
            if whole is None and self.places is not None and _place_once(self.places, weights, []):
                whole = groups.side_by_side(weights)
            b = None if whole is None else whole.t()
        else:
            b = weights[0]
        x2 = x.reshape(p.m, p.k).contiguous()
        r2 = None if residual is None else residual.reshape(p.m, p.k).contiguous()
        h = torch.empty((p.m, p.k), dtype=x.dtype, device=x.device)  # without a residual: not written, not read
        if b is None:  # apart: torch's ops, the same sums
            h.copy_(x2 if r2 is None else x2 + r2)
            a = _torch_norm(h, norm_weight, eps)
            out = torch.cat([torch.nn.functional.linear(a, w) for w in weights], dim=-1)
            return out, h.view(x.shape)
        out = torch.empty((p.m, p.n), dtype=x.dtype, device=x.device)
        self.kernel(x2, r2, norm_weight, eps, b, out, h)
        return out, h.view(x.shape)


def _torch_norm(h, weight, eps: float):
    """The norm as the model computes it (see the module)."""
    import torch

    f = h.to(torch.float32)
    return weight * (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + eps)).to(h.dtype)


def _checked(kernel, residual: bool, device) -> bool:
    """Whether the kernel's output and h match the torch ops' (`_torch_norm`, the sum, then
    the GEMM in float64) on random values, within the problem's tolerance."""
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from ..runner.verify import check

    p = kernel.problem
    dtype = getattr(torch, p.dtype)
    with unset_fake_temporarily(), torch.no_grad():
        gen = torch.Generator(device="cpu").manual_seed(0)

        def rand(*shape):
            return torch.randn(*shape, generator=gen).to(dtype=dtype, device=device)

        x, res, w = rand(p.m, p.k), rand(p.m, p.k) if residual else None, rand(p.k)
        b = rand(p.n, p.k).t() if p.b_transposed else rand(p.k, p.n)
        out = torch.full((p.m, p.n), float("nan"), dtype=dtype, device=device)
        h = torch.full((p.m, p.k), float("nan"), dtype=dtype, device=device)
        try:
            kernel(x, res, w, 1e-6, b, out, h)
        except Exception:  # noqa: BLE001 - a kernel that fails leaves the norm where it was
            return False
        want_h = x if res is None else x + res
        want = _torch_norm(want_h, w, 1e-6).double() @ b.double()
        return check(p, out, want).ok and (res is None or check(p, h, want_h.double()).ok)


def _rewrite(graph, match: NormMatch, names: list[str]) -> None:
    """Replace each GEMM op by `autotune::norm_gemm` (route `names[i]`) over the norm's input;
    the first one's h output takes the place of the add where the add moved in (the others
    compute the same h again); the norm's nodes go."""
    made = []
    for gemm, reshape, name in zip(match.gemms, match.reshapes, names):
        weights, _ = _weights(gemm)
        with graph.inserting_before(gemm):
            fused = graph.call_function(_op("norm_gemm"),
                                        (match.x, match.residual, match.weight, match.eps, weights, name))
            out = graph.call_function(operator.getitem, (fused, 0))
        replace_node(graph, gemm, out)
        if reshape is not None:
            graph.erase_node(reshape)
        made.append(fused)
    for node in match.chain:
        graph.erase_node(node)
    if match.residual is not None:
        order = {node: i for i, node in enumerate(graph.nodes)}
        earliest = min(made, key=order.__getitem__)
        with graph.inserting_after(earliest):
            h = graph.call_function(operator.getitem, (earliest, 1))
        replace_node(graph, match.h, h)
