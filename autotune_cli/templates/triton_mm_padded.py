"""triton::mm_padded: triton::mm on operands copied into buffers with aligned rows.

Triton assumes a row pitch aligned only when it is a multiple of 16 elements (it marks an
integer argument divisible by 16, or not at all). When K is not (K = 777 in fp16, say), the
rows of a row-major A are loaded without wide loads; when N is not (a vocabulary of 50257),
B's are. A is copied into an [M, Kp] buffer and B into one whose rows are Kp long and Np
apart (Kp, Np rounded up to 16 elements), the K padding zero so
the product is unchanged; the kernel then loads aligned tiles (EVEN_K possible; B's columns
wrap at the padded width, whose extra columns are zero, so its vectors stay aligned: wrapped at
N they were misaligned, an H200 "misaligned address" on a vocabulary of 50257).

The output is the other half, and the larger one (lm_head 2048x50257x768: 206 MB written,
77 MB read): with N off, its rows are asked padded to Np too (`out_pitch`), the output a
[M, N] view of [M, Np] storage, as Inductor's max-autotune returns it (there stride [50264, 1]).
The row stride is then a multiple of 16 (Triton specializes on it), and the kernel's stores
cover whole padded rows (its N_STORE = Np: the padding columns get B's zero columns'
products), so the mask is uniform over 16-element runs and the stores can be vectorized;
into a contiguous output they were single elements. No copy of the output is made.

The copies of A and B cost a pass over the operands: whether that pays is for the benchmark
to say, as for every candidate (copies included in its time). Offered only where it can
help: K or N not a multiple of 16.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ..problem import GemmProblem
from .base import Operands, PaddedOperands, bound, torch_dtype
from .kernel import Kernel
from .params import Choice
from .registry import register_template
from .triton_base import OneLaunchKernel
from .triton_mm import TritonMMTemplate

ALIGN_ELEMENTS = 16  # what Triton's divisibility specialisation can see


def padded_k(problem: GemmProblem) -> int:
    return -(-problem.k // ALIGN_ELEMENTS) * ALIGN_ELEMENTS


def padded_n(problem: GemmProblem) -> int:
    """The row pitch of the copy of B, and of the output where N is off."""
    return -(-problem.n // ALIGN_ELEMENTS) * ALIGN_ELEMENTS


class TritonMMPaddedTemplate(TritonMMTemplate):
    keeps_buffers = True  # the padded copies of the operands
    pads = TritonMMTemplate.uid  # choices.misaligned_stage

    uid = "triton::mm_padded"
    ops = ("mm", "addmm")
    params_schema = {**TritonMMTemplate.params_schema, "FIXED_NK": Choice((0,))}  # no twin (fixed_twin)

    def supports(self, problem: GemmProblem) -> bool:
        return problem.op in self.ops and (problem.k % ALIGN_ELEMENTS != 0 or problem.n % ALIGN_ELEMENTS != 0)

    def full_params(self, problem: GemmProblem, config: dict[str, Any]) -> dict[str, Any]:
        return super().full_params(replace(problem, k=padded_k(problem)), config)

    def fixed_twin(self, config: dict[str, Any]) -> dict[str, Any] | None:
        return None  # its B wraps at the padded width, its stores at the output's pitch

    def source_text(self) -> str:
        """triton::mm's, and the copy kernels this one runs on CUDA (templates/row_copy.py)."""
        return super().source_text() + Path(__file__).with_name("row_copy.py").read_text()

    def out_pitch(self, problem: GemmProblem, params: dict[str, Any]) -> int | None:
        """N rounded up to 16 elements where N is not a multiple of 16 (see the module)."""
        return padded_n(problem) if problem.n % ALIGN_ELEMENTS else None

    def render(self, problem: GemmProblem, params: dict[str, Any]) -> str:
        return super().render(replace(problem, k=padded_k(problem), layout="nn"), params)

    def build(self, problem: GemmProblem, params: dict[str, Any], kernel_dir: str) -> PaddedMMKernel:
        n_lead = padded_n(problem)  # B's row pitch
        # B's columns wrap at its padded width (zeros past N): wrapped vectors stay aligned;
        # an output made with the padded pitch is written over whole rows.
        inner = super().build(replace(problem, k=padded_k(problem), layout="nn"), params, kernel_dir,
                              load_n=n_lead if n_lead != problem.n else None,
                              store_pitch=self.out_pitch(problem, params))
        return PaddedMMKernel(problem, inner)


class PaddedMMKernel(Kernel):
    """triton::mm's kernel (`inner`, built for K padded) on copies of A and B into buffers
    with aligned rows, made per device at its first call (a compile process's: "meta")."""

    compiles = True

    def __init__(self, problem: GemmProblem, inner: OneLaunchKernel) -> None:
        self.problem, self.inner = problem, inner
        self.device = "cuda" if problem.device == "cuda" else "cpu"
        self.pads: dict[int, PaddedOperands] = {}  # by the device's index (-1 off CUDA): cheaper than the device

    def padded(self, on) -> PaddedOperands:
        """The copies on the device of tensor `on`."""
        key = on.get_device()
        kept = self.pads.get(key)
        if kept is None:
            import torch

            problem, kp, n_lead = self.problem, padded_k(self.problem), padded_n(self.problem)
            m, n, k = problem.m, problem.n, problem.k
            dtype = torch_dtype(problem.dtype)
            a_pad = torch.zeros(m, kp, dtype=dtype, device=on.device) if kp != k else None
            b_pad = torch.zeros(kp, n_lead, dtype=dtype, device=on.device)[:, :n] if (kp != k or n_lead != n) else None
            kept = self.pads[key] = PaddedOperands(a_pad, a_pad[:, :k] if a_pad is not None else None,
                                                   b_pad, b_pad[:k, :] if b_pad is not None else None, self.device)
        return kept

    def __call__(self, ops: Operands) -> None:
        a, b = self.padded(ops.a)(ops.a, ops.b)
        self.inner(Operands(a=a, b=b, out=ops.out, bias=ops.bias))

    def warmup(self, ops: Operands) -> list:  # compiles only: the buffers' contents do not matter
        pads = self.padded(ops.a)
        return self.inner.warmup(Operands(a=ops.a if pads.a_buffer is None else pads.a_buffer,
                                          b=ops.b if pads.b_buffer is None else pads.b_buffer,
                                          out=ops.out, bias=ops.bias))

    def bind(self, sample: Operands, reuse_b: bool = False):
        """The call for operands laid out as `sample` (see base.bound): the copies' and the
        kernel's launches bound; with `reuse_b`, B's copy skipped while B is an unchanged
        weight (base.copy_when_changed)."""
        pads = self.padded(sample.a)
        pad = pads.bind(sample.a, sample.b, reuse_b)
        inner_sample = Operands(a=sample.a if pads.a_buffer is None else pads.a_buffer,
                                b=sample.b if pads.b_buffer is None else pads.b_buffer,
                                out=sample.out, bias=sample.bias)
        launch = bound(self.inner, inner_sample)

        def go(a, b, out, bias) -> None:
            a, b = pad(a, b)
            launch(a, b, out, bias)

        return go


register_template(TritonMMPaddedTemplate())
