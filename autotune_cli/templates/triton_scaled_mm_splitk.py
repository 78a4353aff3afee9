"""triton::scaled_mm_splitk: the float8 GEMM for decode shapes, K split across programs and
the slices summed in one launch, rendered from jinja.

With a few rows of A (decode: M of 8 or 16) the output has few tiles and the time goes into
reading B once; a tiled kernel gives each program all of K, so a few dozen programs read B
for a GPU of 132 SMs. Here program (tile, split) multiplies its tile over one slice of K
(SPLIT_K slices, grid axis 1) and writes the float32 sum to its plane of a [SPLIT_K, M, N]
workspace; the last program of each tile to count itself in on the tile's arrival counter
sums the planes in slice order, applies the scales (tensorwise or rowwise) and the bias,
and writes C (triton::mm_splitk's FUSED_REDUCE mode, templates/triton_splitk.py, says why
that is safe: a barrier and an acq_rel count before, L2 reads after, the counter set back
to 0 for the next call). Deterministic: the same inputs give the same bits.

The workspace and the counters are made on the first run and kept by the kernel
(`keeps_buffers`: one per calling thread and stream). Layout: A row-major, B column-major
(the float8 MMA's K-major operands), C row-major; the scales and the accumulation as
triton::scaled_mm (templates/triton_scaled_mm.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..problem import EPILOGUE_SCALES, OUT_DTYPES, GemmProblem
from .base import Operands
from .params import Bool, Choice, Int
from .registry import register_template
from .kernel_files import load_kernel
from .triton_base import TILE_KEYS, TILE_SCHEMA, jinja_template, output_tiles
from .triton_scaled_mm import TritonScaledMMTiledTemplate, epilogue_scale_strides, pointer_operands
from .triton_splitk import SplitKKernel, k_per_split

TEMPLATE_FILE = Path(__file__).with_name("triton_scaled_mm_splitk.py.jinja")


class TritonScaledMMSplitKTemplate(TritonScaledMMTiledTemplate):
    uid = "triton::scaled_mm_splitk"
    ops = ("scaled_mm",)
    template_file = TEMPLATE_FILE
    config_keys = TILE_KEYS + ("SPLIT_K",)
    params_schema = {**TILE_SCHEMA, "SPLIT_K": Int(2, 64), "EVEN_K": Bool(), "SCALE": Choice(EPILOGUE_SCALES),
                     "OUT_DTYPE": Choice(OUT_DTYPES), "FAST_ACCUM": Bool()}
    keeps_buffers = True  # the workspace and the arrival counters are written by every call

    def full_params(self, problem: GemmProblem, config: dict[str, Any]) -> dict[str, Any]:
        params = super().full_params(problem, config)
        if params["SPLIT_K"] < 2:
            raise ValueError(f"{self.uid}: SPLIT_K must be at least 2, got {params['SPLIT_K']}")
        params["EVEN_K"] = problem.k % (params["BLOCK_K"] * params["SPLIT_K"]) == 0
        return params

    def render(self, problem: GemmProblem, params: dict[str, Any]) -> str:
        context = self.render_context(problem, params)
        context.update(SCALE=params["SCALE"], HAS_BIAS=bool(problem.bias), EVEN_K=params["EVEN_K"],
                       FAST_ACCUM=bool(params["FAST_ACCUM"]), SPLIT_K=params["SPLIT_K"],
                       K_PER_SPLIT=k_per_split(problem.k, params["SPLIT_K"], params["BLOCK_K"]))
        return self.finish(jinja_template(self.template_file).render(**context))

    def build(self, problem: GemmProblem, params: dict[str, Any], kernel_dir: str) -> SplitKKernel:
        kernel = load_kernel(self.source_for_build(problem, params), kernel_dir)
        m, n, k = problem.m, problem.n, problem.k
        tiles = output_tiles(problem, params)
        rowwise = problem.scale == "row"

        def arguments(ops: Operands, ws, counters) -> tuple[tuple, tuple]:
            a, b, c, bias = pointer_operands(ops)
            return (a, b, c, bias, ops.scale_a, ops.scale_b, ws, counters, m, n, k, a.stride(0), b.stride(1),
                    c.stride(0), *epilogue_scale_strides(ops, rowwise)), ()

        # one kernel: the last slice of each tile sums the planes
        return SplitKKernel(kernel, None, params, (tiles, params["SPLIT_K"]), problem, planes=params["SPLIT_K"],
                            counters=tiles, arguments=arguments)


register_template(TritonScaledMMSplitKTemplate())
