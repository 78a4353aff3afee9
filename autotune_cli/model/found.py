"""model/found.py: what reading a model gives, one FoundGemm per distinct problem."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..problem import GemmProblem


@dataclass(frozen=True)
class FoundGemm:
    problem: GemmProblem
    count: int  # how many times it occurs per forward pass
    sources: tuple[str, ...]  # aten op names that produced it, e.g. ("aten.linear",)
    hint: dict[str, int] | None  # dynamic dims (as --hint named them) at the values it was taken at

    def __hash__(self) -> int:  # a dict field would make the generated hash fail
        return hash((self.problem, self.count, self.sources,
                     tuple(sorted(self.hint.items())) if self.hint else None))


def plan_flops_share(found: Sequence[FoundGemm]) -> list[float]:
    """Each entry's share of sum(flops * count) over the list (sums to 1; [] for [])."""
    weights = [f.problem.flops * f.count for f in found]
    total = sum(weights)
    if total <= 0:
        return [0.0 for _ in weights]
    return [w / total for w in weights]
