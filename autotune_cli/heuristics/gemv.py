"""Heuristics for triton::gemv, the decode GEMM bound by reading B (templates/triton_gemv.py),
and for its float8 form triton::scaled_gemv (the same tiles with BLOCK_K doubled: FP8_TILES;
with blockwise scales, steps no longer than a scale's block of K: FP8_BLOCK_TILES).

Where it is offered: M <= 16, decided by the template's `supports`.

Its params, with the values each may take, are the template's `params_schema`. A config is a
tile: the form of the kernel (FORMS: REDUCE_EACH, the CUDA cores summing over K at every
step; DOT, the matrix units with M padded to 16; FMA, an elementwise accumulator reduced
after the loop), BLOCK_N, BLOCK_K, num_warps and num_stages; BLOCK_M is fixed by the problem
(M rounded up to a power of two, 16 with DOT) and SPLIT_K is chosen per tile from the
programs it makes, column blocks x SPLIT_K: the smallest power of two that gives at least
TARGET_PROGRAMS (four per SM of a 132-SM H200: enough loads in flight to cover the memory's
latency; the heuristics are not told the device), each slice at least one BLOCK_K long and
the workspace SPLIT_K·M·N at most MAX_WORKSPACE. A tile that splits K may sum its slices in
its one launch (FUSED_REDUCE, `Tile.fused`): a second launch costs microseconds here.

The CUDA-core forms do M multiply-adds per element of B: past CUDA_CORE_MAX_M rows that work
would cost as much as the read, so from there the tiles are DOT's. The CUDA-core tiles keep
the float32 values one thread holds, BLOCK_M·BLOCK_N·BLOCK_K over the block's threads, at
most PER_THREAD[form] (beyond that the kernel spills); a tile is halved across B's contiguous
dimension, then along it, until it fits (`fit_tile`).
  - default search: the tiles of DEFAULT_TILES for the layout (K contiguous, B^T stored
    [n, k] as the decode weight is; or N contiguous, B [k, n]) and the M: at most 10 configs,
    and SHORT_K_TILES too where K is at most SHORT_K on B^T with the CUDA-core forms.
  - exhaustive search: the default tiles, then the product of EXHAUSTIVE_* for each form
    the M allows, each with its SPLIT_K and twice it (bounded: the tile model does not rank
    these configs, every one is timed).
  - a user's --space: each config within the schema, its BLOCK_N, BLOCK_K, num_warps (and
    SPLIT_K, num_stages, DOT, REDUCE_EACH, FUSED_REDUCE, PDL, FLAT_ROW, EVICT where given, under
    the template's uid in the file; else SPLIT_K chosen, one stage, FMA), BLOCK_M set to the
    problem's.
On the CPU (the interpreter) two small tiles, one without and one with a split of K.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable, Iterator, NamedTuple

from ..hardware.registers import register_budget
from ..problem import FP8_DTYPES, SCALE_BLOCK, GemmProblem
from ..templates.triton_gemv import (DOT_DTYPES, DOT_M, TritonGemvTemplate, flat_row_serves, gemv_block_m,
                                     k_per_split)
from ..templates.triton_scaled_gemv import TritonScaledGemvTemplate
from .registry import Heuristic, register_heuristic

DOT_SERVED = DOT_DTYPES + FP8_DTYPES  # what DOT serves across the two templates (each serves one kind)
FP8_DOT_LEAST_K = 32  # the float8 MMA's K step
# Without fast accumulation each BLOCK_K step's float8 products are summed in the matrix
# unit's own accumulator before the float32 add: at most this many, as in the other float8
# templates' lists (triton::scaled_mm_splitk's longest step).
FP8_DOT_MOST_K = 512
SCHEMA = TritonGemvTemplate.params_schema  # what each param may be (one home: the template)
TUNED = ("BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps", "num_stages", "DOT", "REDUCE_EACH", "FUSED_REDUCE", "FLAT_ROW",
         "EVICT")
FMA, EACH, DOT = "fma", "each", "dot"
FORMS = (FMA, EACH, DOT)
# float32 values per thread (the accumulator, or the products): hardware/registers.py's
PER_THREAD = {FMA: register_budget().gemv_fma, EACH: register_budget().gemv_each}
CUDA_CORE_MAX_M = 4
TARGET_PROGRAMS = 512  # about four programs per SM of a 132-SM H200
MAX_WORKSPACE = 2**24  # float32 elements


class Tile(NamedTuple):
    form: str
    block_n: int
    block_k: int
    warps: int
    stages: int = 1
    split: int | None = None  # None: chosen from the programs it makes
    fused: int = 0  # FUSED_REDUCE where K is split: the slices summed in the one launch
    pdl: int = 0  # PDL (a --space choice: templates/triton_gemv.py says why it is off here)
    flat: int = 0  # FLAT_ROW (M = 1 as a 2-D product, templates/triton_gemv.py; dropped at more rows)
    evict: int = 1  # EVICT (the eviction hints; a --space choice: they help or cost by the weight's size)


# The default search, by (K contiguous?, CUDA cores or not): long along B's contiguous
# dimension for 16-byte loads, many programs. Most of DOT's tiles do not split K: a
# split costs more than its programs gain; one splits and sums in its one launch. On B^T,
# tiles 64 and 128 wide (the warp-group MMA's least M and twice it) with deep pipelines led
# at 8 and 16 rows (bench/README.md, "Decode GEMV").
_DOT_NT = (Tile(DOT, 64, 128, 4, 8, 1), Tile(DOT, 128, 128, 4, 4, 1), Tile(DOT, 64, 128, 4, 6, 1),
           Tile(DOT, 64, 256, 4, 4, 1), Tile(DOT, 32, 512, 4, 4, 1), Tile(DOT, 32, 512, 4, 3, 1),
           Tile(DOT, 16, 512, 2, 3, 1), Tile(DOT, 32, 256, 4, 3, None, 1))
_DOT_NN = (Tile(DOT, 32, 512, 4, 3, 1), Tile(DOT, 32, 512, 4, 4, 1), Tile(DOT, 16, 512, 2, 3, 1),
           Tile(DOT, 64, 128, 4, 3, 1), Tile(DOT, 32, 1024, 4, 2, 1), Tile(DOT, 64, 256, 4, 3, 1),
           Tile(DOT, 32, 256, 4, 3, None, 1), Tile(DOT, 64, 256, 4, 3, None, 1))
# For M = 1 on B^T, the per-step sums over whole rows of K with one or two warps per row (the
# sum then stays in a warp) won; the elementwise accumulator and DOT are there for other
# shapes (bench/README.md, "Decode GEMV"). At one row, two rows of B as one 2-D product on
# 16 warps (FLAT_ROW; dropped at more rows) is the form Inductor's reduction takes there.
DEFAULT_TILES = {
    (True, True): (Tile(EACH, 4, 4096, 8), Tile(EACH, 2, 4096, 4), Tile(EACH, 4, 2048, 4),
                   Tile(EACH, 2, 2048, 2), Tile(EACH, 1, 4096, 2), Tile(FMA, 8, 512, 4),
                   Tile(DOT, 64, 128, 4, 8, 1), Tile(DOT, 16, 512, 2, 3, 1), Tile(EACH, 2, 4096, 16, flat=1),
                   Tile(FMA, 2, 4096, 16)),
    (False, True): (Tile(DOT, 32, 512, 4, 3, 1), Tile(DOT, 64, 256, 4, 3, 1), Tile(DOT, 16, 512, 2, 3, 1),
                    Tile(EACH, 128, 32, 4, 1, None, 1), Tile(FMA, 128, 16, 4, 1, None, 1),
                    Tile(EACH, 64, 32, 4, 1, None, 1), Tile(DOT, 32, 256, 4, 3, None, 1),
                    Tile(EACH, 128, 32, 4)),
    (True, False): _DOT_NT,
    (False, False): _DOT_NN,
}
# Where K is short (at most SHORT_K) on B^T with the CUDA-core forms, the whole-row tiles above
# become one masked step in tens of thousands of short programs. Three tiles stream B faster,
# none on every GPU: DOT 64x128 with 4 stages (six steps of 128 at K = 768), two whole rows a
# program on two warps, and at one row the same rows as one 2-D product on four warps
# (FLAT_ROW: Inductor's persistent reduction's form); the tune picks by time
# (bench/README.md, "Decode GEMV").
SHORT_K = 1024
SHORT_K_TILES = (Tile(DOT, 64, 128, 4, 4, 1), Tile(EACH, 2, 1024, 2), Tile(EACH, 2, 1024, 4, flat=1))
# The exhaustive search's products, per form (each tile with its SPLIT_K and twice it, DOT's
# without a split and with one; fitted and deduplicated).
EXHAUSTIVE = {
    EACH: ((1, 2, 4, 8, 16), (512, 1024, 2048, 4096), (4, 8, 16), (1,)),
    FMA: ((1, 2, 4, 8, 16, 32, 64, 128), (16, 32, 64, 256, 512, 2048), (4, 8), (1,)),
    DOT: ((16, 32, 64), (128, 256, 512, 1024), (1, 2, 4), (2, 3, 4)),
}
MAX_EXHAUSTIVE = 160
CPU_TILES = (Tile(FMA, 16, 32, 4, 1, 1), Tile(FMA, 16, 32, 4, 1, 2))
CPU_BLOCK_TILES = (Tile(EACH, 16, 32, 4, 1, 1), Tile(EACH, 16, 32, 4, 1, 2))  # blockwise: a form that sums each step
# Float8 (triton::scaled_gemv; B always stored [n, k]), by CUDA cores or not: the CUDA-core
# tiles above with BLOCK_K doubled (the same bytes a step at one byte an element), the DOT
# tiles at most FP8_DOT_MOST_K long. The DOT tiles 64 columns wide (the float8 warp-group
# MMA's least M) with 4 to 7 stages in flight lead; narrower ones, and a split of K wherever
# 64-wide column blocks alone make 64 programs or more, lose (bench/README.md, "The float8
# GEMV against the read floor").
FP8_TILES = {
    True: (Tile(EACH, 4, 8192, 8), Tile(EACH, 2, 4096, 4), Tile(EACH, 4, 4096, 4), Tile(FMA, 8, 1024, 4),
           Tile(DOT, 64, 256, 4, 6, 1), Tile(DOT, 64, 256, 4, 4, 1)),
    False: (Tile(DOT, 64, 256, 4, 6, 1), Tile(DOT, 64, 512, 4, 4, 1), Tile(DOT, 64, 256, 4, 4, 1),
            Tile(DOT, 128, 256, 4, 4, 1), Tile(DOT, 64, 128, 4, 6, 1), Tile(DOT, 64, 256, 4, 5, 1),
            Tile(DOT, 64, 256, 4, 6, None, 1), Tile(DOT, 32, 128, 2, 4, None, 1)),
}
# Blockwise scales (triton::scaled_gemv scales each step's sum: a step at most one block of K,
# SCALE_BLOCK) take the per-step forms alone, DOT and REDUCE_EACH, at BLOCK_K = SCALE_BLOCK:
# FP8_TILES' shapes at that length, with more programs where the step is shorter.
FP8_BLOCK_TILES = {
    True: (Tile(EACH, 4, 128, 4), Tile(EACH, 8, 128, 4), Tile(EACH, 16, 128, 4, 1, None, 1),
           Tile(DOT, 32, 128, 4, 3, 1), Tile(DOT, 16, 128, 2, 3, 1), Tile(DOT, 32, 128, 2, 4, None, 1)),
    False: (Tile(DOT, 64, 128, 4, 3, 1), Tile(DOT, 64, 128, 4, 6, 1), Tile(DOT, 64, 128, 4, 8, 1),
            Tile(DOT, 32, 128, 4, 3, 1), Tile(DOT, 128, 128, 4, 3, 1), Tile(DOT, 32, 128, 2, 4, None, 1),
            Tile(DOT, 64, 128, 4, 3, None, 1), Tile(DOT, 64, 128, 4, 4, None, 1)),
}


def fit_tile(form: str, block_m: int, block_n: int, block_k: int, warps: int, k_fast: bool) -> tuple[int, int]:
    """(BLOCK_N, BLOCK_K) halved until BLOCK_M·BLOCK_N·BLOCK_K fits PER_THREAD[form] per
    thread: first across B's contiguous dimension (BLOCK_N when K is contiguous), so that
    the loads stay wide, then along it; never below the schema's least. DOT tiles as given."""
    if form == DOT:
        return block_n, block_k
    least_n, least_k = SCHEMA["BLOCK_N"].low, SCHEMA["BLOCK_K"].low
    while block_m * block_n * block_k > PER_THREAD[form] * 32 * warps:
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


def split_for(problem: GemmProblem, block_n: int, block_k: int) -> int:
    """The smallest power of two of slices that makes TARGET_PROGRAMS programs with the
    column blocks, as far as the slices stay at least BLOCK_K long (1 where the column
    blocks alone make them)."""
    blocks = -(-problem.n // block_n)
    split, most = 1, SCHEMA["SPLIT_K"].high
    while blocks * split < TARGET_PROGRAMS and split * 2 <= most and slice_fits(problem, block_k, split * 2):
        split *= 2
    return split


def _scaled(problem: GemmProblem, form: str, block_n: int, block_k: int) -> tuple[int, int]:
    """Blocks no larger than the problem needs (powers of two; BLOCK_K at least 16, DOT's
    blocks at least 16), BLOCK_K halved (twice at most) where that makes it divide K: the
    loop then needs no masks (14336 = 7 x 2048: a 4096 tile would read a masked quarter)."""
    least_n = DOT_M if form == DOT else 1
    block_k = min(block_k, max(16, gemv_block_m(problem.k)))
    for _ in range(2):
        if problem.k % block_k == 0 or block_k <= 16 or problem.k % (block_k // 2):
            break
        block_k //= 2
    return min(block_n, max(least_n, gemv_block_m(problem.n))), block_k


def cuda_cores(problem: GemmProblem) -> bool:
    """Whether the CUDA-core forms are offered: up to CUDA_CORE_MAX_M rows, or where DOT
    cannot serve (float32)."""
    return problem.m <= CUDA_CORE_MAX_M or problem.dtype not in DOT_SERVED


def forms_for(problem: GemmProblem) -> tuple[str, ...]:
    """The forms worth offering: the CUDA-core ones (`cuda_cores`), DOT for the 16-bit
    dtypes."""
    forms = (FMA, EACH) if cuda_cores(problem) else ()
    return forms + ((DOT,) if problem.dtype in DOT_SERVED else ())


def configs_for(problem: GemmProblem, tiles: Iterable[Tile], doubled: bool = False) -> Iterator[dict[str, Any]]:
    """Each tile as configs for the problem: blocks scaled down and fitted to the registers,
    SPLIT_K chosen where not given (and twice it with `doubled`), slices checked; DOT tiles
    for a dtype it does not serve, tiles blockwise scales cannot take (FMA, or a step that is
    not a divisor of SCALE_BLOCK), and duplicates, dropped."""
    seen: set[tuple] = set()
    blockwise = problem.scale == "block"
    for tile in tiles:
        if (tile.form == DOT and problem.dtype not in DOT_SERVED) or (blockwise and tile.form == FMA):
            continue
        block_m = DOT_M if tile.form == DOT else gemv_block_m(problem.m)
        block_n, block_k = fit_tile(tile.form, block_m, *_scaled(problem, tile.form, tile.block_n, tile.block_k),
                                    tile.warps, problem.b_transposed)
        if tile.split is not None:
            splits = [tile.split]
        else:
            split = split_for(problem, block_n, block_k)
            if not doubled or split == 1:
                splits = [split]
            else:
                splits = [1, split] if tile.form == DOT else [split, split * 2]
        if tile.form == DOT and problem.dtype in FP8_DTYPES and not FP8_DOT_LEAST_K <= block_k <= FP8_DOT_MOST_K:
            continue
        if blockwise and SCALE_BLOCK % block_k:
            continue
        if tile.flat and not flat_row_serves(problem, block_m, tile.form == EACH):
            continue
        for split in splits:
            if not slice_fits(problem, block_k, split):
                continue
            config = {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "SPLIT_K": split,
                      "num_stages": tile.stages, "num_warps": tile.warps,
                      "DOT": int(tile.form == DOT), "REDUCE_EACH": int(tile.form == EACH),
                      "FUSED_REDUCE": int(bool(tile.fused) and split > 1)}
            if tile.pdl:
                config["PDL"] = 1
            if tile.flat:
                config["FLAT_ROW"] = 1
            if not tile.evict:
                config["EVICT"] = 0
            ident = tuple(sorted(config.items()))
            if ident not in seen:
                seen.add(ident)
                yield config


def in_schema(config: dict[str, Any]) -> bool:
    """Every tuned param that `config` has is what the template's schema allows."""
    return all(SCHEMA[key].problem(config[key]) is None for key in TUNED if key in config)


def space_tiles(space: list[dict[str, Any]]) -> list[Tile]:
    """A user's configs (already checked as Triton configs) as tiles. One --space serves
    every Triton template: a config out of this template's schema (BLOCK_N 512, say) is one
    this kernel cannot take and is left out; keys of other templates (GROUP_M) are ignored,
    and BLOCK_M is the problem's."""
    tiles = []
    for config in space:
        if not in_schema(config):
            continue
        form = DOT if config.get("DOT") else EACH if config.get("REDUCE_EACH") else FMA
        tiles.append(Tile(form, config["BLOCK_N"], config["BLOCK_K"], config["num_warps"],
                          config.get("num_stages") or 1, config.get("SPLIT_K"), config.get("FUSED_REDUCE", 0),
                          config.get("PDL", 0), config.get("FLAT_ROW", 0), config.get("EVICT", 1)))
    return tiles


def exhaustive_tiles(problem: GemmProblem) -> Iterator[Tile]:
    for form in forms_for(problem):
        for block_n, block_k, warps, stages in itertools.product(*EXHAUSTIVE[form]):
            yield Tile(form, block_n, block_k, warps, stages, None, 1)


def _unique(configs: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    seen: set[tuple] = set()
    for config in configs:
        ident = tuple(sorted(config.items()))
        if ident not in seen:
            seen.add(ident)
            yield config


class _Gemv(Heuristic):
    def tiles(self, problem: GemmProblem) -> tuple:
        tiles = DEFAULT_TILES[(problem.b_transposed, cuda_cores(problem))]
        if problem.b_transposed and cuda_cores(problem) and problem.k <= SHORT_K:
            tiles += SHORT_K_TILES
        return tiles

    def _impl(self, problem: GemmProblem, search: str, space) -> Iterator[dict[str, Any]]:
        if space is not None:
            yield from configs_for(problem, space_tiles(space))
        elif search == "exhaustive":  # the default list first, then the rest
            tiles = self.tiles(problem)
            found = itertools.chain(configs_for(problem, tiles), configs_for(
                problem, itertools.chain(tiles, exhaustive_tiles(problem)), doubled=True))
            yield from itertools.islice(_unique(found), MAX_EXHAUSTIVE)
        else:
            yield from configs_for(problem, self.tiles(problem))


@register_heuristic(TritonGemvTemplate.uid, "cuda")
class GemvCuda(_Gemv):
    pass


@register_heuristic(TritonGemvTemplate.uid, "cpu")
class GemvCpu(_Gemv):
    """Under the interpreter a config costs seconds: two small tiles."""

    def tiles(self, problem: GemmProblem) -> tuple:
        return CPU_TILES


@register_heuristic(TritonScaledGemvTemplate.uid, "cuda")
class ScaledGemvCuda(GemvCuda):
    def tiles(self, problem: GemmProblem) -> tuple:
        return (FP8_BLOCK_TILES if problem.scale == "block" else FP8_TILES)[cuda_cores(problem)]


@register_heuristic(TritonScaledGemvTemplate.uid, "cpu")
class ScaledGemvCpu(GemvCpu):
    def tiles(self, problem: GemmProblem) -> tuple:
        return CPU_BLOCK_TILES if problem.scale == "block" else CPU_TILES
