"""triton::mm_padded: triton::mm on operands copied into K-padded, 16-byte-aligned buffers.

When K·dtype_size is not a multiple of 16 bytes (K = 777 in fp16, say), every row of a
row-major A starts misaligned and the tiled kernel cannot use wide loads. Copying A into
[M, Kp] and B into [Kp, N] row-major buffers, Kp = K rounded up to 16 elements, with the
padding zero (so the product is unchanged), costs one pass over the operands and lets the
main kernel run aligned with EVEN_K possible. Whether that pays is for the benchmark to say:
this is one more candidate, verified and timed like the rest (copies included).
Offered only where it can help: K misaligned, N aligned (the output and B rows).
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
        return (problem.op in self.ops
                and (problem.k * problem.dtype_size) % ALIGN_BYTES != 0
                and (problem.n * problem.dtype_size) % ALIGN_BYTES == 0)

    def full_params(self, problem: GemmProblem, config: dict[str, Any]) -> dict[str, Any]:
        return super().full_params(replace(problem, k=padded_k(problem)), config)

    def render(self, problem: GemmProblem, params: dict[str, Any]) -> str:
        return super().render(replace(problem, k=padded_k(problem), layout="nn"), params)

    def build(self, problem: GemmProblem, params: dict[str, Any], kernel_dir: str) -> Runnable:
        import torch

        kp = padded_k(problem)
        inner = super().build(replace(problem, k=kp, layout="nn"), params, kernel_dir)
        dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[problem.dtype]
        device = "cuda" if problem.device == "cuda" else "cpu"
        a_pad = torch.zeros(problem.m, kp, dtype=dtype, device=device)
        b_pad = torch.zeros(kp, problem.n, dtype=dtype, device=device)
        k = problem.k

        def padded(ops: Operands) -> Operands:
            a_pad[:, :k].copy_(ops.a)  # the padding stays zero: it is never written
            b_pad[:k, :].copy_(ops.b)
            return Operands(a=a_pad, b=b_pad, out=ops.out, bias=ops.bias)

        def run(ops: Operands) -> None:
            inner(padded(ops))

        def warmup(ops: Operands) -> list:
            return inner.warmup(Operands(a=a_pad, b=b_pad, out=ops.out, bias=ops.bias))

        run.warmup = warmup  # type: ignore[attr-defined]
        return run


register_template(TritonMMPaddedTemplate())
