"""Inputs and verification: fresh random operands (never zeros), a reference in higher
precision, and a dtype-aware check. Imports torch; runs inside a worker.

The output is made by `templates.base.empty_out` with the row pitch a template asks for:
a [M, N] view of padded rows where the pitch is larger than N. NaN fills and the check read
the [M, N] view, the values a kernel owes; its padding is never read."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..problem import GemmProblem
from ..templates.base import Operands, empty_out, torch_dtype

# Relative Frobenius error allowed, and per-element slack in units of a typical output entry.
NORM_TOLERANCE = {"float16": 2e-3, "bfloat16": 1.2e-2, "float32": 1e-4, "tf32": 3e-3}
ELEMENT_TOLERANCE = {"float16": 1e-2, "bfloat16": 6e-2, "float32": 1e-4, "tf32": 1.5e-2}


def _operand(shape: tuple[int, ...], transposed: bool, dtype, device: str, generator):
    """A random tensor of `shape`; stored column-major when `transposed`."""
    import torch

    if transposed:
        stored = shape[:-2] + (shape[-1], shape[-2])
        tensor = torch.randn(stored, generator=generator, dtype=torch.float32, device=device)
        return tensor.to(dtype).transpose(-1, -2)
    return torch.randn(shape, generator=generator, dtype=torch.float32, device=device).to(dtype)


def make_operands(problem: GemmProblem, seed: int, device: str, pitch: int | None = None) -> Operands:
    """Random A, B (and bias) for `problem`, and an uninitialised output whose rows are
    `pitch` elements apart (None: contiguous)."""
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    dtype = torch_dtype(problem.dtype)
    a = _operand(problem.a_shape(), problem.a_transposed, dtype, device, generator)
    b = _operand(problem.b_shape(), problem.b_transposed, dtype, device, generator)
    bias = None
    if problem.op == "addmm":
        bias = torch.randn(problem.bias_shape(), generator=generator, device=device).to(dtype)
    return Operands(a=a, b=b, out=empty_out(problem, pitch, dtype, device), bias=bias)


def empty_operands(problem: GemmProblem, device: str, pitch: int | None = None) -> Operands:
    """Operands of the right shapes, strides and dtype (the output's rows `pitch` apart), with
    no kernel run to fill them: enough to compile a kernel for them."""
    import torch

    dtype = torch_dtype(problem.dtype)

    def operand(shape, transposed):
        if transposed:
            stored = shape[:-2] + (shape[-1], shape[-2])
            return torch.empty(stored, dtype=dtype, device=device).transpose(-1, -2)
        return torch.empty(shape, dtype=dtype, device=device)

    bias = torch.empty(problem.bias_shape(), dtype=dtype, device=device) if problem.op == "addmm" else None
    return Operands(a=operand(problem.a_shape(), problem.a_transposed),
                    b=operand(problem.b_shape(), problem.b_transposed),
                    out=empty_out(problem, pitch, dtype, device), bias=bias)


def reference(problem: GemmProblem, ops: Operands):
    """The exact product in float64 (on the operands' device)."""
    import torch

    a, b = ops.a.double(), ops.b.double()
    ref = torch.matmul(a, b)
    if ops.bias is not None:
        ref = ref + ops.bias.double()
    return ref


def poison(ops: Operands) -> None:
    """Fill the output with NaN so that an element the kernel never writes is caught (the
    [M, N] view: a padded row's padding is the kernel's to use, never checked)."""
    poison_tensor(ops.out)


def poison_tensor(out) -> None:
    """`poison` for an output tensor held apart from its Operands (a kernel may rebind the
    field: the tensor the caller owns is the one reset and checked)."""
    out.fill_(float("nan"))


@dataclass(frozen=True)
class Check:
    ok: bool
    rel_error: float
    reason: str = ""


def check(problem: GemmProblem, out, ref) -> Check:
    import torch

    precision = "tf32" if problem.allow_tf32 else problem.dtype
    got = out.double()
    finite = torch.isfinite(got)
    if not bool(finite.all()):
        bad = int((~finite).sum())
        return Check(False, math.inf, f"{bad} of {got.numel()} outputs are NaN/inf or never written")
    diff = got - ref
    ref_norm = float(torch.linalg.vector_norm(ref))
    rel = float(torch.linalg.vector_norm(diff)) / max(ref_norm, 1e-30)
    if rel > NORM_TOLERANCE[precision]:
        return Check(False, rel, f"relative error {rel:.2e} > {NORM_TOLERANCE[precision]:.0e}")
    typical = ref_norm / math.sqrt(max(ref.numel(), 1))
    allowed = ELEMENT_TOLERANCE[precision] * (typical + ref.abs())
    over = diff.abs() > allowed
    if bool(over.any()):
        worst = float(diff.abs().max())
        return Check(False, rel, f"{int(over.sum())} element(s) off, worst by {worst:.3g} "
                                 f"(typical |out| {typical:.3g})")
    return Check(True, rel)
