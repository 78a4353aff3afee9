"""Heuristics for triton::mm_swap_ab, the decode-shape GEMM that computes C^T = B^T A^T.

Where it is offered: M <= 64, decided by the template's `supports` (templates/triton_swap_ab.py),
so a larger problem neither enumerates it nor carries its hash in its fingerprint.

Its configs: BLOCK_M is the dot's N slot, the smallest of 16, 32, 64 that covers M (one M
tile); BLOCK_N {64, 128} x BLOCK_K {64, 128, 256} x stages {3, 4, 5, 6} x warps {4, 8}, 48 in
all. The shared-memory prune stage (choices.py) drops those whose pipelined tiles,
(BLOCK_N + BLOCK_M) * BLOCK_K * dtype size * stages, do not fit the device's block.
  - default search: the shipped list, configs/triton_mm_swap_ab_cuda.json, 8 configs led by
    the two fastest on the decode shapes of bench/README.md's "Kernel speed" (BN64 BK256 s5
    w4, BN128 BK64 s5 w4) and then their neighbours. The default search times every choice
    it is given, and a decode problem also gets GEMV's list (and, before Hopper, triton::mm's
    and split-K's: the decode prune in choices.py): a short list, not the product.
  - exhaustive search: that list first, then the rest of the product. The search's tile
    model ranks them with every other template's configs; on decode shapes it puts most of
    them at the HBM floor, and ties go by each config's place in its own template's list
    (search/exhaustive.rank_by_model), so this list's lead makes the compile cap.
  - a user's --space: each tile as given, scaled to the problem.
The configs carry no GROUP_M (the kernel has no grouping). On the CPU (the interpreter) the
shipped list is two tiles.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable, Iterator

from ..problem import GemmProblem
from ..templates.triton_swap_ab import MAX_M, TritonSwapABTemplate
from .registry import Heuristic, register_heuristic
from .spaces import shipped_space
from .triton_mm import scaled_unique

BLOCK_M_CHOICES = (16, 32, 64)
BLOCK_N_CHOICES = (64, 128)
BLOCK_K_CHOICES = (64, 128, 256)
STAGE_CHOICES = (3, 4, 5, 6)
WARP_CHOICES = (4, 8)


def swap_block_m(m: int) -> int:
    """The dot's N slot: the smallest of 16, 32, 64 that covers M (64 past that: M tiles)."""
    return next((bm for bm in BLOCK_M_CHOICES if m <= bm), MAX_M)


def product_space() -> list[dict[str, Any]]:
    """Every BLOCK_N x BLOCK_K x stages x warps (BLOCK_M set per problem): 48 configs."""
    return [{"BLOCK_N": bn, "BLOCK_K": bk, "num_stages": s, "num_warps": w}
            for bn, bk, s, w in itertools.product(BLOCK_N_CHOICES, BLOCK_K_CHOICES, STAGE_CHOICES, WARP_CHOICES)]


def without_group(config: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in config.items() if key != "GROUP_M"}


class _SwapAB(Heuristic):
    shipped = ""

    def shipped_configs(self) -> Iterable[dict[str, Any]]:
        return shipped_space(self.shipped)

    def _impl(self, problem: GemmProblem, search: str, space) -> Iterator[dict[str, Any]]:
        if space is not None:
            configs: Iterable[dict[str, Any]] = space
        else:
            block_m = swap_block_m(problem.m)
            configs = self.shipped_configs()
            if search == "exhaustive":
                configs = itertools.chain(configs, product_space())
            configs = ({**config, "BLOCK_M": block_m} for config in configs)
        yield from scaled_unique((without_group(c) for c in configs), problem)


@register_heuristic(TritonSwapABTemplate.uid, "cuda")
class SwapABCuda(_SwapAB):
    shipped = "triton_mm_swap_ab_cuda"


@register_heuristic(TritonSwapABTemplate.uid, "cpu")
class SwapABCpu(_SwapAB):
    """Under the interpreter a config costs seconds: two tiles."""

    shipped = "triton_mm_swap_ab_cpu"
