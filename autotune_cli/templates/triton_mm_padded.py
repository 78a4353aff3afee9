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
from .base import Operands, Runnable, bound, copy_when_changed, operand_copier, torch_dtype
from .registry import register_template
from .triton_mm import TritonMMTemplate

ALIGN_ELEMENTS = 16  # what Triton's divisibility specialisation can see


def padded_k(problem: GemmProblem) -> int:
    return -(-problem.k // ALIGN_ELEMENTS) * ALIGN_ELEMENTS


def padded_n(problem: GemmProblem) -> int:
    """The row pitch of the copy of B, and of the output where N is off."""
    return -(-problem.n // ALIGN_ELEMENTS) * ALIGN_ELEMENTS


class TritonMMPaddedTemplate(TritonMMTemplate):
    keeps_buffers = True  # the padded copies of the operands
    padded_twin = None  # it is the twin

    uid = "triton::mm_padded"
    ops = ("mm", "addmm")

    def supports(self, problem: GemmProblem) -> bool:
        return problem.op in self.ops and (problem.k % ALIGN_ELEMENTS != 0 or problem.n % ALIGN_ELEMENTS != 0)

    def full_params(self, problem: GemmProblem, config: dict[str, Any]) -> dict[str, Any]:
        return super().full_params(replace(problem, k=padded_k(problem)), config)

    def source_text(self) -> str:
        """triton::mm's, and the copy kernels this one runs on CUDA (templates/row_copy.py)."""
        return super().source_text() + Path(__file__).with_name("row_copy.py").read_text()

    def out_pitch(self, problem: GemmProblem, params: dict[str, Any]) -> int | None:
        """N rounded up to 16 elements where N is not a multiple of 16 (see the module)."""
        return padded_n(problem) if problem.n % ALIGN_ELEMENTS else None

    def render(self, problem: GemmProblem, params: dict[str, Any]) -> str:
        return super().render(replace(problem, k=padded_k(problem), layout="nn"), params)

    def build(self, problem: GemmProblem, params: dict[str, Any], kernel_dir: str) -> Runnable:
        import torch

        kp = padded_k(problem)
        n_lead = padded_n(problem)  # B's row pitch
        # B's columns wrap at its padded width (zeros past N): wrapped vectors stay aligned;
        # an output made with the padded pitch is written over whole rows.
        inner = super().build(replace(problem, k=kp, layout="nn"), params, kernel_dir,
                              load_n=n_lead if n_lead != problem.n else None,
                              store_pitch=self.out_pitch(problem, params))
        dtype = torch_dtype(problem.dtype)
        device = "cuda" if problem.device == "cuda" else "cpu"
        k, n = problem.k, problem.n
        buffers: dict = {}  # per device: made at the first call (a compile process's: "meta")
        copier = operand_copier(device)

        def pads(on):
            """(A's padded buffer, B's, a copy into each) (None where no padding), on the
            device of tensor `on`; keyed by its index (-1 off CUDA), cheaper than the device."""
            key = on.get_device()
            kept = buffers.get(key)
            if kept is None:
                a_pad = torch.zeros(problem.m, kp, dtype=dtype, device=on.device) if kp != k else None
                b_pad = (torch.zeros(kp, n_lead, dtype=dtype, device=on.device)[:, :n]
                         if (kp != k or n_lead != n) else None)
                # the padding stays zero (written as zeros, or not at all)
                kept = buffers[key] = (a_pad, b_pad,
                                       copier(a_pad[:, :k]) if a_pad is not None else None,
                                       copier(b_pad[:k, :]) if b_pad is not None else None)
            return kept

        def padded(ops: Operands) -> Operands:
            a, b = ops.a, ops.b
            a_pad, b_pad, copy_a, copy_b = pads(a)
            if a_pad is not None:
                copy_a(a)
                a = a_pad
            if b_pad is not None:
                copy_b(b)
                b = b_pad
            return Operands(a=a, b=b, out=ops.out, bias=ops.bias)

        def run(ops: Operands) -> None:
            inner(padded(ops))

        def warmup(ops: Operands) -> list:  # compiles only: the buffers' contents do not matter
            a_pad, b_pad, _, _ = pads(ops.a)
            return inner.warmup(Operands(a=ops.a if a_pad is None else a_pad,
                                         b=ops.b if b_pad is None else b_pad, out=ops.out, bias=ops.bias))

        capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None) if device == "cuda" else None
        if capturing is None:
            capturing = lambda: False  # noqa: E731

        def bind(sample: Operands, reuse_b: bool = False):
            """run, for operands laid out as `sample` (see base.bound): the copies' and the
            kernel's launches bound; with `reuse_b`, B's copy skipped while B is an unchanged
            weight (base.copy_when_changed)."""
            a_pad, b_pad, copy_a, copy_b = pads(sample.a)
            fill_a = copy_a.fixed(sample.a) if a_pad is not None else None
            fill_b = copy_b.fixed(sample.b) if b_pad is not None else None
            if fill_b is not None and reuse_b:
                fill_b = copy_when_changed(fill_b, capturing)
            inner_sample = Operands(a=sample.a if a_pad is None else a_pad, b=sample.b if b_pad is None else b_pad,
                                    out=sample.out, bias=sample.bias)
            launch = bound(inner, inner_sample)

            def go(a, b, out, bias) -> None:
                if fill_a is not None:
                    fill_a(a)
                    a = a_pad
                if fill_b is not None:
                    fill_b(b)
                    b = b_pad
                launch(a, b, out, bias)

            return go

        run.warmup = warmup  # type: ignore[attr-defined]
        run.bind = bind  # type: ignore[attr-defined]
        return run


register_template(TritonMMPaddedTemplate())
