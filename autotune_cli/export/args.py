"""What every lookup-table value shares, bf16 and float8 alike: the tile arguments that are
copied over, the TMA descriptor's size, and reading an integer param."""

from __future__ import annotations

from typing import Any

TILE_ARGS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages", "num_warps")
TMA_DESCRIPTOR_SIZE = 128  # bytes per descriptor: Inductor's TMA_SIZE


def as_int(value: Any) -> int | None:
    """An integer param as an int (a whole float too); None for anything else, bools included."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None
