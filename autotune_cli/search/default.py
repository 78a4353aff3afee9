"""default: measure every choice once with the full timing policy, then re-time the
contenders within a few percent of the best with more runs."""

from __future__ import annotations

from ..results import Candidate
from .base import SearchContext, retime_contenders

OPTIONS = "every candidate timed fully; near-ties re-timed with 4x the runs"


def search(ctx: SearchContext) -> list[Candidate]:
    results = ctx.measure(ctx.choices, ctx.policy, "full")
    pairs = list(zip(ctx.choices, results))
    return [r for _, r in retime_contenders(ctx, pairs, ctx.policy)]
