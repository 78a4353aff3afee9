"""Heuristics: per (template uid, device type, op), the configs worth trying."""

from . import aten, gemv, swap_ab, triton_mm, triton_persistent_tma, triton_scaled_mm, triton_splitk  # noqa: F401  (registers the built-in heuristics)
from .registry import (
    Heuristic,
    HeuristicKey,
    heuristic_key,
    lookup_heuristic,
    register_heuristic,
    unregister_heuristic,
)
from .spaces import exhaustive_space, load_space_file, shipped_space

__all__ = [
    "Heuristic", "HeuristicKey", "heuristic_key", "lookup_heuristic", "register_heuristic",
    "unregister_heuristic", "exhaustive_space", "load_space_file", "shipped_space",
]
