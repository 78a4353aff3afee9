"""triton::scaled_mm_blockwise: the float8 GEMM with blockwise scales (1x128 blocks of A,
128x128 blocks of B, as DeepSeek-style models quantize), rendered from jinja.

A block's scale changes along K, so it cannot wait for the epilogue as the tensorwise and
rowwise scales do (templates/triton_scaled_mm.py): the main loop takes K in steps of one
block (BLOCK_K = 128), runs each step's dot in fp32 and adds it times its scales (the rows'
of A for that step, the tile's block of B) to the accumulator. BLOCK_N divides 128, so that
a tile's columns share one block of B's scales; the problem has K and N multiples of 128
(problem.py), so no K or N mask. Plain pointer loads (sm_89 and later, as
triton::scaled_mm); the scales are read through their strides, any layout (torch's
cuBLASLt path takes them column-major, runner/verify.py makes them so). Each step summed
apart is what use_fast_accum=False asks; blockwise problems have no fast accumulation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..problem import OUT_DTYPES, SCALE_BLOCK, GemmProblem
from .base import Operands
from .params import Choice
from .registry import register_template
from .kernel_files import load_kernel
from .triton_base import TILE_SCHEMA, OneLaunchKernel, jinja_template, output_tiles
from .triton_scaled_mm import TritonScaledMMTiledTemplate, pointer_operands

TEMPLATE_FILE = Path(__file__).with_name("triton_scaled_mm_block.py.jinja")


class TritonScaledMMBlockTemplate(TritonScaledMMTiledTemplate):
    uid = "triton::scaled_mm_blockwise"
    ops = ("scaled_mm",)
    template_file = TEMPLATE_FILE
    params_schema = {**TILE_SCHEMA, "SCALE": Choice(("block",)), "OUT_DTYPE": Choice(OUT_DTYPES)}

    def supports(self, problem: GemmProblem) -> bool:
        return problem.op in self.ops and problem.scale == "block"

    def full_params(self, problem: GemmProblem, config: dict[str, Any]) -> dict[str, Any]:
        # TritonTemplate's: the tiled template's EVEN_K and FAST_ACCUM have no place here
        params = super(TritonScaledMMTiledTemplate, self).full_params(problem, config)
        if params["BLOCK_K"] != SCALE_BLOCK:
            raise ValueError(f"{self.uid}: BLOCK_K must be {SCALE_BLOCK} (one block of scales a step), "
                             f"got {params['BLOCK_K']}")
        block_n = params["BLOCK_N"]
        if block_n < 16 or block_n > SCALE_BLOCK or SCALE_BLOCK % block_n:
            raise ValueError(f"{self.uid}: BLOCK_N must divide {SCALE_BLOCK} (16 or more), got {block_n}")
        params["SCALE"] = problem.scale
        params["OUT_DTYPE"] = problem.result_dtype
        return params

    def render(self, problem: GemmProblem, params: dict[str, Any]) -> str:
        context = self.render_context(problem, params)
        context.update(HAS_BIAS=bool(problem.bias))
        return self.finish(jinja_template(self.template_file).render(**context))

    def build(self, problem: GemmProblem, params: dict[str, Any], kernel_dir: str) -> OneLaunchKernel:
        if not self.supports(problem):
            raise ValueError(f"{self.uid} serves float8 GEMMs with blockwise scales, not {problem.describe()}")
        kernel = load_kernel(self.source_for_build(problem, params), kernel_dir)
        m, n, k = problem.m, problem.n, problem.k
        grid = (output_tiles(problem, params),)

        def arguments(ops: Operands) -> tuple:
            a, b, c, bias = pointer_operands(ops)
            sa, sb = ops.scale_a, ops.scale_b
            return (a, b, c, bias, sa, sb, m, n, k, a.stride(0), b.stride(1), c.stride(0),
                    sa.stride(0), sa.stride(1), sb.stride(0), sb.stride(1))

        return OneLaunchKernel(kernel, params, grid, arguments)


register_template(TritonScaledMMBlockTemplate())
