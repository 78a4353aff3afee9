"""aten templates have one config: the library picks its own kernel."""

from __future__ import annotations

from typing import Any, Iterator

from ..problem import GemmProblem
from .registry import Heuristic, register_heuristic


@register_heuristic("aten::mm")
@register_heuristic("aten::addmm")
@register_heuristic("aten::bmm")
@register_heuristic("aten::_scaled_mm")
class AtenSingleConfig(Heuristic):
    def _impl(self, problem: GemmProblem, search: str, space) -> Iterator[dict[str, Any]]:
        yield {}


@register_heuristic("aten::mm_aligned")
class AtenAlignedConfigs(Heuristic):
    """Leading dimensions padded only, or every misaligned size zero-padded too; each to 16,
    128 or 512 bytes (templates/aten_aligned.py: the width changes cuBLAS's time)."""

    def _impl(self, problem: GemmProblem, search: str, space) -> Iterator[dict[str, Any]]:
        from ..templates.aten_aligned import PAD_BYTES, padded_sizes

        seen = []
        for pad_bytes in PAD_BYTES:
            sizes = padded_sizes(problem, pad_bytes)
            if sizes in seen:  # a wider rounding that lands on the same sizes: the same kernel
                continue
            seen.append(sizes)
            for zero_pad in (0, 1):
                yield {"ZERO_PAD": zero_pad, "PAD_BYTES": pad_bytes}
