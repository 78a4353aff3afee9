"""aten templates have one config: the library picks its own kernel."""

from __future__ import annotations

from typing import Any, Iterator

from ..problem import GemmProblem
from .registry import Heuristic, register_heuristic


@register_heuristic("aten::mm")
@register_heuristic("aten::addmm")
@register_heuristic("aten::bmm")
class AtenSingleConfig(Heuristic):
    def _impl(self, problem: GemmProblem, search: str, space) -> Iterator[dict[str, Any]]:
        yield {}


@register_heuristic("aten::mm_aligned")
class AtenAlignedConfigs(Heuristic):
    """Leading dimensions padded only, or every misaligned size zero-padded too."""

    def _impl(self, problem: GemmProblem, search: str, space) -> Iterator[dict[str, Any]]:
        yield {"ZERO_PAD": 0}
        yield {"ZERO_PAD": 1}
