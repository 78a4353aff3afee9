"""Which nodes of a Dynamo graph are matmuls that torch_compile.py routes: linear, mm,
addmm, bmm and matmul / @ read as a GEMM (MatmulMatch: its operand nodes, how A is folded
and whether B is a weight to transpose), and torch._scaled_mm with constant arguments
(ScaledMatch). Anything else is left to the compiler. Reads node metadata only; imports
torch when called.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

__all__ = ["MatmulMatch", "ScaledMatch", "is_static", "match_matmul", "match_scaled", "node_value"]


@dataclass
class MatmulMatch:
    """A matmul node read as a GEMM: operand nodes, how A is folded and B transposed."""

    a: Any
    b: Any
    bias: Any
    fold: tuple[int, ...] | None  # A's leading dims, folded into M (None: A is the matrix)
    transpose_b: bool  # B is a linear's weight: the product takes W.T


def _targets():
    import torch

    linear = {torch._C._nn.linear, torch.nn.functional.linear}
    matmul = {torch.matmul, operator.matmul}
    return linear, matmul, torch.mm, torch.addmm, torch.bmm


def node_value(arg):
    return arg.meta.get("example_value") if hasattr(arg, "meta") else None


@dataclass
class ScaledMatch:
    """A torch._scaled_mm node: its tensor operand nodes and its constant arguments."""

    a: Any
    b: Any
    scale_a: Any
    scale_b: Any
    bias: Any
    out_dtype: Any
    fast_accum: bool


# torch._scaled_mm(self, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
# use_fast_accum=False): its arguments in order, with their defaults after the fourth
_SCALED_ARGS = ("a", "b", "scale_a", "scale_b", "bias", "scale_result", "out_dtype", "use_fast_accum")
_SCALED_DEFAULTS = {"bias": None, "scale_result": None, "out_dtype": None, "use_fast_accum": False}
_SCALED_KWARG_NAMES = {"self": "a", "mat2": "b"}


def match_scaled(node) -> ScaledMatch | None:
    """torch._scaled_mm called with tensors, constant out_dtype and use_fast_accum and no
    scale_result; anything else (out=, a traced flag) is left to the compiler."""
    import torch

    if node.op != "call_function" or node.target is not torch._scaled_mm or len(node.args) > len(_SCALED_ARGS):
        return None
    args = dict(zip(_SCALED_ARGS, node.args))
    for name, value in node.kwargs.items():
        name = _SCALED_KWARG_NAMES.get(name, name)
        if name not in _SCALED_ARGS or name in args:
            return None
        args[name] = value
    args = {**_SCALED_DEFAULTS, **args}
    if any(name not in args for name in _SCALED_ARGS[:4]) or args["scale_result"] is not None:
        return None
    if not all(isinstance(node_value(args[name]), torch.Tensor) for name in _SCALED_ARGS[:4]):
        return None
    if args["bias"] is not None and not isinstance(node_value(args["bias"]), torch.Tensor):
        return None
    out_dtype, fast = args["out_dtype"], args["use_fast_accum"]
    if not (out_dtype is None or isinstance(out_dtype, torch.dtype)) or not isinstance(fast, bool):
        return None
    return ScaledMatch(args["a"], args["b"], args["scale_a"], args["scale_b"], args["bias"], out_dtype, fast)


def match_matmul(node) -> MatmulMatch | None:
    import torch

    if node.op == "call_method":
        name = node.target
        args = list(node.args)
    elif node.op == "call_function":
        name, args = None, list(node.args)
    else:
        return None
    linear, matmul, mm, addmm, bmm = _targets()
    kwargs = dict(node.kwargs)
    target = node.target
    tensors = [node_value(x) for x in args]
    if not all(isinstance(t, torch.Tensor) for t in tensors[:2]) or len(args) < 2:
        return None
    if target in linear:
        bias = args[2] if len(args) > 2 else kwargs.pop("bias", None)
        if kwargs or (bias is not None and not isinstance(node_value(bias), torch.Tensor)):
            return None
        x, w = tensors[0], tensors[1]
        if w.dim() != 2 or x.dim() < 2:
            return None
        return MatmulMatch(args[0], args[1], bias, tuple(x.shape[:-1]) if x.dim() > 2 else None, True)
    if kwargs:
        return None  # out=, alpha=, beta=: left to torch
    if target is mm or name == "mm":
        return MatmulMatch(args[0], args[1], None, None, False) if len(args) == 2 else None
    if target is bmm or name == "bmm":
        return MatmulMatch(args[0], args[1], None, None, False) if len(args) == 2 else None
    if target is addmm or name == "addmm":
        if len(args) != 3 or not isinstance(node_value(args[2]), torch.Tensor):
            return None
        return MatmulMatch(args[1], args[2], args[0], None, False)
    if target in matmul or name in ("matmul", "__matmul__"):
        if len(args) != 2:
            return None
        x, y = tensors
        if x.dim() == 2 and y.dim() == 2:
            return MatmulMatch(args[0], args[1], None, None, False)
        if x.dim() > 2 and y.dim() == 2:
            return MatmulMatch(args[0], args[1], None, tuple(x.shape[:-1]), False)
        if x.dim() == 3 and y.dim() == 3 and x.shape[0] == y.shape[0]:
            return MatmulMatch(args[0], args[1], None, None, False)
    return None


def is_static(*tensors) -> bool:
    import torch

    for t in tensors:
        if t is None:
            continue
        if any(not isinstance(s, int) for s in (*t.shape, *t.stride())):
            return False
        if isinstance(t, torch.Tensor) and t.requires_grad and torch.is_grad_enabled():
            return False
    return True
