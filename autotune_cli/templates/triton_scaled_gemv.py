"""triton::scaled_gemv (scaled_mm, M <= 16): the float8 decode GEMM as a stream over B.

A decode GEMM reads B once and does little else; in float8 B is half the bytes of bf16, so
the kernel that keeps the most loads in flight wins, as for triton::gemv. This is that
template (templates/triton_gemv.py: the forms, the split over K, the fused sum of the
slices) for torch._scaled_mm's operands: A [m, k] row-major and B [k, n] column-major
(stored [n, k], the decode weight's layout) in float8, the float32 sum multiplied by the
tensorwise or rowwise scales and then the [n] bias added where C is written (by the one
kernel, by the last slice with FUSED_REDUCE, or by the second kernel), rounded to the
output dtype. DOT takes float8 into the matrix units; without fast accumulation (torch's
default) each K step's products are summed apart and added in float32. Blockwise scales
(1x128 blocks of A, 128x128 of B) are applied at every step instead: a step lies in one
128-long block of K (BLOCK_K divides 128), its sum is multiplied by the two blocks' scales
and added in float32; only the forms that sum each step serve them (DOT, REDUCE_EACH). The
scale kind, the output dtype and the accumulation are params, as in the other float8
templates, so that two problems differing in them never share a compile or a cached config.
"""

from __future__ import annotations

from typing import Any

from ..problem import FP8_DTYPES, OUT_DTYPES, SCALE_BLOCK, SCALES, GemmProblem
from .base import Operands
from .params import Bool, Choice
from .registry import register_template
from .triton_gemv import MAX_M, TritonGemvTemplate
from .triton_scaled_mm import epilogue_scale_strides, float8_mma_unavailable, scaled_fields



class TritonScaledGemvTemplate(TritonGemvTemplate):
    uid = "triton::scaled_gemv"
    ops = ("scaled_mm",)
    dot_dtypes = FP8_DTYPES
    params_schema = {**TritonGemvTemplate.params_schema, "SCALE": Choice(SCALES),
                     "OUT_DTYPE": Choice(OUT_DTYPES), "FAST_ACCUM": Bool()}

    def supports(self, problem: GemmProblem) -> bool:
        """Decode shapes, with any of the scale kinds."""
        return problem.op in self.ops and problem.scale in SCALES and problem.m <= MAX_M

    def unavailable_reason(self, problem: GemmProblem, device) -> str | None:
        return float8_mma_unavailable(device, "the float8 GEMV")

    def extra_params(self, problem: GemmProblem, params: dict[str, Any]) -> None:
        super().extra_params(problem, params)
        params.update(scaled_fields(problem))
        if self.scales_in_loop(problem):
            if not (params["DOT"] or params["REDUCE_EACH"]) or not problem.b_transposed:
                raise ValueError(f"{self.uid}: blockwise scales need a form that sums each step "
                                 "(DOT or REDUCE_EACH) over B stored [n, k]")
            if SCALE_BLOCK % params["BLOCK_K"]:
                raise ValueError(f"{self.uid}: with blockwise scales BLOCK_K must divide {SCALE_BLOCK}, "
                                 f"got {params['BLOCK_K']}")

    def render_context(self, problem: GemmProblem, params: dict[str, Any]) -> dict[str, Any]:
        context = super().render_context(problem, params)
        context["HAS_BIAS"] = bool(problem.bias)  # scaled_mm's bias, a row vector [n]
        return context

    def scale_context(self, problem: GemmProblem, params: dict[str, Any]) -> dict[str, Any]:
        return {"SCALE": params["SCALE"], "FAST_ACCUM": bool(params["FAST_ACCUM"]), "SCALE_BLOCK": SCALE_BLOCK}

    def scales_in_loop(self, problem: GemmProblem) -> bool:
        return problem.scale == "block"

    def scale_arguments(self, problem: GemmProblem, ops: Operands) -> tuple[tuple, tuple]:
        """The two scales, then their strides: rowwise along M and N ([m, 1] and [1, n]);
        blockwise both of each ([m, k/128] and [k/128, n/128], any layout); tensorwise one
        value each, strides unused."""
        sa, sb = ops.scale_a, ops.scale_b
        if problem.scale == "block":
            return (sa, sb), (*sa.stride(), *sb.stride())
        return (sa, sb), epilogue_scale_strides(ops, problem.scale == "row")


register_template(TritonScaledGemvTemplate())
