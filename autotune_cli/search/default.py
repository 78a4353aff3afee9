"""default: measure every choice once with the full timing policy, then re-time the
contenders within a few percent of the best (search/base.retime_contenders)."""

from __future__ import annotations

from ..results import Candidate
from .base import SearchContext, retime_contenders

OPTIONS = "every candidate timed fully; near-ties re-timed in passes of alternating order"


def search(ctx: SearchContext) -> list[Candidate]:
    results = ctx.measure_each(ctx.choices, ctx.policy, "full")
    # a choice the deadline left unmeasured gave no result: its neighbours keep their own
    pairs = [(c, r) for c, r in zip(ctx.choices, results) if r is not None]
    return [r for _, r in retime_contenders(ctx, pairs, ctx.policy)]
