"""Heuristics for triton::mm_persistent_tma and triton::mm_splitk.

Persistent TMA: every mm/addmm gets the shipped list (scaled down to small problems); whether
the device, the Triton and the strides allow TMA is the template's `unavailable_reason`,
checked by the prune pipeline's "hardware" stage, so a refusal is reported, not hidden.

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

The shipped lists live in configs/*.json. They carry keys the shared validator does not know
(FLATTEN, SPLIT_K, ATOMIC_ADD, FUSED_REDUCE), so they are read here: those keys are checked
here, the rest by `validate_config`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Iterable, Iterator

from ..errors import UserError
from ..problem import GemmProblem
from ..templates.triton_splitk import k_per_split
from .registry import Heuristic, register_heuristic
from .spaces import exhaustive_space, shipped_document, validate_config
from .triton_mm import TritonSpace, scaled_unique

PERSISTENT_TMA = "triton::mm_persistent_tma"
SPLITK = "triton::mm_splitk"

SPLITK_MAX_MN = 2**21
SPLITK_MIN_K = 1024
SPLITK_MAX_WORKSPACE = 2**24  # float32 elements
SPLIT_CHOICES = (2, 4, 8, 16)
FUSED_CHOICES = (0, 1)

# Keys beyond the shared Triton ones, with the values each may take.
EXTRA_KEYS = {
    "FLATTEN": (0, 1),
    "ATOMIC_ADD": (0, 1),
    "FUSED_REDUCE": (0, 1),
    "SPLIT_K": tuple(2**i for i in range(1, 8)),
}


@lru_cache(maxsize=None)
def shipped_configs(name: str) -> tuple[dict[str, Any], ...]:
    """A config list from configs/<name>.json, its extra keys checked here."""
    return parse_configs(shipped_document(name), f"configs/{name}.json")


def parse_configs(data: dict[str, Any], where: str) -> tuple[dict[str, Any], ...]:
    """{"configs": [...]}: each config's extra keys checked here, the rest by validate_config."""
    out = []
    for config in data["configs"]:
        if not isinstance(config, dict):
            raise UserError(f"{where}: each config must be an object")
        extras = {key: config[key] for key in EXTRA_KEYS if key in config}
        for key, value in extras.items():
            if isinstance(value, bool) or value not in EXTRA_KEYS[key]:
                raise UserError(f"{where}: {key}={value!r} must be one of {EXTRA_KEYS[key]}")
        base = validate_config({k: v for k, v in config.items() if k not in EXTRA_KEYS}, where)
        out.append({**base, **extras})
    return tuple(out)


# -- persistent TMA ---------------------------------------------------------------------------

class _PersistentTMA(TritonSpace):
    def shipped_configs(self) -> Iterable[dict[str, Any]]:
        return shipped_configs(self.shipped)  # its lists carry FLATTEN


@register_heuristic(PERSISTENT_TMA, "cuda")
class PersistentTMACuda(_PersistentTMA):
    shipped = "triton_persistent_tma_cuda"


@register_heuristic(PERSISTENT_TMA, "cpu")
class PersistentTMACpu(_PersistentTMA):
    """Under the interpreter (which runs tensor descriptors since Triton 3.4): two tiles."""

    shipped = "triton_persistent_tma_cpu"


# -- split-K ----------------------------------------------------------------------------------

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


@register_heuristic(SPLITK, "cuda")
class SplitKCuda(_SplitK):
    shipped = "triton_splitk_cuda"


@register_heuristic(SPLITK, "cpu")
class SplitKCpu(_SplitK):
    shipped = "triton_splitk_cpu"
