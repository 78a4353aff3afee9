"""Heuristics for triton::mm_splitk (templates/triton_splitk.py).

Split-K is offered only where it can pay: few output elements and a long K.
  - M·N <= 2^21 (at 128x128 tiles, at most 128 tiles: less than one wave on a 132-SM H200,
    so a plain tiled GEMM leaves SMs idle or runs one long K loop per tile), and
  - K >= 1024 (below that, each slice is a few BLOCK_K steps and the second pass costs more
    than the parallelism gains).
For each config, SPLIT_K must be >= 2 and leave every slice at least one BLOCK_K long and
non-empty (K // SPLIT_K >= BLOCK_K, (SPLIT_K - 1) * slice < K), and the float32 workspace,
SPLIT_K·M·N (or M·N with ATOMIC_ADD), at most 2^24 elements (64 MiB, about the H200's L2).
ATOMIC_ADD=1 with FUSED_REDUCE=1 never fits (the template refuses it: the fused reduction
sums the slices' planes, which the atomic mode does not keep).
A user's --space (which has no SPLIT_K) and the exhaustive search are expanded over
SPLIT_K in {2, 4, 8, 16}, each with the two-launch and the one-launch (FUSED_REDUCE)
reduction (both deterministic: one saves a launch, the other spreads the sum over every SM),
and filtered the same way.
Its shipped lists carry SPLIT_K, ATOMIC_ADD and FUSED_REDUCE, read by spaces.shipped_configs.
"""

from __future__ import annotations

from typing import Any, Iterator

from ..problem import GemmProblem
from ..templates.triton_splitk import TritonSplitKTemplate, k_per_split
from .registry import Heuristic, register_heuristic
from .spaces import exhaustive_space, shipped_configs
from .triton_mm import scaled_unique


SPLITK_MAX_MN = 2**21
SPLITK_MIN_K = 1024
SPLITK_MAX_WORKSPACE = 2**24  # float32 elements
SPLIT_CHOICES = (2, 4, 8, 16)
FUSED_CHOICES = (0, 1)


def splitk_worthwhile(problem: GemmProblem) -> bool:
    """Few output elements and a long K (see the module docstring)."""
    return (problem.op in ("mm", "addmm") and problem.m * problem.n <= SPLITK_MAX_MN
            and problem.k >= SPLITK_MIN_K)


def split_fits(problem: GemmProblem, config: dict[str, Any]) -> bool:
    """SPLIT_K >= 2, every slice non-empty and at least BLOCK_K long, workspace bounded, and
    not ATOMIC_ADD with FUSED_REDUCE (which the template refuses)."""
    split, block_k = config["SPLIT_K"], config["BLOCK_K"]
    if config.get("ATOMIC_ADD") and config.get("FUSED_REDUCE"):
        return False
    if split < 2 or problem.k // split < block_k:
        return False
    if (split - 1) * k_per_split(problem.k, split, block_k) >= problem.k:
        return False
    planes = 1 if config.get("ATOMIC_ADD") else split
    return planes * problem.m * problem.n <= SPLITK_MAX_WORKSPACE


def fused_choices(tile: dict[str, Any]) -> tuple[int, ...]:
    """The reductions a tile of a user's or the exhaustive space is tried with: its own
    FUSED_REDUCE if it names one, only the two-launch one with ATOMIC_ADD, else both."""
    if "FUSED_REDUCE" in tile:
        return (tile["FUSED_REDUCE"],)
    return (0,) if tile.get("ATOMIC_ADD") else FUSED_CHOICES


class _SplitK(Heuristic):
    shipped = ""

    def should_run(self, problem: GemmProblem, search: str) -> bool:
        return splitk_worthwhile(problem)

    def _impl(self, problem: GemmProblem, search: str, space) -> Iterator[dict[str, Any]]:
        if space is not None or search == "exhaustive":
            tiles = space if space is not None else exhaustive_space()
            configs = ({**tile, "SPLIT_K": split, "FUSED_REDUCE": fused} for tile in tiles
                       for split in ((tile["SPLIT_K"],) if "SPLIT_K" in tile else SPLIT_CHOICES)
                       for fused in fused_choices(tile))
        else:
            configs = iter(shipped_configs(self.shipped))
        for config in scaled_unique(configs, problem):
            if split_fits(problem, config):
                yield config


@register_heuristic(TritonSplitKTemplate.uid, "cuda")
class SplitKCuda(_SplitK):
    shipped = "triton_splitk_cuda"


@register_heuristic(TritonSplitKTemplate.uid, "cpu")
class SplitKCpu(_SplitK):
    shipped = "triton_splitk_cpu"
