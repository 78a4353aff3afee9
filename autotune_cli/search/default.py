"""default: measure every choice once with the full timing policy, time the FIXED_NK twins
of the best contenders (search/base.time_fixed_twins), then re-time the
contenders within a few percent of the best (search/base.retime_contenders), then confirm
kernels that lead cuBLAS by more than MeasurePolicy.confirmed_margin in sustained runs beside it
(search/base.confirm_against_vendor)."""

from __future__ import annotations

from ..store.results import Candidate
from .base import SearchContext, confirm_against_vendor, retime_contenders, time_fixed_twins


def search(ctx: SearchContext) -> list[Candidate]:
    pairs = time_fixed_twins(ctx, ctx.run(ctx.choices, ctx.measure.timing, "full"))
    pairs = retime_contenders(ctx, pairs)
    return [r for _, r in confirm_against_vendor(ctx, pairs)]
