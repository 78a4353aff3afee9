"""Tuning at compile time: the matmul problems a compiled graph meets that have no winner
on this machine, tuned all together before the graph is routed.

One tuner serves the whole graph, as `autotune mm --from` serves a list: one worker pool,
one compile pool (the next problems' kernels compiled while one is timed), one progress
display on stderr, every winner written to the cache, so that the routing that follows, the
next compile and the next process find it. A problem that cannot be tuned (it does not fit,
every candidate failed) is named on stderr and left to the compiler.

In a torch.distributed job of several ranks the ranks share this work (`tune_graph`,
scaleout/ranks.py): each problem is tuned once per job, and every rank gets every result.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

from ..store.entry import Entry
from ..errors import UserError
from ..problem import GemmProblem
from ..settings import TuneSettings

__all__ = ["TuneReport", "settings_for", "tune_graph", "tune_missing"]

# The problems after the one being tuned whose kernels the compile pool builds meanwhile.
PREFETCH = 2


@dataclass
class TuneReport:
    """What one compile's tuning did: the problems tuned, and those that failed (why)."""

    tuned: list[GemmProblem] = field(default_factory=list)
    failed: dict[GemmProblem, str] = field(default_factory=dict)
    seconds: float = 0.0


def settings_for(tune: TuneSettings | bool | None, device: str, cache_dir: Path) -> TuneSettings:
    """The settings a compile tunes with: the caller's (its cache folder replaced by the one
    the compile reads, so that what is tuned is what is routed, and its device by the one
    the graph runs on: a tune elsewhere would answer another machine's question), or the
    defaults for `device`."""
    if isinstance(tune, TuneSettings):
        return replace(tune, cache_dir=Path(cache_dir), device=device)
    return TuneSettings(device=device, cache_dir=Path(cache_dir))


# What a tune tells of each problem as it ends: (problem, cache key, entry, None) when tuned,
# (problem, None, None, why) when it failed.
OnDone = Callable[[GemmProblem, "str | None", "Entry | None", "str | None"], None]


def tune_graph(problems: Sequence[GemmProblem], held: Callable[[GemmProblem], tuple[str, Entry] | None],
               settings: TuneSettings) -> int:
    """Tune the problems of one graph (`problems`: every one it routes, the same list on every
    rank of a job) that have no winner here (`held(problem)`: the cached (key, entry), or
    None). In a torch.distributed job of several ranks they share the work
    (scaleout/ranks.py); otherwise `tune_missing` here. Returns how many had no winner here
    before (0: nothing this rank routes can have changed)."""
    from ..scaleout.ranks import in_job, share_tuning

    if in_job():
        return share_tuning(problems, held, settings, tune_missing)
    missing = [problem for problem in problems if held(problem) is None]
    if missing:
        tune_missing(missing, settings)
    return len(missing)


def tune_missing(problems: Sequence[GemmProblem], settings: TuneSettings, quiet: bool = False,
                 device=None, on_done: OnDone | None = None) -> TuneReport:
    """Tune each of `problems` (distinct, none with a winner yet) in one tuner; a progress
    display and a line per problem on stderr (none with `quiet`). `device`: the DeviceInfo
    to tune on (None: the settings' device, GPU 0); `on_done`: told of each problem as it
    ends, so that what finished is known even if a later problem raises."""
    import time

    from ..console import message_console
    from ..tune.report import ModelProgress
    from ..runner.processes import prestart_workers

    report = TuneReport()
    if not problems:
        return report
    started = time.perf_counter()
    console = message_console(stderr=True, quiet=quiet)  # laid out as the command's notices are
    console.print(f"autotune: tuning {len(problems)} matmul problem{'s' if len(problems) != 1 else ''} "
                  f"this graph meets (cached for later compiles)", markup=False, highlight=False)
    progress = ModelProgress(console, total=len(problems))
    try:
        with _main_not_imported():
            prestart_workers(settings.device, settings.measure.switches.start_method)
            _tune_each(problems, settings, progress, report, device, on_done)
    finally:
        progress.close()
    for problem, why in report.failed.items():
        console.print(f"autotune: {problem.describe()} left to the compiler: {why}", markup=False,
                      highlight=False)
    report.seconds = time.perf_counter() - started
    return report


def _tune_each(problems: Sequence[GemmProblem], settings: TuneSettings, progress, report: TuneReport,
               device=None, on_done: OnDone | None = None) -> None:
    from ..tune.tuner import Tuner

    def failed(problem: GemmProblem, why: str) -> None:
        report.failed[problem] = why
        if on_done is not None:
            on_done(problem, None, None, why)

    with Tuner(settings, progress, device=device) as tuner:
        for number, problem in enumerate(problems):
            upcoming = tuple(problems[number + 1:number + 1 + PREFETCH])
            try:
                outcome = tuner.tune(problem, upcoming=upcoming)
            except UserError as exc:  # this problem alone (it does not fit, say)
                failed(problem, str(exc))
                continue
            if outcome.entry.winner is None:
                failed(problem, "no candidate gave a right result")
            else:
                report.tuned.append(problem)
                if on_done is not None:
                    on_done(problem, outcome.key, outcome.entry, None)


@contextlib.contextmanager
def _main_not_imported():
    """Workers started meanwhile do not import the program's main script: multiprocessing
    runs it again in each child (as `__mp_main__`), and a script without an
    `if __name__ == "__main__":` guard, as serving code often is, would compile (and tune)
    again there. The workers need nothing from it."""
    main = sys.modules.get("__main__")
    saved = {name: main.__dict__[name] for name in ("__file__", "__spec__") if main and name in main.__dict__}
    for name in saved:
        setattr(main, name, None) if name == "__spec__" else delattr(main, name)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(main, name, value)
