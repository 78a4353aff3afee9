"""The hardware's peak rates, and the fastest any kernel could run a problem at them.

One home for the numbers: the tuner's choice of graph timing (settings.MeasurePolicy), the
tile model (`tile_seconds`: the exhaustive search's ranking, the default search's
tile_model prune in choices.py) and the benchmarks' floors read them here. They are an H200's
(measured ~790 TFLOP/s dense bf16 against a 990 datasheet, ~4.3 TB/s copy): on another GPU
they rank and classify problems, they do not predict times.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .registers import RegisterBudget, register_budget

if TYPE_CHECKING:
    from ..problem import GemmProblem

# Dense matrix-unit rate per operand precision, FLOP/s ("tf32": float32 allowed to round).
PEAK_FLOPS = {"float16": 7.9e14, "bfloat16": 7.9e14, "tf32": 3.9e14, "float32": 5.0e13,
              "float8_e4m3fn": 1.45e15}
HBM_BYTES_PER_S = 4.3e12
L2_BYTES_PER_S = 1.2e13


def operand_rate(problem: "GemmProblem") -> float:
    """The matrix units' peak for the problem's operands (tf32 where float32 may round)."""
    return PEAK_FLOPS[problem.operand_precision]


def hbm_seconds(nbytes: float) -> float:
    """Moving `nbytes` through HBM at its peak."""
    return nbytes / HBM_BYTES_PER_S


def floor_seconds(problem: "GemmProblem") -> float:
    """The fastest any kernel could be: its fewest bytes over HBM bandwidth or its flops over
    the matrix units' rate, whichever is larger."""
    return max(hbm_seconds(problem.min_bytes), problem.flops / operand_rate(problem))


def compute_bound(problem: "GemmProblem") -> bool:
    """Its flops at the matrix units' peak take longer than its bytes through HBM."""
    return problem.flops / operand_rate(problem) > hbm_seconds(problem.min_bytes)


def tile_seconds(problem: GemmProblem, config: dict, sm_count: int,
                 registers: RegisterBudget | None = None) -> float:
    """A rough roofline per tile config (the tile model), used only to rank configs before
    compiling (search/exhaustive.py) and to leave out, for a compute-bound problem, those far
    behind the best (choices.tile_model_stage).

    Time = waves x per-wave tile time, where a tile's arithmetic runs at the SM's share of
    peak scaled by an efficiency for its shape (small tiles under-use the tensor cores,
    too many accumulators per thread spill, few stages expose load latency), and its
    operand traffic comes through L2; the whole problem is never faster than its HBM floor.
    `registers`: the GPU model's budget (registers.py; None: the default one).
    """
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    warps, stages = config["num_warps"], config["num_stages"]
    sms = max(sm_count, 1)
    tiles = math.ceil(problem.m / bm) * math.ceil(problem.n / bn) * problem.b
    waves = math.ceil(tiles / sms)
    k_iters = math.ceil(problem.k / bk)
    efficiency = 1.0
    efficiency *= min(1.0, bm / 64) ** 0.7 * min(1.0, bn / 64) ** 0.5
    per_thread = bm * bn / (32 * warps)
    knee = (registers or register_budget()).efficient_accumulator
    if per_thread > knee:
        efficiency *= knee / per_thread
    elif per_thread < 32:
        efficiency *= (per_thread / 32) ** 0.5
    efficiency *= {1: 0.45, 2: 0.75, 3: 0.95}.get(stages, 1.0)
    if bk < 32:
        efficiency *= 0.7
    # padding waste: work on rows/cols past the edge
    useful = problem.m * problem.n * problem.b / (tiles * bm * bn)
    tile_flops = 2.0 * bm * bn * bk * k_iters
    compute = waves * tile_flops / (operand_rate(problem) / sms * efficiency)
    traffic = tiles * (bm + bn) * bk * k_iters * problem.dtype_size / L2_BYTES_PER_S
    floor = hbm_seconds(problem.min_bytes)
    return max(compute, traffic, floor) * (1.0 + 0.02 * (1 - useful))
