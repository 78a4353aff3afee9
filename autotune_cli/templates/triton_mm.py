"""triton::mm (mm and addmm) and triton::bmm: a tiled Triton GEMM rendered from jinja.

The tuned config (BLOCK_M/N/K, GROUP_M, num_stages, num_warps) and the values the problem
fixes (EVEN_K, ACC_TYPE, ALLOW_TF32, UPCAST, HAS_BIAS, BATCHED) are written into the kernel
source as literals, so each choice is one readable file of real Triton code. Strides are
runtime arguments, so one kernel serves every layout; M, N and K too, so problems of one
config share one compiled kernel, except in a config's FIXED_NK twin, which writes N and K in
(a known trip count and column wrap: 3-8% on short-K odd widths,
bench/README.md "Odd widths"); the tune times that twin for its best contenders alone
(search/base.py `time_fixed_twins`), one compile more each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..problem import GemmProblem
from .base import Operands
from .params import Bool
from .registry import register_template
from .kernel_files import load_kernel
from .triton_base import TILE_SCHEMA, ZERO_ONE, OneLaunchKernel, TritonTemplate, bias_arguments

TEMPLATE_FILE = Path(__file__).with_name("triton_mm.py.jinja")


class TritonMMTemplate(TritonTemplate):
    uid = "triton::mm"
    ops = ("mm", "addmm")
    tile_model = "prunes"  # choices.tile_model_stage
    rows_in_m_slot = True  # choices.decode_stage
    template_file = TEMPLATE_FILE
    params_schema = {**TILE_SCHEMA, "EVEN_K": Bool(), "FIXED_NK": ZERO_ONE}
    defaults = {"FIXED_NK": 0}

    def extra_params(self, problem: GemmProblem, params: dict[str, Any]) -> None:
        params["EVEN_K"] = problem.k % params["BLOCK_K"] == 0

    def fixed_twin(self, config: dict[str, Any]) -> dict[str, Any] | None:
        return {**config, "FIXED_NK": 1} if not config.get("FIXED_NK") else None

    def render(self, problem: GemmProblem, params: dict[str, Any]) -> str:
        return self.render_with(problem, params, EVEN_K=params["EVEN_K"], BATCHED=problem.op == "bmm",
                                FIXED_NK=bool(params["FIXED_NK"]), N=problem.n, K=problem.k,
                                WIDE_INDEX=problem.wide_offsets)

    def build(self, problem: GemmProblem, params: dict[str, Any], kernel_dir: str,
              load_n: int | None = None, store_pitch: int | None = None) -> OneLaunchKernel:
        """`load_n`: the width B's columns wrap at (N_LOAD), N unless B is copied into wider
        rows (triton::mm_padded). `store_pitch`: the padded row pitch the output is made with
        (`out_pitch`, triton::mm_padded); an output that has it is written over whole rows
        (N_STORE, at most `load_n`), its padding included, so that the stores can be vectorized.
        Any other output (one a caller made contiguous) is written up to N only."""
        source = self.render(problem, params)
        kernel = load_kernel(source, kernel_dir)
        bm, bn = params["BLOCK_M"], params["BLOCK_N"]
        m, n, k = problem.m, problem.n, problem.k
        n_load = n if load_n is None else load_n
        if params["FIXED_NK"] and (load_n is not None or store_pitch is not None):
            raise ValueError(f"{self.uid}: FIXED_NK writes N in as B's wrap and the stores' width")
        if store_pitch is not None and not n < store_pitch <= n_load:
            raise ValueError(f"{self.uid}: an output pitch of {store_pitch} must lie past N ({n}) "
                             f"and within the width B's columns wrap at ({n_load})")
        grid = (((m + bm - 1) // bm) * ((n + bn - 1) // bn), problem.b if problem.op == "bmm" else 1)
        batched = problem.op == "bmm"
        bias_strides_n = problem.op == "addmm" and problem.bias == "n"

        def arguments(ops: Operands) -> tuple:
            a, b, c = ops.a, ops.b, ops.out
            sa, sb, sc = a.stride(), b.stride(), c.stride()
            if batched:
                a_args, b_args, c_args = sa, sb, sc
            else:
                a_args, b_args, c_args = (0, *sa), (0, *sb), (0, *sc)
            bias, bias_args = bias_arguments(ops, bias_strides_n)
            n_store = store_pitch if sc[-2] == store_pitch and sc[-1] == 1 else n
            return (a, b, c, bias, m, n, k, n_load, n_store, *a_args, *b_args, *c_args, *bias_args)

        return OneLaunchKernel(kernel, params, grid, arguments)


class TritonBMMTemplate(TritonMMTemplate):
    """The same kernel over a batch of problems."""

    uid = "triton::bmm"
    ops = ("bmm",)


register_template(TritonMMTemplate())
register_template(TritonBMMTemplate())
