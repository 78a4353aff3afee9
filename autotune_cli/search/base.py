"""What a search strategy is given, and the steps strategies share."""

from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

from ..candidates.choices import KernelTemplateChoice
from ..hardware.device import DeviceInfo
from ..store.phases import PhaseClock
from ..problem import GemmProblem
from ..store.results import Candidate
from ..templates import vendor_uids
from .pick import pick_winner
from ..settings import MeasurePolicy, TimingPolicy

if TYPE_CHECKING:
    from ..runner import Executor


@dataclass
class SearchContext:
    problem: GemmProblem
    device: DeviceInfo
    choices: list[KernelTemplateChoice]
    executor: Executor
    measure: MeasurePolicy  # the problem's (MeasurePolicy.for_problem): its `timing` is the first timing
    deadline: float | None  # time.monotonic() bound, from --budget
    on_result: Callable[[KernelTemplateChoice, Candidate, str], None]  # (choice, result, round)
    clock: PhaseClock | None = None  # each round's wall is added under its name (phases.py)
    placements: Iterator[int] = field(default_factory=lambda: itertools.count(1))  # a pass's own (_time_in_passes)

    def run(self, choices: Sequence[KernelTemplateChoice], policy: TimingPolicy,
            round_name: str) -> list[tuple[KernelTemplateChoice, Candidate]]:
        """Run choices through the executor: (choice, result) in the choices' order, for
        every choice that gave a result (one left unmeasured gives none, and each result
        stays with its own choice). A round in `measure.shareable_rounds` is offered to other
        devices' lent workers (the executor's `shareable`); the re-timing after it is not."""
        choices = list(choices)
        by_index: dict[int, Candidate] = {}

        def collect(index: int, candidate: Candidate) -> None:
            by_index[index] = candidate
            self.on_result(choices[index], candidate, round_name)

        began = time.perf_counter()
        try:
            self.executor.run(choices, collect, policy=policy, deadline=self.deadline,
                              shareable=round_name in self.measure.shareable_rounds)
        finally:
            if self.clock is not None:
                self.clock.add(round_name, time.perf_counter() - began, len(choices))
        return [(choice, by_index[i]) for i, choice in enumerate(choices) if i in by_index]

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline


def _best_vendor(ok: list[tuple[KernelTemplateChoice, Candidate]]):
    """The fastest plain cuBLAS (choice, result) among `ok`, or None."""
    return min(((c, r) for c, r in ok if r.uid in vendor_uids()), key=lambda cr: cr[1].ms, default=None)


def time_fixed_twins(ctx: SearchContext, pairs: list[tuple[KernelTemplateChoice, Candidate]]
                     ) -> list[tuple[KernelTemplateChoice, Candidate]]:
    """`pairs` and, after them, the first timing of the FIXED_NK twins (Template.fixed_twin:
    the problem's sizes written into the kernel, one compile each, shared with no other
    problem) of the best `measure.fixed_twins` results whose template offers one, among
    those within `measure.vendor_retime_within` of the best: a known trip count and column
    wrap ran a config 3-8% faster on short-K odd widths, and a tie or a loss elsewhere
    (bench/README.md, "Odd widths"). The twins then go through the re-time like any other."""
    count = ctx.measure.fixed_twins
    ok = sorted(((c, r) for c, r in pairs if r.ok), key=lambda cr: cr[1].ms)
    if not count or not ok or ctx.out_of_time():
        return pairs
    bound = ok[0][1].ms * (1 + ctx.measure.vendor_retime_within)
    twins = []
    for choice, result in ok:
        if len(twins) == count or result.ms > bound:
            break
        twin = choice.fixed_twin()
        if twin is not None:
            twins.append(twin)
    return pairs + ctx.run(twins, ctx.measure.timing, "fixed") if twins else pairs


def retime_contenders(ctx: SearchContext, pairs: list[tuple[KernelTemplateChoice, Candidate]]
                      ) -> list[tuple[KernelTemplateChoice, Candidate]]:
    """Candidates within `measure.retime_within` of the best are timed again, so the pick
    between near-equals rests on more than one short measurement; so is the fastest plain
    cuBLAS candidate (`Template.vendor`) within `vendor_retime_within` of the best, which the pick
    measures every other candidate against (pick.pick_winner). It is often timed first, while the
    compile pool keeps every core busy, and read slow there, enough to pick a Triton kernel
    that was slower side by side (bench/README.md, "Kernel speed").

    The re-time is `measure.retime_passes` passes (`measure.retiming()` runs each) over the
    contenders, the order reversed
    every other pass (A, B, C, then C, B, A, ...), each contender's time the median of its
    passes: a GPU's clocks drift over a tune (power, heat, the other work on the host), and
    one pass in one order gave that drift to whoever came last, enough to pick a kernel
    slower than cuBLAS side by side."""
    ok = [(c, r) for c, r in pairs if r.ok]
    if not ok or ctx.out_of_time():
        return pairs
    measure = ctx.measure
    best = min(r.ms for _, r in ok)
    # A result another GPU's lent worker measured (`measured_on`) is timed again here, on
    # this GPU, wherever it is within vendor_retime_within of the best, alone if need be:
    # the pick rests on this GPU's own readings, not on how another GPU of the model reads.
    close = [(c, r) for c, r in ok if r.ms <= best * (1 + measure.retime_within)
             or (r.measured_on is not None and r.ms <= best * (1 + measure.vendor_retime_within))]
    vendor = _best_vendor(ok)
    if (vendor is not None and all(c is not vendor[0] for c, _ in close)
            and vendor[1].ms <= best * (1 + measure.vendor_retime_within)):
        close.append(vendor)
    if len(close) < 2 and not any(r.measured_on is not None for _, r in close):
        return pairs
    contenders = [c for c, _ in close]
    updated = _time_in_passes(ctx, contenders, measure.retiming(), measure.retime_passes, "retime")
    return [(c, updated.get(id(c), r)) for c, r in pairs]


def confirm_against_vendor(ctx: SearchContext, pairs: list[tuple[KernelTemplateChoice, Candidate]]
                           ) -> list[tuple[KernelTemplateChoice, Candidate]]:
    """Where kernels lead the best plain cuBLAS candidate by more than `measure.confirmed_margin`,
    the fastest `confirm_at_once` (two) of them and cuBLAS are timed once more in
    `measure.confirm_passes` passes of alternating order, each runnable's runs adding up to
    200 ms of kernel time or more (`MeasurePolicy.sustained`: up to 400 runs, against the
    tune's 10-100 in 40 ms; the side-by-side's are 50-300 in 200 ms), marked `confirmed`, and
    the pick is made again (pick.pick_winner: a confirmed lead needs confirmed_margin, an
    unconfirmed one vendor_margin); while the pick is not a confirmed kernel, unconfirmed
    kernels that lead by that much (a third one, which led cuBLAS but trailed the two) are
    confirmed in turn, up to `confirm_rounds` rounds. Why: a tune's short bursts read
    large compute-bound GEMMs several per cent apart from tune to tune, enough to pick a
    kernel slower than cuBLAS side by side (bench/README.md, "Kernel speed"). Fewer than 2
    passes turn the confirmation off (drift cancels over pairs). A pick that leads cuBLAS by
    `measure.confirm_lead_below` or more (15%: aten::mm_aligned's 3-4x on misaligned sizes)
    is not confirmed: that lead is far beyond the misreads the confirmation is there for."""
    measure = ctx.measure
    count = measure.confirm_passes
    if count < 2:
        return pairs
    current = {id(c): r for c, r in pairs}
    confirmed: set[int] = set()
    vendors = vendor_uids()
    for _ in range(measure.confirm_rounds):
        if ctx.out_of_time():
            break
        ok = [(c, current[id(c)]) for c, _ in pairs if current[id(c)].ok]
        vendor = _best_vendor(ok)
        winner = pick_winner([r for _, r in ok], measure)
        if vendor is None or winner is None:
            break
        if winner.uid not in vendors and winner.confirmed:
            break  # the winner has been timed against cuBLAS the sustained way
        if winner.uid not in vendors and winner.ms <= vendor[1].ms * (1 - measure.confirm_lead_below):
            break  # a lead no short burst's misread could make: nothing to confirm
        leading = sorted(((c, r) for c, r in ok if r.uid not in vendors and id(c) not in confirmed
                          and r.ms < vendor[1].ms * (1 - measure.confirmed_margin)), key=lambda cr: cr[1].ms)
        if not leading:
            break
        leaders = [c for c, _ in leading[:measure.confirm_at_once]]
        updated = _time_in_passes(ctx, leaders + [vendor[0]], measure.sustained(), count, "confirm")
        if not updated:  # the deadline or failing runs: the times before stand
            break
        # cuBLAS was timed again: whatever was confirmed in an earlier round (a kernel, or a
        # cuBLAS candidate that is no longer the best) was not timed beside this reading, so
        # its flag goes (the kernels are not timed again)
        for key, result in current.items():
            if result.confirmed and key not in updated:
                current[key] = replace(result, confirmed=False)
        current.update({key: replace(result, confirmed=True) for key, result in updated.items()})
        confirmed.update(id(c) for c in leaders)
    return [(c, current[id(c)]) for c, _ in pairs]


def _time_in_passes(ctx: SearchContext, contenders: list[KernelTemplateChoice], policy: TimingPolicy,
                    count: int, phase: str) -> dict[int, Candidate]:
    """`contenders` timed in `count` passes, the order reversed every other pass, each pass
    with the operands at a placement of its own (TimingPolicy.placement: the same for every
    contender of the pass); each one's time the median of the passes in which every
    contender was timed OK ({} if none was)."""
    passes: list[dict[int, Candidate]] = []  # the complete ones: every contender timed OK
    for index in range(count):
        if index and ctx.out_of_time():
            break
        order = contenders if index % 2 == 0 else contenders[::-1]
        placed = replace(policy, placement=next(ctx.placements))
        got = {id(choice): result for choice, result in ctx.run(order, placed, phase) if result.ok}
        if len(got) == len(contenders):
            passes.append(got)
    # Drift cancels over pairs of passes in opposite orders: an odd count beyond one (the
    # deadline or a failing run cut the passes short) drops its last; with none complete
    # the earlier timings stand.
    if len(passes) > 1 and len(passes) % 2:
        passes.pop()
    if not passes:
        return {}
    return {id(c): median_of_passes([p[id(c)] for p in passes]) for c in contenders}


def median_of_passes(readings: list[Candidate]) -> Candidate:
    """One contender's re-time: the median of its passes' medians (and of their p20, p80),
    the runs of all passes; the rest as the last pass gave it."""
    def middle(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    return replace(readings[-1], ms=middle(r.ms for r in readings), p20=middle(r.p20 for r in readings),
                   p80=middle(r.p80 for r in readings), runs=sum(r.runs for r in readings))
