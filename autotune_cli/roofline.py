"""The hardware's peak rates, and the fastest any kernel could run a problem at them.

One home for the numbers: the tuner's choice of graph timing (settings.MeasurePolicy), the
exhaustive search's tile model (search/exhaustive.py) and the benchmarks' floors read them
here. They are an H200's (measured ~790 TFLOP/s dense bf16 against a 990 datasheet, ~4.3
TB/s copy): on another GPU they rank and classify problems, they do not predict times.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .problem import GemmProblem

# Dense matrix-unit rate per operand precision, FLOP/s ("tf32": float32 allowed to round).
PEAK_FLOPS = {"float16": 7.9e14, "bfloat16": 7.9e14, "tf32": 3.9e14, "float32": 5.0e13,
              "float8_e4m3fn": 1.45e15}
HBM_BYTES_PER_S = 4.3e12
L2_BYTES_PER_S = 1.2e13


def operand_rate(problem: "GemmProblem") -> float:
    """The matrix units' peak for the problem's operands (tf32 where float32 may round)."""
    return PEAK_FLOPS["tf32" if problem.allow_tf32 else problem.dtype]


def hbm_seconds(nbytes: float) -> float:
    """Moving `nbytes` through HBM at its peak."""
    return nbytes / HBM_BYTES_PER_S


def floor_seconds(problem: "GemmProblem") -> float:
    """The fastest any kernel could be: its fewest bytes over HBM bandwidth or its flops over
    the matrix units' rate, whichever is larger."""
    return max(hbm_seconds(problem.min_bytes), problem.flops / operand_rate(problem))
