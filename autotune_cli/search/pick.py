"""The pick: the winner among a problem's measured candidates, the vendor library's on a tie."""

from __future__ import annotations

from ..settings import MeasurePolicy
from ..store.results import Candidate
from ..templates import vendor_uids

# The margins every stored entry's pick was made with (the policy's defaults: no switch or
# device changes them), for checks over entries that hold no policy of their own.
DEFAULT_MEASURE = MeasurePolicy()


def pick_winner(candidates: list[Candidate], measure: MeasurePolicy = DEFAULT_MEASURE) -> Candidate | None:
    """The fastest verified candidate, unless it leads the best verified plain cuBLAS
    candidate (a `Template.vendor` template's) by `measure.vendor_margin` or less
    (`confirmed_margin` where both were timed in the confirmation's sustained passes): then
    that one. Ties broken by uid and
    params for a stable pick. (The margins do not depend on the device: the default policy's
    are every tune's unless a caller sets its own.)"""
    valid = [c for c in candidates if c.ok]
    if not valid:
        return None

    def order(c: Candidate):
        return (c.ms, c.uid, sorted(c.params.items(), key=str))

    fastest = min(valid, key=order)
    vendors = vendor_uids()
    vendor = [c for c in valid if c.uid in vendors]
    if vendor and fastest.uid not in vendors:
        best_vendor = min(vendor, key=order)
        both_confirmed = fastest.confirmed and best_vendor.confirmed
        margin = measure.confirmed_margin if both_confirmed else measure.vendor_margin
        if fastest.ms >= best_vendor.ms * (1 - margin):  # a lead of `margin` or less: a tie, cuBLAS's
            return best_vendor
    return fastest
