"""Where a tune's seconds go: wall intervals measured with time.perf_counter where the work
happens, summed per phase, and the breakdown a user sees (`autotune mm --profile`, the
"phases" of `--json`).

A problem's phases, in the order they happen:

    lookup        fingerprint and cache lookup
    start         starting the worker processes (asynchronous: the call, not their imports)
    choices       listing and pruning the configs
    <round>       each search round's wall, as SearchContext.measure saw it: screen, full,
                  retime, confirm (and "rounds": how many candidates each ran)
    prefetch      listing the next problems' configs for the compile pool (a list's; within
                  the first round)
    save          writing the finished entry; partial_save: the partial entries on the way
                  (within the rounds, like the prefetch)

and, from the workers' own clocks, what the first rounds' wall was made of: worker_s (the
timing process's seconds per candidate step, summed: build, inputs, first_run, check,
timing, timed_check), compile_pool_s (the compile pool's seconds, summed over its processes,
and its span from the first kernel sent to the last back), startups (each worker's seconds
from its start to ready). The timing process's idle time in a round (waiting for a
compile, or for its own start) is the round's wall less its worker seconds.

Nothing here imports torch; it costs a perf_counter pair per phase.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any, Iterable, Iterator, Mapping, Sequence

# The order phases are shown in; any other name follows, in the order it was first seen.
ORDER = ("lookup", "start", "choices", "screen", "full", "fixed", "retime", "confirm", "prefetch", "partial_save",
         "save")
# The timing process's steps of one candidate (runner/candidate.CandidateRunner phases).
WORKER_STEPS = ("build", "inputs", "first_run", "check", "recheck", "timing", "timed_check")


class PhaseClock:
    """Seconds per named phase, summed over every interval of that name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.counts: dict[str, int] = {}  # candidates run per search round
        self.started = time.perf_counter()

    def add(self, name: str, seconds: float, count: int = 0) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        if count:
            self.counts[name] = self.counts.get(name, 0) + count

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - began)

    def as_dict(self) -> dict[str, float]:
        names = [n for n in ORDER if n in self.seconds] + [n for n in self.seconds if n not in ORDER]
        return {name: round(self.seconds[name], 4) for name in names}

    def with_total(self) -> dict[str, float]:
        """`as_dict` and the "total": the seconds since the clock started."""
        return {**self.as_dict(), "total": round(time.perf_counter() - self.started, 4)}


@dataclass(frozen=True)
class TuneRecord:
    """What a finished tune records about itself, beside its results: the Entry fields of
    the same names (entry.py), made in one place (`of`) and given to the Entry as it is built.

    resumed         results kept from an interrupted run
    timeline        [candidate, round, seconds since the start] per result
    compiles        [sent, done, seconds compiling] per kernel the compile pool built for it
                    (seconds since the start; None: no compile pool, [] none built)
    compile_pool    the pool's description (CompilePool.describe)
    phases          the clock's phases and the total (PhaseClock.with_total)
    worker_s        the timing process's seconds per step, summed (worker_seconds)
    rounds          candidates run per search round
    compile_pool_s  the pool's kernels, busy seconds and span (None: it built none)
    startups        [role, seconds to ready] per worker started for it (None: none)
    """

    resumed: int
    timeline: list
    compiles: list | None
    compile_pool: Any
    phases: dict[str, float]
    worker_s: dict[str, float]
    rounds: dict[str, int]
    compile_pool_s: dict[str, Any] | None
    startups: list | None

    @classmethod
    def of(cls, clock: PhaseClock, started: float, candidate_phases: Iterable[Mapping[str, float] | None],
           resumed: int, timeline: list, compiles: Sequence[tuple[float, float, float]] | None,
           compile_pool: Any, startups: Sequence[tuple[str, float]]) -> "TuneRecord":
        """`started`: the tune's perf_counter start, which `compiles`' perf_counter times are
        made relative to; `candidate_phases`: each result's `Candidate.phases`."""
        kernels = None
        if compiles is not None:
            kernels = [[round(a - started, 3), round(d - started, 3), round(c, 3)] for a, d, c in compiles]
        return cls(
            resumed=resumed,
            timeline=timeline,
            compiles=kernels,
            compile_pool=compile_pool,
            phases=clock.with_total(),
            worker_s=worker_seconds(candidate_phases),
            rounds=dict(clock.counts),
            compile_pool_s=None if not kernels else {
                "kernels": len(kernels), "busy": round(sum(c for _, _, c in kernels), 3),
                "span": round(max(d for _, d, _ in kernels) - min(a for a, _, _ in kernels), 3)},
            startups=[list(item) for item in startups] or None,
        )

    def entry_fields(self) -> dict[str, Any]:
        """{Entry field: value}."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def worker_seconds(steps: Iterable[Mapping[str, float] | None]) -> dict[str, float]:
    """The timing process's seconds per step over a problem's results (each one's
    `Candidate.phases`, None where it has none)."""
    total: dict[str, float] = {}
    for phases in steps:
        for step, seconds in (phases or {}).items():
            total[step] = total.get(step, 0.0) + seconds
    names = [n for n in WORKER_STEPS if n in total] + [n for n in total if n not in WORKER_STEPS]
    return {name: round(total[name], 4) for name in names}


def process_age_s() -> float | None:
    """Seconds since this process was started (the kernel's start time, 10 ms steps), or
    None where /proc does not say: what the interpreter's start and the imports cost before
    the command's first line ran."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        with open("/proc/uptime", "rb") as handle:
            uptime = float(handle.read().split()[0])
        ticks = os.sysconf("SC_CLK_TCK")
        return round(max(0.0, uptime - int(fields[19]) / ticks), 3)  # field 22: starttime
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def summary_line(entry: Mapping[str, Any]) -> str:
    """One line: a tuned entry's phases, the workers' steps and the compile pool's share
    (`entry`: its `Entry.phase_fields()`)."""
    phases = entry.get("phases") or {}
    if not phases:
        return "phases: not recorded (a cache hit, or an entry from an older version)"
    parts = [f"{name} {seconds:.2f}" for name, seconds in phases.items() if name != "total"]
    text = f"phases (s): total {phases.get('total', 0.0):.2f} = " + ", ".join(parts)
    steps = entry.get("worker_s") or {}
    if steps:
        text += "; timing process: " + ", ".join(f"{name} {seconds:.2f}" for name, seconds in steps.items())
    pool = entry.get("compile_pool_s")
    if pool:
        text += f"; compile pool: {pool['kernels']} kernel(s), {pool['busy']:.2f} s busy over {pool['span']:.2f} s"
    ups = entry.get("startups") or []
    rounds = entry.get("rounds") or {}
    if rounds:
        text += "; runs per round: " + ", ".join(f"{name} {count}" for name, count in rounds.items())
    if ups:
        text += "; starts: " + ", ".join(f"{role} {seconds:.2f}" for role, seconds in ups)
    return text
