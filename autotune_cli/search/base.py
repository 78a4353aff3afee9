"""What a search strategy is given, and the steps strategies share."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

from ..choices import KernelTemplateChoice
from ..fingerprint import DeviceInfo
from ..problem import GemmProblem
from ..results import VENDOR_UIDS, Candidate
from ..settings import TimingPolicy, TuneSettings


@dataclass
class SearchContext:
    problem: GemmProblem
    device: DeviceInfo
    choices: list[KernelTemplateChoice]
    executor: object  # bench.executor.Executor
    settings: TuneSettings
    policy: TimingPolicy
    deadline: float | None  # time.monotonic() bound, from --budget
    on_result: Callable[[KernelTemplateChoice, Candidate, str], None]  # (choice, result, round)

    def measure(self, choices: Sequence[KernelTemplateChoice], policy: TimingPolicy,
                round_name: str) -> list[Candidate]:
        """Run choices through the executor; results in the same order."""
        choices = list(choices)
        by_index: dict[int, Candidate] = {}

        def collect(index: int, candidate: Candidate) -> None:
            by_index[index] = candidate
            self.on_result(choices[index], candidate, round_name)

        self.executor.run(choices, collect, policy=policy, deadline=self.deadline)
        return [by_index[i] for i in range(len(choices)) if i in by_index]

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline


VENDOR_RETIME_WITHIN = 0.10


def retime_contenders(ctx: SearchContext, pairs: list[tuple[KernelTemplateChoice, Candidate]],
                      policy: TimingPolicy) -> list[tuple[KernelTemplateChoice, Candidate]]:
    """Candidates within `retime_within` of the best are timed again with more runs, so the
    pick between near-equals rests on more than one short measurement; so is the fastest
    plain cuBLAS candidate (VENDOR_UIDS) within VENDOR_RETIME_WITHIN of the best, which the
    pick measures every other candidate against (results.pick_winner). It is often timed
    first, while the compile pool keeps every core busy: on the H200 a tune read torch.mm's
    own call 4-9% slow there and picked a Triton kernel that was slower side by side."""
    ok = [(c, r) for c, r in pairs if r.ok]
    if len(ok) < 2 or ctx.out_of_time():
        return pairs
    best = min(r.ms for _, r in ok)
    close = [(c, r) for c, r in ok if r.ms <= best * (1 + ctx.settings.retime_within)]
    vendor = min(((c, r) for c, r in ok if r.uid in VENDOR_UIDS), key=lambda cr: cr[1].ms, default=None)
    if (vendor is not None and all(c is not vendor[0] for c, _ in close)
            and vendor[1].ms <= best * (1 + VENDOR_RETIME_WITHIN)):
        close.append(vendor)
    if len(close) < 2:
        return pairs
    again = ctx.measure([c for c, _ in close], policy.more_runs(), "retime")
    updated = {id(c): r for (c, _), r in zip(close, again) if r.ok}
    return [(c, updated.get(id(c), r)) for c, r in pairs]
