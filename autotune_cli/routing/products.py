"""Which calls of a graph are products that routing does not read as a GEMM (sites.py meets
each and says why, never dropping one): torch's functions and Tensor methods as Dynamo records
them, and the aten ops an exported program's module (ExportedProgram.module()) calls in their
place (`aten.mv.default` for torch.mv, `aten.mm.out` for torch.mm(..., out=)). Reads targets
only; imports torch when called.
"""

from __future__ import annotations

from typing import Any

__all__ = ["aten_call", "fused_kind", "other_kind", "other_overload", "other_targets"]

# aten op -> the name a route gives the product (as torch's function is named)
_ATEN_OTHERS = {"tensordot": "tensordot", "addbmm": "addbmm", "linalg_multi_dot": "multi_dot",
                "chain_matmul": "chain_matmul", "bilinear": "bilinear", "_int_mm": "_int_mm", "mv": "mv",
                "dot": "dot", "vdot": "vdot", "inner": "inner", "addmv": "addmv", "addr": "addr",
                "addmm_": "addmm_", "baddbmm_": "baddbmm_", "addbmm_": "addbmm_", "addmv_": "addmv_",
                "addr_": "addr_"}
# the aten ops routing reads in their default overload alone
_READ = ("linear", "matmul", "mm", "addmm", "bmm", "baddbmm")


def aten_call(node) -> tuple[str, str] | None:
    """(op name, overload name) of the aten op call node `node` calls (`aten.mm.out`: ("mm",
    "out")), or None for any other node."""
    target = node.target
    if node.op != "call_function" or getattr(target, "namespace", None) != "aten":
        return None
    name = getattr(target, "_opname", None)
    return (name, getattr(target, "_overloadname", "default")) if name else None


def other_targets() -> dict:
    """The targets (torch's functions, Tensor methods' names) of the products `other_kind`
    names, each with its name."""
    import torch

    functions = {torch.tensordot: "tensordot", torch.addbmm: "addbmm", torch.linalg.multi_dot: "multi_dot",
                 torch.chain_matmul: "chain_matmul", torch.nn.functional.bilinear: "bilinear",
                 torch._int_mm: "_int_mm", torch.mv: "mv", torch.dot: "dot", torch.vdot: "vdot",
                 torch.inner: "inner", torch.addmv: "addmv", torch.addr: "addr"}
    methods = {name: name for name in ("addmm_", "baddbmm_", "addbmm_", "addmv_", "addbmm", "mv", "dot", "vdot",
                                       "inner", "addmv", "addr", "addr_")}
    return {**functions, **methods}


def other_kind(node, others: dict | None = None) -> str | None:
    """The name of the product routing does not read that `node` calls (tensordot, mv,
    addmm_, multi_dot, bilinear, _int_mm, ...), or None. `others`: other_targets(), made once."""
    if node.op not in ("call_function", "call_method"):
        return None
    try:
        found = (others if others is not None else other_targets()).get(node.target)
    except TypeError:  # an unhashable target
        found = None
    if found is not None:
        return found
    aten = aten_call(node)
    return _ATEN_OTHERS.get(aten[0]) if aten is not None else None


def other_overload(node) -> tuple[str, str] | None:
    """(op name, overload) where `node` calls an overload other than the default of an aten
    op routing reads (`aten.mm.out`, `aten.mm.dtype`): a product with arguments our ops do not
    take; else None."""
    aten = aten_call(node)
    return aten if aten is not None and aten[0] in _READ and aten[1] != "default" else None


def fused_kind(node, fused: dict[Any, str]) -> str | None:
    """The name of the fused op of torch's (an attention or encoder layer holding matmuls)
    `node` calls: a target of `fused` (torch's functions), or its aten op; else None."""
    from ..problem import FUSED_OPS

    if node.op != "call_function":
        return None
    if node.target in fused:
        return fused[node.target]
    aten = aten_call(node)
    return aten[0] if aten is not None and aten[0] in FUSED_OPS else None
