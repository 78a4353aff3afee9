"""Heuristics for the float8 GEMMs: with epilogue scaling, triton::scaled_mm_persistent_tma
and triton::scaled_mm (the tiled one takes the same tiles, FLATTEN aside), and split-K for
decode shapes; with blockwise scales in the main loop, triton::scaled_mm_blockwise (BLOCK_K
one block of scales, BLOCK_N dividing it: configs/triton_scaled_mm_block_{cuda,cpu}.json).

Float8 tiles have configs of their own (configs/triton_scaled_mm_{cuda,cpu}.json): an
element is one byte, so a stage holds twice the K of a 16-bit tile in the same shared
memory, and the FP8 warp-group MMA takes K in steps of 32; the shipped GPU list has
BLOCK_K 128-256 (one 64) for compute-bound shapes and BLOCK_M 16/32 tiles with K steps of
256 (a TMA block dimension is at most 256 elements) for decode shapes. The exhaustive
search keeps Inductor's space with BLOCK_K >= 64 (smaller K steps leave the float8 MMA
waiting on loads); a user's --space is taken as given.
Without fast accumulation the kernel holds two fp32 BLOCK_M x BLOCK_N accumulators (the
running sum and each K step's), so tiles whose two would take more than MAX_ACC_REGISTERS
registers per thread are dropped.
Whether the device and the strides allow TMA is the template's `unavailable_reason`.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from ..hardware.registers import register_budget
from ..problem import SCALE_BLOCK, GemmProblem
from ..templates.triton_scaled_mm import TritonScaledMMTemplate, TritonScaledMMTiledTemplate
from ..templates.triton_scaled_mm_block import TritonScaledMMBlockTemplate
from ..templates.triton_scaled_mm_splitk import TritonScaledMMSplitKTemplate
from .spaces import shipped_configs
from .registry import Heuristic, register_heuristic
from .spaces import exhaustive_space
from .triton_mm import scaled_unique
from .triton_splitk import SPLIT_CHOICES

MIN_EXHAUSTIVE_BLOCK_K = 64
PERSISTENT_KEYS = ("FLATTEN", "WARP_SPECIALIZE", "PROMOTE_IN_DOT")  # the persistent template's alone
MAX_SPLITK_M = 64  # split-K serves decode shapes: few rows of A, few output tiles
# at most this many accumulator registers per thread (hardware/registers.py says why)
MAX_ACC_REGISTERS = register_budget().scaled_accumulators


def accumulator_registers(problem: GemmProblem, config: dict[str, Any]) -> int:
    """fp32 accumulator registers per thread: one tile's worth, two without fast accumulation."""
    per_tile = config["BLOCK_M"] * config["BLOCK_N"] // (32 * config["num_warps"])
    return per_tile if problem.fast_accum else 2 * per_tile


class _ScaledMM(Heuristic):
    shipped = ""
    flatten = True  # whether the template takes FLATTEN (the persistent one)

    @staticmethod
    def exhaustive_keeps(config: dict[str, Any]) -> bool:
        """Which configs of the exhaustive space the template's search takes."""
        return config["BLOCK_K"] >= MIN_EXHAUSTIVE_BLOCK_K

    def _impl(self, problem: GemmProblem, search: str, space) -> Iterator[dict[str, Any]]:
        configs: Iterable[dict[str, Any]]
        if space is not None:
            configs = space
        elif search == "exhaustive":
            configs = (c for c in exhaustive_space() if self.exhaustive_keeps(c))
        else:
            configs = shipped_configs(self.shipped)  # carries FLATTEN, checked there
        if not self.flatten:
            configs = ({k: v for k, v in c.items() if k not in PERSISTENT_KEYS} for c in configs)
        elif problem.fast_accum:  # the sum is the matrix units' own: no per-step sum to place,
            # so a config that differs only there is the same kernel, built and timed once
            configs = ({k: v for k, v in c.items() if k != "PROMOTE_IN_DOT"} for c in configs)
        for config in scaled_unique(configs, problem):
            if accumulator_registers(problem, config) <= MAX_ACC_REGISTERS:
                yield config


@register_heuristic(TritonScaledMMTemplate.uid, "cuda")
class ScaledMMCuda(_ScaledMM):
    shipped = "triton_scaled_mm_cuda"


@register_heuristic(TritonScaledMMTemplate.uid, "cpu")
class ScaledMMCpu(_ScaledMM):
    """Under the interpreter a config costs seconds: two small tiles."""

    shipped = "triton_scaled_mm_cpu"


@register_heuristic(TritonScaledMMTiledTemplate.uid, "cuda")
class ScaledMMTiledCuda(ScaledMMCuda):
    flatten = False


@register_heuristic(TritonScaledMMTiledTemplate.uid, "cpu")
class ScaledMMTiledCpu(ScaledMMCpu):
    flatten = False


class _ScaledMMSplitK(Heuristic):
    """Decode shapes only (M <= MAX_SPLITK_M), from the shipped list (in the exhaustive search
    too) or a user's --space (a tile without SPLIT_K tried at each of SPLIT_CHOICES, as
    triton::mm_splitk's). A config whose slices of K would be shorter than one BLOCK_K step
    is dropped."""

    shipped = ""

    def should_run(self, problem: GemmProblem, search: str) -> bool:
        return problem.m <= MAX_SPLITK_M

    def _impl(self, problem: GemmProblem, search: str, space) -> Iterator[dict[str, Any]]:
        if space is not None:
            configs: Iterable[dict[str, Any]] = (
                {**tile, "SPLIT_K": split} for tile in space
                for split in ((tile["SPLIT_K"],) if "SPLIT_K" in tile else SPLIT_CHOICES))
        else:  # the exhaustive search too: its tiles carry no SPLIT_K
            configs = shipped_configs(self.shipped)
        for config in scaled_unique(configs, problem):
            if problem.k >= config["SPLIT_K"] * config["BLOCK_K"]:
                yield config


@register_heuristic(TritonScaledMMSplitKTemplate.uid, "cuda")
class ScaledMMSplitKCuda(_ScaledMMSplitK):
    shipped = "triton_scaled_mm_splitk_cuda"


@register_heuristic(TritonScaledMMSplitKTemplate.uid, "cpu")
class ScaledMMSplitKCpu(_ScaledMMSplitK):
    shipped = "triton_scaled_mm_splitk_cpu"


class _ScaledMMBlock(_ScaledMM):
    """The shipped list, or the exhaustive space's tiles that take K one block of scales at
    a time with a column block inside one block of B's scales; a user's --space as given
    (a config the template refuses is recorded as such)."""

    flatten = False

    @staticmethod
    def exhaustive_keeps(config: dict[str, Any]) -> bool:
        return config["BLOCK_K"] == SCALE_BLOCK and SCALE_BLOCK % config["BLOCK_N"] == 0


@register_heuristic(TritonScaledMMBlockTemplate.uid, "cuda")
class ScaledMMBlockCuda(_ScaledMMBlock):
    shipped = "triton_scaled_mm_block_cuda"


@register_heuristic(TritonScaledMMBlockTemplate.uid, "cpu")
class ScaledMMBlockCpu(_ScaledMMBlock):
    shipped = "triton_scaled_mm_block_cpu"
