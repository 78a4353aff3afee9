"""Heuristics for triton::gemv, the decode GEMM as a reduction over K (templates/triton_gemv.py).

Where it is offered: M <= 8, decided by the template's `supports`.

Its params, with the values each may take, are the template's `params_schema`: BLOCK_M is
fixed by the problem (M rounded up to a power of two); BLOCK_N, BLOCK_K, SPLIT_K and
num_warps are tuned; num_stages is 1 by default (the loop has no dot for Triton to pipeline
through shared memory).
Each config must keep the float32 products one thread holds, BLOCK_M·BLOCK_N·BLOCK_K over the
block's threads, at most ACC_PER_THREAD (beyond that the kernel spills); for a larger M a
tile is halved across B's contiguous dimension, then along it, until it fits (`fit_tile`). SPLIT_K is chosen per tile from the programs it makes,
column blocks x SPLIT_K: the smallest power of two that gives at least TARGET_PROGRAMS (one
wave on a 132-SM H200; the heuristics are not told the device), and twice that; each slice
at least one BLOCK_K long and non-empty, the workspace SPLIT_K·M·N at most MAX_WORKSPACE.
  - default search: five tiles long along B's contiguous dimension (TILES_K_FAST for B^T
    stored [n, k], the decode weight; TILES_N_FAST for B [k, n]), each with its two SPLIT_K:
    at most 10 configs.
  - exhaustive search: the default tiles, then EXHAUSTIVE_BLOCK_N x _BLOCK_K x _WARPS, each
    with its two SPLIT_K (at most 80 configs: the tile model does not rank them, every one
    is timed).
  - a user's --space: each config within the schema, its BLOCK_N, BLOCK_K, num_warps (and SPLIT_K, num_stages
    where given; else the two SPLIT_K, one stage), BLOCK_M set to the problem's.
On the CPU (the interpreter) two small tiles, one without and one with a split of K.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable, Iterator

from ..problem import GemmProblem
from ..templates.triton_gemv import TritonGemvTemplate, gemv_block_m, k_per_split
from .registry import Heuristic, register_heuristic

GEMV = "triton::gemv"
SCHEMA = TritonGemvTemplate.params_schema  # what each param may be (one home: the template)
TUNED = ("BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps", "num_stages")
ACC_PER_THREAD = 64  # float32 products per thread
TARGET_PROGRAMS = 132  # one wave on an H200
MAX_WORKSPACE = 2**24  # float32 elements
# (BLOCK_N, BLOCK_K, num_warps) of the default search, long along B's contiguous dimension
# (K for B^T stored [n, k], N for B [k, n]) for wide loads, each at the register bound for
# M = 1.
TILES_K_FAST = ((16, 512, 4), (32, 256, 4), (16, 256, 4), (32, 512, 8), (64, 256, 8))
TILES_N_FAST = ((256, 32, 4), (128, 64, 4), (64, 128, 4), (256, 64, 8), (128, 128, 8))
# The exhaustive search's product (each tile with its two SPLIT_K, fitted and deduplicated:
# at most 80 configs). The tile model does not rank them (the template's `tile_model`), so
# every one is timed: a bounded product.
EXHAUSTIVE_BLOCK_N = (8, 16, 32, 64, 128)
EXHAUSTIVE_BLOCK_K = (64, 128, 256, 512)
EXHAUSTIVE_WARPS = (4, 8)
CPU_TILES = ((16, 32, 4, 1), (16, 32, 4, 2))  # (BLOCK_N, BLOCK_K, num_warps, SPLIT_K)


def fit_tile(block_m: int, block_n: int, block_k: int, warps: int, k_fast: bool) -> tuple[int, int]:
    """(BLOCK_N, BLOCK_K) halved until BLOCK_M·BLOCK_N·BLOCK_K fits ACC_PER_THREAD per thread:
    first across B's contiguous dimension (BLOCK_N when K is contiguous), so that the loads
    stay wide, then along it; never below the schema's least."""
    least_n, least_k = SCHEMA["BLOCK_N"].low, SCHEMA["BLOCK_K"].low
    while block_m * block_n * block_k > ACC_PER_THREAD * 32 * warps:
        across_n = block_n > least_n and (k_fast or block_k == least_k)
        if across_n:
            block_n //= 2
        elif block_k > least_k:
            block_k //= 2
        else:
            break
    return block_n, block_k


def slice_fits(problem: GemmProblem, block_k: int, split: int) -> bool:
    """Every slice non-empty and at least BLOCK_K long (or the whole of a short K), the
    workspace bounded."""
    if split == 1:
        return True
    if problem.k // split < block_k or (split - 1) * k_per_split(problem.k, split, block_k) >= problem.k:
        return False
    return split * problem.m * problem.n <= MAX_WORKSPACE


def splits_for(problem: GemmProblem, block_n: int, waves: int = 2) -> list[int]:
    """SPLIT_K from the smallest power of two that gives TARGET_PROGRAMS programs, doubling
    `waves` - 1 times (never past the schema's largest); only 1 where the column blocks
    alone make `waves` waves."""
    blocks = -(-problem.n // block_n)
    if blocks >= waves * TARGET_PROGRAMS:
        return [1]
    most = SCHEMA["SPLIT_K"].high
    split = 1
    while blocks * split < TARGET_PROGRAMS and split * 2 <= most:
        split *= 2
    return [s for s in (split << i for i in range(waves)) if s <= most]


def _scaled(problem: GemmProblem, block_n: int, block_k: int) -> tuple[int, int]:
    """Blocks no larger than the problem needs (powers of two, BLOCK_K at least 16)."""
    return min(block_n, max(4, gemv_block_m(problem.n))), min(block_k, max(16, gemv_block_m(problem.k)))


def configs_for(problem: GemmProblem, tiles: Iterable[tuple], waves: int = 2) -> Iterator[dict[str, Any]]:
    """Each (BLOCK_N, BLOCK_K, num_warps[, SPLIT_K[, num_stages]]) tile as configs for the
    problem: blocks scaled down, BLOCK_K fitted to the registers, SPLIT_K chosen where not
    given, slices checked; duplicates dropped."""
    block_m = gemv_block_m(problem.m)
    seen: set[tuple] = set()
    for tile in tiles:
        block_n, block_k, warps = tile[:3]
        block_n, block_k = fit_tile(block_m, *_scaled(problem, block_n, block_k), warps,
                                    problem.b_transposed)
        splits = [tile[3]] if len(tile) > 3 and tile[3] is not None else splits_for(problem, block_n, waves)
        stages = tile[4] if len(tile) > 4 and tile[4] is not None else 1
        for split in splits:
            if not slice_fits(problem, block_k, split):
                continue
            config = {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "SPLIT_K": split,
                      "num_stages": stages, "num_warps": warps}
            ident = tuple(sorted(config.items()))
            if ident not in seen:
                seen.add(ident)
                yield config


def in_schema(config: dict[str, Any]) -> bool:
    """Every tuned param that `config` has is what the template's schema allows."""
    return all(SCHEMA[key].problem(config[key]) is None for key in TUNED if key in config)


def space_tiles(space: list[dict[str, Any]]) -> list[tuple]:
    """A user's configs (already checked as Triton configs) as tiles. One --space serves
    every Triton template: a config out of this template's schema (BLOCK_N 512, say) is one
    this kernel cannot take and is left out; keys of other templates (GROUP_M) are ignored,
    and BLOCK_M is the problem's."""
    return [(config["BLOCK_N"], config["BLOCK_K"], config["num_warps"],
             config.get("SPLIT_K"), config.get("num_stages"))
            for config in space if in_schema(config)]


class _Gemv(Heuristic):
    def tiles(self, problem: GemmProblem) -> tuple:
        return TILES_K_FAST if problem.b_transposed else TILES_N_FAST

    def _impl(self, problem: GemmProblem, search: str, space) -> Iterator[dict[str, Any]]:
        if space is not None:
            yield from configs_for(problem, space_tiles(space))
        elif search == "exhaustive":
            tiles = itertools.product(EXHAUSTIVE_BLOCK_N, EXHAUSTIVE_BLOCK_K, EXHAUSTIVE_WARPS)
            yield from configs_for(problem, itertools.chain(self.tiles(problem), tiles))
        else:
            yield from configs_for(problem, self.tiles(problem))


@register_heuristic(GEMV, "cuda")
class GemvCuda(_Gemv):
    pass


@register_heuristic(GEMV, "cpu")
class GemvCpu(_Gemv):
    """Under the interpreter a config costs seconds: two small tiles."""

    def tiles(self, problem: GemmProblem) -> tuple:
        return CPU_TILES
