"""Drawing while tuning and after: the progress listeners (stderr), a tune's one-line
summary and JSON document, and the number and date formats the tables share (tables.py
draws the tables).

Imports rich only; never torch or triton.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from ..store.entry import Entry
from ..problem import GemmProblem
from ..store.results import Candidate, params_str
from ..text import plural, printable

if TYPE_CHECKING:
    from rich.progress import Progress


def _progress(console: Console) -> "Progress":
    """A transient bar: description, bar, done/total, elapsed (rich.progress is imported
    here, when a tune draws one: `cache show` does without it)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=True)


# from here up a number is written with an exponent: a time or a rate read from a cache file
# may be any finite number, and 1e308 written out is 309 digits that no table column holds
_EXPONENT_FROM = 1e7


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "-"
    if ms >= _EXPONENT_FROM:
        return f"{ms:.3g}"
    return f"{ms:.4f}" if ms < 1 else f"{ms:.3f}" if ms < 100 else f"{ms:.1f}"


def fmt_tflops(value: float) -> str:
    return f"{value:.1f}" if 10 <= value < _EXPONENT_FROM else f"{value:.3g}"


def say_notes(console: Console, notes: list[str]) -> None:
    """Each note as one "note: " line."""
    for message in notes:
        console.print(f"[yellow]note:[/yellow] {escape(message)}", highlight=False)


class ProgressReporter:
    """A TuneListener that draws a progress bar per problem on stderr. `preamble`: notes
    said before its first line (a command's notes that wait until its input passed the
    tuner's checks, so that a bad input's error is the one line on stderr)."""

    def __init__(self, console: Console, enabled: bool = True, preamble: list[str] | None = None) -> None:
        self.console = console
        self.enabled = enabled
        self.progress: Progress | None = None
        self.task = None
        self.preamble = list(preamble or ())

    def _say_preamble(self) -> None:
        notes, self.preamble = self.preamble, []
        say_notes(self.console, notes)

    def notice(self, message: str) -> None:
        self._say_preamble()
        say_notes(self.console, [message])

    def cache_hit(self, problem: GemmProblem, entry: Entry) -> None:
        self._say_preamble()
        if not self.enabled:
            return
        winner = entry.winner
        what = " ".join(part for part in (winner.uid, params_str(winner.params), f"{fmt_ms(winner.ms)} ms") if part)
        self.console.print(
            printable(f"cached: {problem.describe()} -> {what}, tuned {tuned_text(entry.tuned_at)} (--force re-tunes)"),
            highlight=False, markup=False, soft_wrap=False)

    def planned(self, problem: GemmProblem, choices) -> None:
        self._say_preamble()
        if not self.enabled:
            return
        pruned = choices.pruned_counts()
        pruned_text = ", ".join(f"{n} by {stage}" for stage, n in pruned.items()) or "none"
        self.console.print(
            f"tuning {problem.describe()} on {problem.device}: {plural(len(choices.choices), 'candidate')} "
            f"of {plural(choices.considered, 'config')} (pruned: {pruned_text})", highlight=False, markup=False,
            soft_wrap=False)
        self.progress = _progress(self.console)
        self.progress.start()
        self.task = self.progress.add_task("benchmarking", total=len(choices.choices))

    def candidate_done(self, problem, candidate: Candidate, done: int, total: int,
                       best: Candidate | None) -> None:
        if self.progress is None:
            return
        best_text = f"best {fmt_ms(best.ms)} ms {best.uid}" if best else "no valid candidate yet"
        self.progress.update(self.task, completed=done, description=f"benchmarking ({best_text})")

    def finished(self, outcome) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


class ModelProgress(ProgressReporter):
    """Progress for many problems: one overall bar, plus a line per problem as it ends."""

    def __init__(self, console: Console, total: int) -> None:
        super().__init__(console, enabled=True)
        self.total = total
        self.done = 0
        self.overall = _progress(console)
        self.overall_task = self.overall.add_task("problems", total=total)
        self.overall.start()

    def cache_hit(self, problem: GemmProblem, entry: Entry) -> None:
        winner = entry.winner
        self.console.print(printable(f"cached: {problem.describe()} -> {winner.uid} "
                                     f"{fmt_ms(winner.ms)} ms"), highlight=False, markup=False, soft_wrap=False)

    def planned(self, problem: GemmProblem, choices) -> None:
        self.overall.update(self.overall_task, description=escape(f"tuning {problem.describe()}"))
        self.current_total = len(choices.choices)

    def candidate_done(self, problem, candidate, done, total, best) -> None:
        best_text = f"best {fmt_ms(best.ms)} ms" if best else "no valid candidate yet"
        self.overall.update(self.overall_task,
                            description=escape(f"{problem.describe()}: {done}/{total} candidates, {best_text}"))

    def finished(self, outcome) -> None:
        self.done += 1
        self.overall.update(self.overall_task, completed=self.done, description="problems")
        if not outcome.from_cache:
            for line in tuned_lines(outcome):
                self.console.print(line, highlight=False, markup=False, soft_wrap=False)

    def close(self) -> None:
        self.overall.stop()


TERMINAL_WIDTH = 80  # the lines of a tune fit it; a longer head puts the times on a line of their own


def tuned_lines(outcome) -> list[str]:
    """A fresh tune as lines that each fit an 80-column terminal: the problem and its
    winner's uid and time, then (indented) the winner's params and the candidates' counts."""
    entry: Entry = outcome.entry
    head = f"tuned: {outcome.problem.describe()} -> "
    winner = entry.winner
    if winner is None:
        return [head + outcome_summary(outcome)]
    times = f"{fmt_ms(winner.ms)} ms, {fmt_tflops(winner.tflops)} TFLOP/s"
    first = printable(f"{head}{winner.uid} {times}")
    lines = [first] if len(first) <= TERMINAL_WIDTH else [printable(f"{head}{winner.uid}"), f"  {times}"]
    shown = params_str(winner.params)
    if shown:
        lines.append(printable(f"  {shown}"))
    lines.append(f"  {_counts_and_seconds(entry)}")
    return lines


def _status_counts(entry: Entry) -> str:
    """How many candidates ended in each status: "3 ok, 1 skipped"."""
    statuses: dict[str, int] = {}
    for cand in entry.candidates:
        statuses[cand.status] = statuses.get(cand.status, 0) + 1
    return printable(", ".join(f"{n} {s}" for s, n in sorted(statuses.items())))


def _counts_and_seconds(entry: Entry) -> str:
    return f"[{_status_counts(entry)}; tuned in {entry.tune_seconds or 0:.1f} s]"


def outcome_summary(outcome) -> str:
    entry: Entry = outcome.entry
    winner = entry.winner
    if winner is None:
        if any(c.cut_by_budget for c in entry.candidates):
            return f"no valid candidate ({_status_counts(entry)}): none finished within --budget; raise it"
        return f"no valid candidate ({_status_counts(entry)})"
    shown = printable(" ".join(part for part in (winner.uid, params_str(winner.params)) if part))
    line = f"winner: {shown}  {fmt_ms(winner.ms)} ms  {fmt_tflops(winner.tflops)} TFLOP/s"
    counts = _counts_and_seconds(entry)
    # the counts whole on a line of their own where the one line would wrap inside them
    return f"{line}  {counts}" if len(line) + 2 + len(counts) <= TERMINAL_WIDTH else f"{line}\n  {counts}"


def outcome_json(outcome) -> dict[str, Any]:
    entry: Entry = outcome.entry
    return {
        "problem": entry.problem.to_dict(),
        "key": outcome.key,
        "from_cache": outcome.from_cache,
        "winner": None if entry.winner is None else entry.winner.to_dict(),
        "candidates": [c.to_dict() for c in entry.candidates],
        "pruned": dict(entry.pruned or {}),
        "considered": entry.considered,
        "fingerprint": dict(entry.fingerprint),
        "tuned_at": entry.tuned_at,
        "tune_seconds": entry.tune_seconds,
        # where the tune's seconds went (phases.py); absent from a cache hit
        **({} if outcome.from_cache else entry.phase_fields()),
    }


def _plain(value: Any) -> Any:
    """JSON has no NaN or infinity: write them as null."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def dumps(document: Any) -> str:
    return json.dumps(_plain(document), indent=2, sort_keys=False, allow_nan=False)


def tuned_text(value: Any) -> str:
    """An entry's tuned_at as "2026-11-01 14:03" (UTC), or as stored when not a date."""
    if not isinstance(value, str):
        return "?"
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return printable(value)
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M")
