"""triton::mm_padded: triton::mm on operands copied into 16-byte-aligned buffers.

When K·dtype_size is not a multiple of 16 bytes (K = 777 in fp16, say), every row of a
row-major A starts misaligned and the tiled kernel cannot use wide loads; when N is off
(a vocabulary of 50257), B's rows are. A is copied into an [M, Kp] buffer and B into one
whose rows are Kp long and Np apart (Kp, Np rounded up to 16 bytes), the K padding zero so
the product is unchanged; the kernel then loads aligned tiles (EVEN_K possible) and writes
the output in place with masked stores. The copies cost a pass over the operands: whether
that pays is for the benchmark to say, as for every candidate (copies included in its time).
Offered only where it can help: K or N misaligned.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..problem import GemmProblem
from .base import Operands, Runnable
from .registry import register_template
from .triton_mm import TritonMMTemplate

ALIGN_BYTES = 16


def padded_k(problem: GemmProblem) -> int:
    step = ALIGN_BYTES // problem.dtype_size
    return -(-problem.k // step) * step


class TritonMMPaddedTemplate(TritonMMTemplate):
    def __init__(self) -> None:
        super().__init__("triton::mm_padded", ("mm", "addmm"))

    def supports(self, problem: GemmProblem) -> bool:
        return problem.op in self.ops and (
            (problem.k * problem.dtype_size) % ALIGN_BYTES != 0
            or (problem.n * problem.dtype_size) % ALIGN_BYTES != 0)

    def full_params(self, problem: GemmProblem, config: dict[str, Any]) -> dict[str, Any]:
        return super().full_params(replace(problem, k=padded_k(problem)), config)

    def render(self, problem: GemmProblem, params: dict[str, Any]) -> str:
        return super().render(replace(problem, k=padded_k(problem), layout="nn"), params)

    def build(self, problem: GemmProblem, params: dict[str, Any], kernel_dir: str) -> Runnable:
        import torch

        kp = padded_k(problem)
        step = ALIGN_BYTES // problem.dtype_size
        n_lead = -(-problem.n // step) * step  # B's row pitch
        inner = super().build(replace(problem, k=kp, layout="nn"), params, kernel_dir)
        dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[problem.dtype]
        device = "cuda" if problem.device == "cuda" else "cpu"
        k, n = problem.k, problem.n
        a_pad = torch.zeros(problem.m, kp, dtype=dtype, device=device) if kp != k else None
        b_pad = (torch.zeros(kp, n_lead, dtype=dtype, device=device)[:, :n]
                 if (kp != k or n_lead != n) else None)

        def padded(ops: Operands) -> Operands:
            a, b = ops.a, ops.b
            if a_pad is not None:
                a_pad[:, :k].copy_(a)  # the padding stays zero: it is never written
                a = a_pad
            if b_pad is not None:
                b_pad[:k, :].copy_(b)
                b = b_pad
            return Operands(a=a, b=b, out=ops.out, bias=ops.bias)

        def run(ops: Operands) -> None:
            inner(padded(ops))

        def warmup(ops: Operands) -> list:  # compiles only: the buffers' contents do not matter
            return inner.warmup(Operands(a=ops.a if a_pad is None else a_pad,
                                         b=ops.b if b_pad is None else b_pad, out=ops.out, bias=ops.bias))

        run.warmup = warmup  # type: ignore[attr-defined]
        return run


register_template(TritonMMPaddedTemplate())
