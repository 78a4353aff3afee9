"""Drawing: progress while tuning (stderr), tables and JSON documents (stdout).

Imports rich only; never torch or triton.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .problem import GemmProblem
from .results import Candidate, params_str
from .text import markup, printable


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "-"
    return f"{ms:.4f}" if ms < 1 else f"{ms:.3f}" if ms < 100 else f"{ms:.1f}"


def fmt_tflops(value: float) -> str:
    return f"{value:.1f}" if value >= 10 else f"{value:.3g}"


class ProgressReporter:
    """A TuneListener that draws a progress bar per problem on stderr."""

    def __init__(self, console: Console, enabled: bool = True) -> None:
        self.console = console
        self.enabled = enabled
        self.progress: Progress | None = None
        self.task = None

    def notice(self, message: str) -> None:
        self.console.print(f"[yellow]note:[/yellow] {escape(message)}", highlight=False)

    def cache_hit(self, problem: GemmProblem, entry: dict) -> None:
        if not self.enabled:
            return
        winner = entry["winner"]
        self.console.print(
            printable(f"cached: {problem.describe()} -> {winner['uid']} {params_str(winner['params'])} "
                      f"{fmt_ms(winner['ms'])} ms (tuned {entry.get('tuned_at', '?')}; --force to re-tune)"),
            highlight=False, markup=False)

    def planned(self, problem: GemmProblem, choices) -> None:
        if not self.enabled:
            return
        pruned = choices.pruned_counts()
        pruned_text = ", ".join(f"{n} by {stage}" for stage, n in pruned.items()) or "none"
        self.console.print(
            f"tuning {problem.describe()} on {problem.device}: {len(choices.choices)} candidates "
            f"of {choices.considered} configs (pruned: {pruned_text})", highlight=False, markup=False)
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=self.console, transient=True,
        )
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
        self.overall = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=console, transient=True,
        )
        self.overall_task = self.overall.add_task("problems", total=total)
        self.overall.start()

    def cache_hit(self, problem: GemmProblem, entry: dict) -> None:
        winner = entry["winner"]
        self.console.print(printable(f"cached: {problem.describe()} -> {winner['uid']} "
                                     f"{fmt_ms(winner['ms'])} ms"), highlight=False, markup=False)

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
            self.console.print(f"tuned: {outcome.problem.describe()} -> {outcome_summary(outcome)}",
                               highlight=False, markup=False)

    def close(self) -> None:
        self.overall.stop()


def plan_table(rows: list[dict]) -> Table:
    table = Table(title="matmuls found", title_justify="left")
    for name, justify in (("#", "right"), ("problem", "left"), ("count", "right"),
                          ("GFLOP each", "right"), ("share", "right"), ("from", "left"), ("hint", "left")):
        table.add_column(name, justify=justify, no_wrap=name == "problem")
    for i, row in enumerate(rows, 1):
        table.add_row(str(i), escape(row["describe"]), str(row["count"]), f"{row['gflop']:.3g}",
                      f"{100 * row['share']:.1f}%", ", ".join(row["sources"]),
                      ", ".join(f"{k}={v}" for k, v in (row["hint"] or {}).items()) or "-")
    return table


def model_summary_table(rows: list[dict]) -> Table:
    table = Table(title="winners", title_justify="left")
    for name, justify in (("problem", "left"), ("count", "right"), ("winner", "left"),
                          ("params", "left"), ("ms", "right"), ("aten ms", "right"),
                          ("speed-up", "right"), ("saved/pass ms", "right"), ("cached", "left")):
        table.add_column(name, justify=justify, no_wrap=name in ("problem", "params"))
    for row in rows:
        winner = row["winner"] or {}
        table.add_row(escape(row["describe"]), str(row["count"]), markup(winner.get("uid", "(none)")),
                      markup(params_str(winner.get("params", {}))), fmt_ms(winner.get("ms")),
                      fmt_ms(row["aten_ms"]),
                      f"{row['aten_ms'] / winner['ms']:.2f}x" if row["aten_ms"] and winner.get("ms") else "-",
                      fmt_ms(row["saved_ms"]) if row["saved_ms"] is not None else "-",
                      "yes" if row["from_cache"] else "")
    return table


def candidate_rows(entry: dict) -> list[dict]:
    return [dict(c) for c in entry.get("candidates", [])]


def outcome_table(outcome, top: int = 10) -> Table:
    entry = outcome.entry
    problem = outcome.problem
    winner = entry.get("winner")
    title = f"{problem.describe()} on {entry['fingerprint']['device_name']}"
    if outcome.from_cache:
        title += " (from cache)"
    table = Table(title=markup(title), title_justify="left")
    for name, justify in (("#", "right"), ("template", "left"), ("params", "left"), ("ms", "right"),
                          ("TFLOP/s", "right"), ("% of best", "right"), ("status", "left")):
        table.add_column(name, justify=justify, no_wrap=name in ("template", "params"))
    rows = candidate_rows(entry)
    ok = sorted((c for c in rows if c["status"] == "ok"), key=lambda c: c["ms"])
    failed = [c for c in rows if c["status"] != "ok"]
    best = ok[0]["ms"] if ok else None  # the fastest; the winner may be cuBLAS within the margin

    def is_winner(cand) -> bool:
        return bool(winner) and cand["uid"] == winner["uid"] and cand["params"] == winner["params"]

    for rank, cand in enumerate(ok[:top], 1):
        ms = cand["ms"]
        chosen = is_winner(cand)
        table.add_row(str(rank), f"{'[bold green]' if chosen else ''}{markup(cand['uid'])}",
                      markup(params_str(cand["params"])),
                      fmt_ms(ms), fmt_tflops(problem.tflops(ms)), f"{100 * best / ms:.0f}%" if best else "-",
                      "[bold green]ok, winner[/bold green]" if chosen else "ok")
    for cand in failed[: max(0, top - len(ok[:top]))] if len(failed) <= 5 else failed[:5]:
        table.add_row("-", markup(cand["uid"]), markup(params_str(cand["params"])), "-", "-", "-",
                      f"[red]{markup(cand['status'])}[/red]")
    return table


def outcome_summary(outcome) -> str:
    entry = outcome.entry
    winner = entry.get("winner")
    statuses: dict[str, int] = {}
    for cand in entry.get("candidates", []):
        statuses[cand["status"]] = statuses.get(cand["status"], 0) + 1
    counts = printable(", ".join(f"{n} {s}" for s, n in sorted(statuses.items())))
    if winner is None:
        return f"no valid candidate ({counts})"
    shown = printable(f"{winner['uid']} {params_str(winner['params'])}")
    return (f"winner: {shown}  {fmt_ms(winner['ms'])} ms  "
            f"{fmt_tflops(winner['tflops'])} TFLOP/s  [{counts}; tuned in {entry.get('tune_seconds', 0):.1f} s]")


def outcome_json(outcome) -> dict[str, Any]:
    entry = outcome.entry
    return {
        "problem": entry["problem"],
        "key": outcome.key,
        "from_cache": outcome.from_cache,
        "winner": entry.get("winner"),
        "candidates": entry.get("candidates", []),
        "pruned": entry.get("pruned", {}),
        "considered": entry.get("considered"),
        "fingerprint": entry["fingerprint"],
        "tuned_at": entry.get("tuned_at"),
        "tune_seconds": entry.get("tune_seconds"),
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


def cache_table(items: Iterable[tuple[str, dict]], current_machine: str | None = None) -> Table:
    """`current_machine`: this host's CPU machine digest. CPU entries say whether they were
    measured here; GPU entries say "?" (knowing needs torch; `cache prune --not-this-machine`
    asks the GPU)."""
    table = Table(title="autotune cache", title_justify="left")
    for name, justify in (("problem", "left"), ("device", "left"), ("winner", "left"),
                          ("params", "left"), ("ms", "right"), ("TFLOP/s", "right"),
                          ("tuned", "left"), ("here", "left")):
        table.add_column(name, justify=justify, no_wrap=name in ("problem", "params"))
    for key, entry in items:
        problem = GemmProblem.from_dict(entry["problem"])
        winner = entry.get("winner") or {}
        fp = entry["fingerprint"]
        if fp.get("device_type") == "cpu" and current_machine:
            here = "yes" if entry.get("machine") == current_machine else "no"
        else:
            here = "?"
        table.add_row(escape(problem.describe()), markup(fp.get("device_name", "?")),
                      markup(winner.get("uid", "(none)")),
                      markup(params_str(winner.get("params", {}))), fmt_ms(winner.get("ms")),
                      fmt_tflops(winner["tflops"]) if winner.get("tflops") else "-",
                      markup(entry.get("tuned_at", "?")), here)
    return table
