"""aten templates have one config: the library picks its own kernel."""

from __future__ import annotations

from typing import Any, Iterator

from ..problem import GemmProblem
from ..templates.aten import ATEN_TEMPLATES
from ..templates.aten_aligned import AtenAlignedTemplate
from ..templates.aten_scaled import AtenScaledMMTemplate
from .registry import Heuristic, register_heuristic


class AtenSingleConfig(Heuristic):
    def _impl(self, problem: GemmProblem, search: str, space) -> Iterator[dict[str, Any]]:
        yield {}


for _template in (*ATEN_TEMPLATES.values(), AtenScaledMMTemplate):
    register_heuristic(_template.uid)(AtenSingleConfig)


@register_heuristic(AtenAlignedTemplate.uid)
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
