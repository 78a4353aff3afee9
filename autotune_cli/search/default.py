"""default: measure every choice once with the full timing policy, then re-time the
contenders within a few percent of the best (search/base.retime_contenders)."""

from __future__ import annotations

from ..results import Candidate
from .base import SearchContext, retime_contenders

OPTIONS = "every candidate timed fully; near-ties re-timed in passes of alternating order"


def search(ctx: SearchContext) -> list[Candidate]:
    pairs = ctx.measure(ctx.choices, ctx.policy, "full")
    return [r for _, r in retime_contenders(ctx, pairs, ctx.policy)]
