"""Per-thread register budgets, one per GPU model: what a config's float32 values per thread
are held against, by the prune stage (candidates/choices.py), the heuristics and the tile
model (roofline.tile_seconds). A thread holds at most 255 32-bit registers on every NVIDIA GPU
since Kepler; the budgets below that are where a tile starts to spill, or to lose speed.

Keyed by the GPU's architecture (compute capability major): every model autotune serves has
the same budgets today, and a model that differs gets its own row here. The heuristics see a
problem, not a device: they read the budget of `register_budget()` with no device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .device import DeviceInfo


@dataclass(frozen=True)
class RegisterBudget:
    """32-bit values per thread (a block's threads: 32 per warp)."""

    # the most registers one thread may hold (the ISA's limit)
    per_thread: int = 255
    # a tile's float32 accumulator, at most: beyond it the kernel spills and is never
    # competitive (the register prune stage); the rest of the file is left for addresses,
    # operands and the pipeline's bookkeeping
    accumulator: int = 192
    # a float8 tile's two float32 accumulators (the running sum and a K step's), at most:
    # 256x128 of 8 warps (two of 128) leads the persistent kernel, where 128x256 spills
    # and comes last (bench/README.md, "FP8"); one of them lives only through a step
    scaled_accumulators: int = 256
    # the tile model's knee: past this many accumulator values per thread a tile's
    # arithmetic slows in proportion (register pressure, fewer blocks an SM)
    efficient_accumulator: int = 128
    # a GEMV program's float32 values (templates/triton_gemv.py): the FMA form's
    # accumulator, and the products the REDUCE_EACH form sums at each step
    gemv_fma: int = 64
    gemv_each: int = 256


NVIDIA = RegisterBudget()
# architecture (compute capability major) -> its budget: Volta, Ampere and Ada, Hopper,
# Blackwell (data centre and consumer)
BUDGETS: dict[int, RegisterBudget] = {7: NVIDIA, 8: NVIDIA, 9: NVIDIA, 10: NVIDIA, 12: NVIDIA}


def register_budget(device: DeviceInfo | None = None) -> RegisterBudget:
    """The budget of `device`'s GPU model; NVIDIA's where it is not known (no device, the
    CPU's interpreter, a capability not listed)."""
    capability = device.compute_capability if device is not None else None
    if capability is None:
        return NVIDIA
    return BUDGETS.get(capability[0], NVIDIA)
