"""model/found.py: what reading a model gives, one FoundGemm per distinct problem."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..problem import GemmProblem


# The sources of a problem that is no call of the model but the one GEMM of linears of one
# input (find.one_gemm_groups): the same work as those linears, so no share of its own.
GROUP_SOURCE = "grouped linears"


@dataclass(frozen=True)
class FoundGemm:
    problem: GemmProblem
    count: int  # how many times it occurs per forward pass
    sources: tuple[str, ...]  # aten op names that produced it, e.g. ("aten.linear",)
    hint: dict[str, int] | None  # dynamic dims (as --hint named them) at the values it was taken at

    @property
    def group(self) -> bool:
        """Whether this is a group's one GEMM (GROUP_SOURCE) and no call of the model."""
        return self.sources == (GROUP_SOURCE,)

    def __hash__(self) -> int:  # a dict field would make the generated hash fail
        return hash((self.problem, self.count, self.sources,
                     tuple(sorted(self.hint.items())) if self.hint else None))


@dataclass(frozen=True)
class NotTuned:
    """Calls of one kind a model makes that no listed problem stands for (convolutions,
    matrix-vector products, matmuls in an integer dtype, ...): `what` names one of them,
    `count` says how many one forward pass makes."""

    what: str
    count: int

    @property
    def many(self) -> str:
        """`what` for several: the noun that leads it made plural ("matmuls in int64",
        "recurrent ops (aten.gru)": what is in brackets names it, and stays)."""
        noun, bracket, named = self.what.partition(" (")
        head, space, rest = noun.partition(" ")
        if head in ("matmul", "einsum"):
            return f"{head}s{space}{rest}{bracket}{named}"
        return f"{noun}s{bracket}{named}"

    def said(self) -> str:
        """"2 convolutions", "1 matmul in int64"."""
        return f"{self.count} {self.what if self.count == 1 else self.many}"

    def to_dict(self) -> dict:
        return {"what": self.what, "count": self.count}


def plan_flops_share(found: Sequence[FoundGemm]) -> list[float]:
    """Each entry's share of sum(flops * count) over the model's own matmuls (those sum to 1;
    [] for []); a group's one GEMM (GROUP_SOURCE) is the share of the linears it holds."""
    weights = [f.problem.flops * f.count for f in found]
    total = sum(w for w, f in zip(weights, found) if not f.group)
    if total <= 0:
        return [0.0 for _ in weights]
    return [w / total for w in weights]
