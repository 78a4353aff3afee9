"""Heuristics for triton::scaled_mm_persistent_tma, the float8 GEMM with epilogue scaling.

Float8 tiles have configs of their own (configs/triton_scaled_mm_{cuda,cpu}.json): an
element is one byte, so a stage holds twice the K of a 16-bit tile in the same shared
memory, and the FP8 warp-group MMA takes K in steps of 32; the shipped GPU list has
BLOCK_K 128-256 (one 64) for compute-bound shapes and BLOCK_M 16/32 tiles with K steps of
256 (a TMA block dimension is at most 256 elements) for decode shapes. The exhaustive
search keeps Inductor's space with BLOCK_K >= 64 (smaller K steps leave the float8 MMA
waiting on loads); a user's --space is taken as given.
Whether the device and the strides allow TMA is the template's `unavailable_reason`.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from ..problem import GemmProblem
from .hopper import shipped_configs
from .registry import Heuristic, register_heuristic
from .spaces import exhaustive_space
from .triton_mm import scaled_unique

SCALED_MM = "triton::scaled_mm_persistent_tma"
MIN_EXHAUSTIVE_BLOCK_K = 64


class _ScaledMM(Heuristic):
    shipped = ""

    def _impl(self, problem: GemmProblem, search: str, space) -> Iterator[dict[str, Any]]:
        configs: Iterable[dict[str, Any]]
        if space is not None:
            configs = space
        elif search == "exhaustive":
            configs = (c for c in exhaustive_space() if c["BLOCK_K"] >= MIN_EXHAUSTIVE_BLOCK_K)
        else:
            configs = shipped_configs(self.shipped)  # carries FLATTEN, checked there
        yield from scaled_unique(configs, problem)


@register_heuristic(SCALED_MM, "cuda")
class ScaledMMCuda(_ScaledMM):
    shipped = "triton_scaled_mm_cuda"


@register_heuristic(SCALED_MM, "cpu")
class ScaledMMCpu(_ScaledMM):
    """Under the interpreter a config costs seconds: two small tiles."""

    shipped = "triton_scaled_mm_cpu"
