"""triton::gemv (mm and addmm, M <= 16): a decode GEMM as a stream over B, rendered from
jinja.

With a handful of rows, a GEMM is bound by reading B once from memory: what counts is
keeping enough loads in flight on every SM. Each program owns BLOCK_N columns of C and one
slice of K (grid (column blocks, SPLIT_K)); it reads B in [BLOCK_N, BLOCK_K] tiles along
B's contiguous dimension (K for B^T stored [n, k], the usual decode weight, layout ?t; N
for B [k, n], layout ?n) and multiplies each tile by all BLOCK_M rows of A, so that every
element of B is loaded once. Three forms of the product, each accumulating in float32:
  FMA (DOT=0, REDUCE_EACH=0): an elementwise [BLOCK_M, tile] accumulator of the products,
     reduced over BLOCK_K once after the loop (few instructions per element; the
     accumulator bounds the tile);
  REDUCE_EACH=1: the products summed over BLOCK_K at every step into a [BLOCK_M, BLOCK_N]
     accumulator, so that long tiles (a whole row of K) fit the registers;
  DOT=1 (float16, bfloat16): the matrix units, C^T's tile = B^T's [BLOCK_N, BLOCK_K] times
     A^T's [BLOCK_K, 16], rows past M read as zero (BLOCK_M is 16, the dot's least). The
     CUDA-core forms do M multiply-adds per element of B, which past a few rows cost more
     than the read.
BLOCK_M is M rounded up to a power of two (16 with DOT). SPLIT_K slices make column blocks
x SPLIT_K programs, enough to fill the GPU when N alone gives too few; with SPLIT_K > 1
each slice writes a float32 [M, N] plane of a workspace and a second small kernel sums the
planes in slice order, adds the bias and rounds: deterministic, no atomics in the sum. With
FUSED_REDUCE=1 there is no second launch (each a few microseconds in a decode GEMM of ten):
the last slice of a column block to arrive on its int32 counter (one acq_rel atomic per
program, kept with the workspace and left at zero) sums the block's planes in the same
order, so the same bits. With SPLIT_K = 1 the one kernel writes C itself. Every layout is read
through the strides (A may be transposed too); M, N, K and the strides are runtime arguments.

What the problem fixes is written into the source: EVEN_K (K a multiple of
SPLIT_K * BLOCK_K: no K masks), EVEN_N, EVEN_M (M == BLOCK_M: A unmasked), K_FAST (which of
B's dimensions is contiguous), HAS_BIAS, K_PER_SPLIT. EVICT (default 1) marks B's loads
evict_first and A's evict_last: B is read once, A by every program. The workspace is
allocated on the first run and kept by the kernel (`keeps_buffers`). PDL=1 launches each
kernel as a programmatic dependent launch (Hopper and later, Triton 3.4 and later;
`fit_to_device` turns it off elsewhere): the grid may be scheduled while the kernel before
it drains, waits for that kernel to finish (griddepcontrol.wait) before its first load, and
lets the next be scheduled at once; the same memory order as plain launches. It is a
--space choice (listed under this template's uid), off in the shipped lists: it gains only
after a kernel that signals its dependents early (another PDL kernel), which back-to-back
timing of one kernel always has and a model's GEMV, after a norm or an activation, rarely
has (bench/README.md).
FLAT_ROW=1 (M = 1, REDUCE_EACH, B^T) multiplies A's one row into B's [BLOCK_N, BLOCK_K] tile
as a 2-D product, as a reduction kernel tiles it, rather than through a [1, BLOCK_N,
BLOCK_K] one: the same sums, another register layout. The shipped lists offer it where it
led on a GPU (heuristics/gemv.py); bench/gemv_sweep.py --flat 0,1 times every tile both ways.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..problem import GemmProblem
from .base import Operands
from .params import Bool, Choice, Int
from .registry import register_template
from .kernel_files import load_kernels
from .triton_base import (TILE_SCHEMA, ZERO_ONE, OneLaunchKernel, TritonKernel, TritonTemplate, bias_arguments,
                          jinja_template)
from .triton_persistent_tma import installed_triton_version
from .triton_splitk import REDUCE_BLOCK, SplitKKernel, check_workspace, k_per_split

TEMPLATE_FILE = Path(__file__).with_name("triton_gemv.py.jinja")
CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "num_stages", "num_warps")
MAX_M = 16  # offered up to here; past it a tile with a matrix instruction reads B as fast
DEFAULTS = {"DOT": 0, "REDUCE_EACH": 0, "EVICT": 1, "FUSED_REDUCE": 0, "PDL": 0, "FLAT_ROW": 0}
PDL_CAPABILITY = (9, 0)  # griddepcontrol: Hopper and later
PDL_TRITON = (3, 4)  # the first Triton with launch_pdl and tl.extra.cuda.gdc_*
DOT_M = 16  # the dot's least size: BLOCK_M with DOT
DOT_DTYPES = ("float16", "bfloat16")  # a float32 dot would round its inputs to tf32


def gemv_block_m(m: int) -> int:
    """The rows of the one M tile: M rounded up to a power of two."""
    return 1 << max(0, (m - 1).bit_length())


def flat_row_serves(problem: GemmProblem, block_m: int, sums_each_step: bool) -> bool:
    """Whether FLAT_ROW can run a tile: one row of A (BLOCK_M 1) summed at every step
    (REDUCE_EACH, not DOT) along B^T's contiguous K, without blockwise scales."""
    return block_m == 1 and sums_each_step and problem.b_transposed and problem.scale != "block"


class TritonGemvTemplate(TritonTemplate):
    uid = "triton::gemv"
    ops = ("mm", "addmm")
    template_file = TEMPLATE_FILE
    dot_dtypes = DOT_DTYPES  # the dtypes DOT serves
    config_keys = CONFIG_KEYS
    defaults = DEFAULTS
    # No GROUP_M; blocks below 16 (but for DOT); the rows one tile of M.
    params_schema = {
        **{key: spec for key, spec in TILE_SCHEMA.items() if key != "GROUP_M"},
        "BLOCK_M": Int(1, MAX_M, power_of_two=True), "BLOCK_N": Int(1, 256, power_of_two=True),
        "BLOCK_K": Int(16, 8192, power_of_two=True), "SPLIT_K": Int(1, 128),
        "DOT": ZERO_ONE, "REDUCE_EACH": ZERO_ONE, "EVICT": ZERO_ONE, "FUSED_REDUCE": ZERO_ONE, "PDL": ZERO_ONE,
        "FLAT_ROW": ZERO_ONE,
        "num_warps": Choice((1, 2, 4, 8, 16)),
        "EVEN_K": Bool(), "EVEN_N": Bool(), "EVEN_M": Bool(),
    }
    keeps_buffers = True  # the split-K workspace is written by every call
    # The exhaustive search's tile model describes dot tiles, not this reduction: it would
    # rank every config of it behind them (search/exhaustive.py). Its configs all go through.
    tile_model = "none"

    def supports(self, problem: GemmProblem) -> bool:
        """Decode shapes only (here, not in the heuristic, so that a larger problem's
        fingerprint does not carry this template's hash)."""
        return problem.op in self.ops and problem.m <= MAX_M

    def fit_to_device(self, config: dict[str, Any], device) -> dict[str, Any]:
        """Without PDL where the device cannot launch so (before Hopper, AMD, the CPU) or
        the installed Triton cannot (before PDL_TRITON)."""
        if not config.get("PDL"):
            return config
        capability = device.compute_capability if device.device_type == "cuda" and not device.is_amd else None
        triton = installed_triton_version()
        if capability is None or capability < PDL_CAPABILITY or triton is None or triton < PDL_TRITON:
            return {**config, "PDL": 0}
        return config

    def extra_params(self, problem: GemmProblem, params: dict[str, Any]) -> None:
        block_m, split = params["BLOCK_M"], params["SPLIT_K"]
        if params["PDL"] and problem.device != "cuda":
            raise ValueError(f"{self.uid}: PDL is a GPU launch (Hopper and later), not {problem.device}'s")
        if not params["DOT"] and block_m != gemv_block_m(problem.m):
            raise ValueError(f"{self.uid}: BLOCK_M={block_m} must be M={problem.m} rounded up to a power of two")
        for key in ("BLOCK_N", "BLOCK_K"):
            if params[key] < 1 or params[key] & (params[key] - 1):
                raise ValueError(f"{self.uid}: {key}={params[key]} must be a power of two")
        if split < 1:
            raise ValueError(f"{self.uid}: SPLIT_K must be at least 1, got {split}")
        if params["FUSED_REDUCE"] and split == 1:
            raise ValueError(f"{self.uid}: FUSED_REDUCE sums slices: it needs SPLIT_K > 1")
        if params["DOT"]:
            if block_m != DOT_M or params["BLOCK_N"] < DOT_M or params["BLOCK_K"] < DOT_M:
                raise ValueError(f"{self.uid}: DOT needs BLOCK_M={DOT_M} and BLOCK_N, BLOCK_K >= {DOT_M}")
            if problem.dtype not in self.dot_dtypes:
                raise ValueError(f"{self.uid}: DOT serves {' and '.join(self.dot_dtypes)}, not {problem.dtype}")
            params["REDUCE_EACH"] = 0
        if params["FLAT_ROW"] and not flat_row_serves(problem, block_m, bool(params["REDUCE_EACH"])):
            raise ValueError(f"{self.uid}: FLAT_ROW is the per-step sum of one row of A along B^T's K "
                             "(BLOCK_M=1, REDUCE_EACH=1, layout ?t, no blockwise scales)")
        params["EVEN_K"] = problem.k % (params["BLOCK_K"] * split) == 0
        params["EVEN_N"] = problem.n % params["BLOCK_N"] == 0
        params["EVEN_M"] = problem.m == block_m

    def scale_context(self, problem: GemmProblem, params: dict[str, Any]) -> dict[str, Any]:
        """The float8 variables of the source (triton::scaled_gemv): none here."""
        return {"SCALE": "", "FAST_ACCUM": False}

    def scale_arguments(self, problem: GemmProblem, ops: Operands) -> tuple[tuple, tuple]:
        """(tensors, numbers) the kernels that apply the scales take after their other tensors
        and after their other numbers (the float8 scales and their strides: the kernels that
        write C, or with `scales_in_loop` the first): none here."""
        return (), ()

    def scales_in_loop(self, problem: GemmProblem) -> bool:
        """Whether the scales are applied at every step of K (then the first kernel of a
        split takes them, not the second): never here."""
        return False

    def render(self, problem: GemmProblem, params: dict[str, Any]) -> str:
        context = {**self.render_context(problem, params), **self.scale_context(problem, params)}
        return self.finish(jinja_template(self.template_file).render(
            **context,
            reduce_name=f"gemv_reduce_{context['digest']}",
            SPLIT_K=params["SPLIT_K"],
            K_PER_SPLIT=k_per_split(problem.k, params["SPLIT_K"], params["BLOCK_K"]),
            EVEN_K=params["EVEN_K"], EVEN_N=params["EVEN_N"], EVEN_M=params["EVEN_M"],
            K_FAST=problem.b_transposed, REDUCE_BLOCK=REDUCE_BLOCK,
            DOT=bool(params["DOT"]), REDUCE_EACH=bool(params["REDUCE_EACH"]), EVICT=bool(params["EVICT"]),
            FUSED_REDUCE=bool(params["FUSED_REDUCE"]), PDL=bool(params["PDL"]), FLAT_ROW=bool(params["FLAT_ROW"]),
        ))

    def build(self, problem: GemmProblem, params: dict[str, Any], kernel_dir: str) -> TritonKernel:
        split, fused = params["SPLIT_K"], bool(params["FUSED_REDUCE"])
        source = self.source_for_build(problem, params)
        if split > 1 and not fused:
            partial, reduce = load_kernels(source, kernel_dir, count=2)
        else:
            (partial,), reduce = load_kernels(source, kernel_dir, count=1), None
        m, n, k = problem.m, problem.n, problem.k
        check_workspace(split, m, n)
        blocks = -(-n // params["BLOCK_N"])
        grid = (blocks, split)
        bias_strides_n = problem.bias == "n"  # a row vector (addmm's [n], scaled_mm's bias)
        in_loop = self.scales_in_loop(problem)
        if split == 1:  # the one kernel writes C: no workspace
            def direct(ops: Operands) -> tuple:
                a, b, c = ops.a, ops.b, ops.out
                bias, bias_args = bias_arguments(ops, bias_strides_n)
                scales, scale_strides = self.scale_arguments(problem, ops)
                return (a, b, c, bias, *scales, m, n, k, *a.stride(), *b.stride(), *c.stride(), *bias_args,
                        *scale_strides)

            return OneLaunchKernel(partial, params, grid, direct)

        def arguments(ops: Operands, ws, counters) -> tuple[tuple, tuple]:
            a, b, c = ops.a, ops.b, ops.out
            bias, bias_args = bias_arguments(ops, bias_strides_n)
            scales, scale_strides = self.scale_arguments(problem, ops)
            if fused:
                return (a, b, ws, c, bias, counters, *scales, m, n, k, *a.stride(), *b.stride(), *c.stride(),
                        *bias_args, *scale_strides), ()
            if in_loop:
                return ((a, b, ws, *scales, m, n, k, *a.stride(), *b.stride(), *scale_strides),
                        (ws, c, bias, m, n, *c.stride(), *bias_args))
            return ((a, b, ws, m, n, k, *a.stride(), *b.stride()),
                    (ws, c, bias, *scales, m, n, *c.stride(), *bias_args, *scale_strides))

        return SplitKKernel(partial, reduce, params, grid, problem, planes=split, counters=blocks if fused else 0,
                            arguments=arguments)


register_template(TritonGemvTemplate())
