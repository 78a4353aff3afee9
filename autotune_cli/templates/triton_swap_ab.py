"""triton::mm_swap_ab (mm, addmm and bmm): a Triton GEMM for decode shapes (small M) that
computes C^T = B^T A^T, rendered from jinja.

A decode GEMM has a handful of rows (M <= 64) and a long N. In a plain tile the rows sit in
the matrix instruction's M slot, which on Hopper (wgmma) is 64 rows per warpgroup: a 16-row
tile leaves most of it idle. Swapping the operands puts BLOCK_N columns of C in that slot
and the rows of A in the N slot (BLOCK_M: 16, 32 or 64): each program owns BLOCK_N columns
of C and all BLOCK_M rows of its M tile, reads B's tile as [BLOCK_N, BLOCK_K] and A's as
[BLOCK_K, BLOCK_M] through the strides (any layout, no copy), accumulates
acc[BLOCK_N, BLOCK_M] = dot(B^T, A^T) in float32 and stores it transposed (masked on M and
N), the bias added for addmm. The grid covers every M tile (and, for bmm, every batch on
axis 1), so the kernel is right for any M; it is offered for M <= 64 only (`supports`).
It wins the decode shapes of bench/gpu_llm_suite.py (bench/README.md, "Kernel speed").

The values the problem fixes (EVEN_K, EVEN_N: no masks on K, or on B's columns; ACC_TYPE,
the fp32 input precision, UPCAST under the interpreter, HAS_BIAS, BATCHED) are written into
the source; M, N, K and the strides are runtime arguments, and M is not specialized, so
every decode M shares one binary. There is no GROUP_M: programs are ordered M tile first,
so the few programs sharing a block of B's columns run together.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..problem import GemmProblem
from .base import Operands
from .params import Bool
from .registry import register_template
from .kernel_files import load_kernel
from .triton_base import TILE_SCHEMA, OneLaunchKernel, TritonTemplate, bias_arguments, output_tiles

TEMPLATE_FILE = Path(__file__).with_name("triton_swap_ab.py.jinja")
CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages", "num_warps")
MAX_M = 64  # offered up to here: BLOCK_M (the dot's N slot) is at most 64


class TritonSwapABTemplate(TritonTemplate):
    uid = "triton::mm_swap_ab"
    ops = ("mm", "addmm", "bmm")
    template_file = TEMPLATE_FILE
    config_keys = CONFIG_KEYS
    params_schema = {**{k: v for k, v in TILE_SCHEMA.items() if k != "GROUP_M"},
                     "EVEN_K": Bool(), "EVEN_N": Bool()}

    def supports(self, problem: GemmProblem) -> bool:
        """Decode shapes only: beyond MAX_M rows the plain tile fills the matrix units itself.
        Here rather than in the heuristic, so that the fingerprint of a larger problem (the
        hashes of the templates that serve it) does not hold this template's."""
        return problem.op in self.ops and problem.m <= MAX_M

    def extra_params(self, problem: GemmProblem, params: dict[str, Any]) -> None:
        params["EVEN_K"] = problem.k % params["BLOCK_K"] == 0
        params["EVEN_N"] = problem.n % params["BLOCK_N"] == 0

    def render(self, problem: GemmProblem, params: dict[str, Any]) -> str:
        return self.render_with(problem, params, EVEN_K=params["EVEN_K"], EVEN_N=params["EVEN_N"],
                                BATCHED=problem.op == "bmm")

    def build(self, problem: GemmProblem, params: dict[str, Any], kernel_dir: str) -> OneLaunchKernel:
        kernel = load_kernel(self.source_for_build(problem, params), kernel_dir)
        m, n, k = problem.m, problem.n, problem.k
        tiles = output_tiles(problem, params)
        batched = problem.op == "bmm"
        grid = (tiles, problem.b if batched else 1)
        bias_strides_n = problem.op == "addmm" and problem.bias == "n"

        def arguments(ops: Operands) -> tuple:
            a, b, c = ops.a, ops.b, ops.out
            sa, sb, sc = a.stride(), b.stride(), c.stride()
            if not batched:
                sa, sb, sc = (0, *sa), (0, *sb), (0, *sc)
            bias, bias_args = bias_arguments(ops, bias_strides_n)
            return (a, b, c, bias, m, n, k, *sa, *sb, *sc, *bias_args)

        return OneLaunchKernel(kernel, params, grid, arguments)


register_template(TritonSwapABTemplate())
