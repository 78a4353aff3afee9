"""`autotune mm --from FILE`: every problem of a list (shapes_file.py) tuned in one process.

One tuner serves the whole list, as for a model's problems: one worker pool, one compile
pool and one Triton cache, started with the first problem not in the cache (none when all
are). One progress display and one table of winners (or one JSON document). A problem
already tuned is a hit, so an interrupted list resumes where it stopped.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .app import Stopped, err, out, say_notes
from .rows import StageClock, failed_line, result_row
from ..errors import Interrupted, Terminated, UserError
from ..problem import GemmProblem


# The problems after the one being tuned whose kernels the compile pool builds meanwhile
# (Tuner.prefetch): a problem's compiles take a fraction of its tune, and the pool idled
# for the rest (bench/README.md, "Cold tuning").
PREFETCH = 2


@dataclass(frozen=True)
class Listed:
    """A problem of the list, in the shape `result_row` reads (as a model's found problem)."""

    problem: GemmProblem
    entry: int  # its place in the file, from 1
    count: int = 1
    group: bool = False  # a group's one GEMM (problem.one_gemm): no call of the program itself


def list_rows(listed: list[Listed]) -> list[dict]:
    """The row of each problem before it is tuned (the fields of a model's plan row; the
    share, as a model's, of sum(flops * count) over the program's own calls: a group's one
    GEMM has its linears' share)."""
    total = sum(item.problem.flops * item.count for item in listed if not item.group)
    return [{"problem": item.problem.to_dict(), "describe": item.problem.describe(),
             "count": item.count, "gflop": item.problem.flops / 1e9,
             "share": item.problem.flops * item.count / total if total > 0 else 0.0,
             "sources": [f"entry {item.entry}"], "hint": None,
             "group": item.group}
            for item in listed]


@contextmanager
def stopped_by_list_signal(done: Callable[[], int], total: int):
    """Ctrl-C or SIGTERM while the list is tuned: Stopped (exit 130 or 143) with one line
    saying how many problems are done and what the tune in progress saved (its own line,
    tuner.Tuner._interrupted, after the signal's name)."""
    try:
        yield
    except KeyboardInterrupt as exc:
        terminated = exc.code == 143 if isinstance(exc, Interrupted) else isinstance(exc, Terminated)
        name, code = ("SIGTERM", 143) if terminated else ("SIGINT", 130)
        tail = "run the same command again to resume"
        if isinstance(exc, Interrupted):  # "interrupted (NAME)[:;] what it saved"
            tail = exc.message.split(")", 1)[-1].lstrip(":; ") or tail
        raise Stopped(f"interrupted ({name}): {done()} of {total} problem(s) of the list done "
                      f"and saved; {tail}", code) from None


def tune_list(path: Path, problems: list[GemmProblem], settings, json_out: bool,
              profile: bool = False, clock: StageClock | None = None, counts: list[int] | None = None,
              groups: list[bool] | None = None, notes: list[str] | None = None) -> int:
    """Tune the list; the exit code: 0, or 1 when a problem found no winner or failed.
    `profile`: a line per tuned problem on where its seconds went (phases.py); `clock`: the
    command's, whose stages the JSON document carries; `counts`: each problem's (default 1);
    `groups`: which are a group's one GEMM (default none); `notes`: said once the list's
    checks have passed."""
    from ..store.cache import Cache
    from ..tune.hits import any_to_tune
    from ..hardware.device import probe_device
    from ..plugins import load_plugins
    from ..tune.report import ModelProgress, dumps
    from .tables import model_summary_table
    from ..templates import check_template_names

    clock = clock or StageClock()
    load_plugins(settings.plugins)  # bad tuning options fail before anything starts
    check_template_names(settings.templates)
    counts = counts or [1] * len(problems)
    groups = groups or [False] * len(problems)
    listed = [Listed(problem, number, count, group)
              for number, (problem, count, group) in enumerate(zip(problems, counts, groups), 1)]
    plan = list_rows(listed)
    device = probe_device(settings.device, remembered_in=settings.cache_dir)
    cache = Cache(settings.cache_dir)
    missing = any_to_tune(cache, [item.problem for item in listed], device, settings)
    clock.mark("looked_up")
    if missing:
        from ..runner.processes import prestart_workers
        from ..settings import check_writable_folder

        check_writable_folder(settings.cache_dir)  # one error for the list, not one per problem

        prestart_workers(settings.device, settings.measure.switches.start_method)  # beside the first choices
    from ..tune.tuner import Tuner

    say_notes([*(notes or []), *cache.notices])  # the cache's are told once: here, not by the tuner
    progress = ModelProgress(err, total=len(listed))
    rows = []
    try:
        with stopped_by_list_signal(lambda: len(rows), len(listed)), \
                Tuner(settings, progress, device=device) as tuner:
            for number, (item, planned) in enumerate(zip(listed, plan)):
                began = time.perf_counter()
                upcoming = tuple(later.problem for later in listed[number + 1:number + 1 + PREFETCH])
                try:
                    outcome = tuner.tune(item.problem, upcoming=upcoming)  # a problem listed twice: once
                except UserError as exc:  # this problem alone (it does not fit, say)
                    rows.append(result_row(item, planned, None, clock, error=str(exc)))
                    continue
                rows.append(result_row(item, planned, outcome, clock, span=(began, time.perf_counter())))
                if not outcome.from_cache:
                    rows[-1].update(outcome.entry.phase_fields())  # where its seconds went (phases.py)
                    if profile:
                        from ..store.phases import summary_line

                        err.print(f"{item.problem.describe()}: {summary_line(outcome.entry.phase_fields())}",
                                  markup=False, highlight=False)
            clock.mark("tuned")
        clock.mark("closed")
    finally:
        progress.close()
    for row in rows:
        if row.get("error"):
            err.print(failed_line(row), markup=False, highlight=False)
    if json_out:
        out.print(dumps({"from": str(path), "problems": rows, "stages_s": clock.stages}), markup=False, soft_wrap=True)
    else:
        out.print(model_summary_table(rows))
    if profile:
        err.print("command (s since its start): " + ", ".join(
            f"{name} {value:.2f}" for name, value in clock.stages.items() if value is not None),
            markup=False, highlight=False)
    return 1 if any(row["winner"] is None for row in rows) else 0
