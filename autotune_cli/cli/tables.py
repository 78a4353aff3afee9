"""Tables that fit the width they are drawn at (FitTable, Col), and the command's tables:
the model's matmuls (plan_table), its winners (model_summary_table), one tune's candidates
(outcome_table) and the cache (cache_table).

Imports rich only; never torch or triton.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ..store.entry import Entry
from ..tune.report import fmt_ms, fmt_tflops, tuned_text
from ..store.results import BUDGET_RAN_OUT, OK, SKIPPED, Candidate, params_str
from ..text import printable
from ..console import message_lines


# -- tables that fit the width they are drawn at ------------------------------------------
# A table is drawn at the console's width when printed (a terminal's own width, or the
# piped default): of its layouts, widest first, the one that wraps least among those whose
# numbers and ids fit whole; text wraps at spaces. Numbers are never wrapped or cut.

@dataclass
class Col:
    header: str
    cells: list  # one str or Text per row; "\n" starts a line of the cell
    number: bool = False  # right-aligned, always whole
    whole: bool = False  # the first line of each cell (an id) kept whole while the layout fits
    texts: list = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.texts = [cell if isinstance(cell, Text) else Text(str(cell)) for cell in self.cells]

    def _lines(self) -> list[str]:
        return [self.header, *(line for text in self.texts for line in text.plain.split("\n"))]

    @property
    def natural(self) -> int:
        """Width with every line on one line."""
        return max(cell_len(line) for line in self._lines())

    @property
    def least(self) -> int:
        """Width below which something would be cut: a number or id, or else a word."""
        words = self.header.split()
        for text in self.texts:
            lines = text.plain.split("\n")
            if self.number:
                words += lines
            elif self.whole:
                words += [lines[0], *(word for line in lines[1:] for word in line.split())]
            else:
                words += [word for line in lines for word in line.split()]
        return max((cell_len(word) for word in words), default=1)


def _overhead(columns: int) -> int:
    """Borders and padding of rich's default box: "│ " + " │ " between cells + " │"."""
    return 3 * columns + 1


def _widths(layout: Sequence[Col], width: int) -> list[int]:
    """Each column's least width; the room left goes first to the columns it can unwrap
    whole (those that lack least first), then, a column at a time, to the one that lacks
    most. Where even the least does not fit, text gives way first."""
    widths = [col.least for col in layout]
    room = width - _overhead(len(layout)) - sum(widths)
    for i in sorted(range(len(layout)), key=lambda j: layout[j].natural - widths[j]):
        lack = layout[i].natural - widths[i]
        if 0 < lack <= room:
            widths[i] += lack
            room -= lack
    while room > 0:
        lacks = [col.natural - w for col, w in zip(layout, widths)]
        i = max(range(len(layout)), key=lambda j: lacks[j])
        if lacks[i] <= 0:
            break
        widths[i] += 1
        room -= 1
    for numbers in (False, True):  # text and ids first, numbers only at a width that absurd
        while room < 0:
            movable = [j for j, col in enumerate(layout) if col.number == numbers and widths[j] > 1]
            if not movable:
                break
            widths[max(movable, key=lambda j: widths[j])] -= 1
            room += 1
    return widths


class FitTable:
    """A table drawn at the width it is printed at (see above). `layouts` show the same
    fields, arranged otherwise; `fallbacks` leave some out, for when no layout fits."""

    def __init__(self, title: str, layouts: Sequence[Sequence[Col]],
                 fallbacks: Sequence[Sequence[Col]] = (), notes: Sequence[str] = ()) -> None:
        self.title = title
        self.layouts = [list(layout) for layout in layouts]
        self.fallbacks = [list(layout) for layout in fallbacks]
        self.notes = list(notes)  # lines under the table, for what its rows leave out

    def layout_for(self, width: int) -> list[Col]:
        def total(layout, size) -> int:
            return sum(size(col) for col in layout) + _overhead(len(layout))

        for group in (self.layouts, self.fallbacks):
            fitting = [layout for layout in group if total(layout, lambda c: c.least) <= width]
            if fitting:  # the one that wraps least (the first of equals)
                return min(fitting, key=lambda layout: max(0, total(layout, lambda c: c.natural) - width))
        return (self.fallbacks or self.layouts)[-1]

    def table(self, width: int) -> Table:
        layout = self.layout_for(width)
        table = Table()
        for col, size in zip(layout, _widths(layout, width)):
            table.add_column(col.header, justify="right" if col.number else "left", width=size,
                             overflow="fold")
        for row in zip(*(col.texts for col in layout)):
            table.add_row(*row)
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # the title a line of its own (as the table's title rich pads it with spaces to its
        # width); it and the notes laid out as every message is (console.message_lines)
        yield message_lines(Text(self.title, style="table.title"), options.max_width)  # no markup
        if any(col.cells for col in self.layouts[0]):  # no rows: the notes say why, not an empty grid
            yield self.table(options.max_width)
        for note in self.notes:
            yield message_lines(note, options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        every = self.layouts + self.fallbacks
        least = min(sum(c.least for c in lay) + _overhead(len(lay)) for lay in every)
        most = max(sum(c.natural for c in lay) + _overhead(len(lay)) for lay in every)
        return Measurement(min(least, options.max_width), min(most, options.max_width))


def _lines(*parts: "str | Text") -> Text:
    """One cell of several lines (empty parts left out)."""
    kept = [part if isinstance(part, Text) else Text(part) for part in parts if part]
    return Text("\n").join(kept) if kept else Text("")


def plan_table(rows: list[dict]) -> FitTable:
    """`hint` only where some row has one: a static model's column of "-" took the width its
    problems need."""
    hints = [printable(", ".join(f"{k}={v}" for k, v in (row["hint"] or {}).items()) or "-") for row in rows]
    columns = [
        Col("#", [str(i) for i in range(1, len(rows) + 1)], number=True),
        Col("problem", [row["describe"] for row in rows]),
        Col("count", [str(row["count"]) for row in rows], number=True),
        Col("GFLOP each", [f"{row['gflop']:.3g}" for row in rows], number=True),
        Col("share", [f"{100 * row['share']:.1f}%" for row in rows], number=True),
        Col("from", [printable(", ".join(row["sources"])) for row in rows]),
    ]
    if any(row["hint"] for row in rows):
        columns.append(Col("hint", hints))
    return FitTable("matmuls found", [columns])


def model_summary_table(rows: list[dict]) -> FitTable:
    """Narrower layouts put the winner's params under its uid, then the count and whether
    it came from the cache under the problem; the narrowest leaves out the aten time (the
    speed-up says it)."""
    from ..model.found import GROUP_SOURCE  # a group's one GEMM: said under its problem

    winners = [row["winner"] or {} for row in rows]
    uids = [printable(w.get("uid", "(none)")) for w in winners]
    params = [printable(params_str(w.get("params", {}))) for w in winners]
    # a problem read at dynamic-dim values says them: two inputs' dims may pose one problem each
    at = [printable(", ".join(f"{k}={v}" for k, v in (row.get("hint") or {}).items())) for row in rows]
    problem = Col("problem", [_lines(row["describe"], GROUP_SOURCE if row.get("group") else "", where)
                              for row, where in zip(rows, at)])
    count = Col("count", [str(row["count"]) for row in rows], number=True)
    ms = Col("ms", [fmt_ms(w.get("ms")) for w in winners], number=True)
    aten = Col("aten ms", [fmt_ms(row["aten_ms"]) for row in rows], number=True)
    speed = Col("speed-up", [f"{row['aten_ms'] / w['ms']:.2f}x" if row["aten_ms"] and w.get("ms") else "-"
                             for row, w in zip(rows, winners)], number=True)
    saved = Col("saved/pass ms", [fmt_ms(row["saved_ms"]) if row["saved_ms"] is not None else "-"
                                  for row in rows], number=True)
    cached = Col("cached", ["yes" if row["from_cache"] else "" for row in rows])
    winner_params = Col("winner", [_lines(Text(u), p) for u, p in zip(uids, params)], whole=True)
    problem_notes = Col("problem", [
        _lines(row["describe"], ", ".join(note for note in (
            GROUP_SOURCE if row.get("group") else "", where,
            f"count {row['count']}" if row["count"] != 1 else "",
            "cached" if row["from_cache"] else "") if note))
        for row, where in zip(rows, at)])
    return FitTable("winners", [
        [problem, count, Col("winner", uids, whole=True), Col("params", params), ms, aten, speed,
         saved, cached],
        [problem, count, winner_params, ms, aten, speed, saved, cached],
        [problem_notes, winner_params, ms, aten, speed, saved],
    ], fallbacks=[[problem_notes, winner_params, ms, speed, saved]])

def outcome_table(outcome, top: int = 10) -> FitTable:
    """At most `top` rows: the fastest, then the failures worth seeing (a compile error, a
    wrong result, a timeout). The skipped (what --budget left untimed, what the search passed
    over) are counted in one line under the table, not listed: nothing went wrong with them.
    One layout at every width, the columns README's "Reading the output" names: `kernel`
    is the template's uid with its params under it (a table of aten rows alone showed an
    empty `params` column where the others showed `kernel`)."""
    entry: Entry = outcome.entry
    problem = outcome.problem
    winner = entry.winner
    title = f"{problem.describe()} on {entry.device_name}"
    if outcome.from_cache:
        title += " (from cache)"
    ok = sorted((c for c in entry.candidates if c.status == OK), key=lambda c: c.ms)
    failed = [c for c in entry.candidates if c.status not in (OK, SKIPPED)]
    skipped = [c for c in entry.candidates if c.status == SKIPPED]
    untimed = sum(c.cut_by_budget for c in skipped)
    passed_over = len(skipped) - untimed
    notes = [f"{untimed} not timed: {BUDGET_RAN_OUT}" if untimed else "",
             f"{passed_over} passed over by the search (--json says why)" if passed_over else ""]
    best = ok[0].ms if ok else None  # the fastest; the winner may be cuBLAS within the margin

    def is_winner(cand: Candidate) -> bool:
        return winner is not None and cand.identity == winner.identity

    shown = [(str(rank), cand) for rank, cand in enumerate(ok[:top], 1)]
    listed_failures = failed[: max(0, top - len(shown))]
    shown += [("-", cand) for cand in listed_failures]
    unlisted = Counter(c.status for c in failed[len(listed_failures):])
    if unlisted:  # a failure is never out of sight without a word: each kind counted
        counts = ", ".join(f"{n} {status.replace('_', ' ')}" for status, n in sorted(unlisted.items()))
        notes.insert(0, f"not listed: {counts} (--top, --json)")
    chosen = [cand.status == OK and is_winner(cand) for _, cand in shown]
    uids = [Text(printable(cand.uid), style="bold green" if pick else "")
            for (_, cand), pick in zip(shown, chosen)]
    params = [printable(params_str(cand.params)) for _, cand in shown]
    statuses = [Text("ok, winner", style="bold green") if pick else
                Text("ok") if cand.status == OK else Text(printable(cand.status), style="red")
                for (_, cand), pick in zip(shown, chosen)]

    def measured(fmt):
        return [fmt(cand.ms) if cand.status == OK else "-" for _, cand in shown]

    rank = Col("#", [r for r, _ in shown], number=True)
    numbers = [Col("ms", measured(fmt_ms), number=True),
               Col("TFLOP/s", measured(lambda ms: fmt_tflops(problem.tflops(ms))), number=True),
               Col("% of best", measured(lambda ms: f"{100 * best / ms:.0f}%"), number=True)]
    status = Col("status", statuses)
    return FitTable(printable(title), [
        [rank, Col("kernel", [_lines(u, p) for u, p in zip(uids, params)], whole=True), *numbers, status],
    ], notes=[note for note in notes if note])


def cache_table(items: Iterable[tuple[str, Entry]], current_machine: str | None = None,
                stale: Mapping[str, str] | None = None) -> FitTable:
    """`current_machine`: this host's CPU machine digest. CPU entries say whether they were
    measured here; GPU entries say "?" (knowing needs torch; `cache prune --not-this-machine`
    asks the GPU). `stale`: the keys whose winner is not served (`selections.stale_reason`),
    marked "not served" under their date. Narrower, the device and "here" go under the
    problem, and params under the winner's uid."""
    rows = []
    for key, entry in items:
        winner = entry.winner
        if entry.fingerprint.get("device_type") == "cpu" and current_machine:
            here = "yes" if entry.machine == current_machine else "no"
        else:
            here = "?"
        rows.append((entry.problem.describe(), printable(entry.device_name),
                     printable(winner.uid if winner else "(none)"),
                     printable(params_str(winner.params if winner else {})), fmt_ms(winner.ms if winner else None),
                     fmt_tflops(winner.tflops) if winner and winner.tflops else "-",
                     _lines(tuned_text(entry.tuned_at), "not served" if key in (stale or {}) else ""), here))
    describe, device, uid, params, ms, tflops, tuned, here = (list(c) for c in zip(*rows)) if rows else ([],) * 8
    where = {"yes": "measured here", "no": "measured elsewhere", "?": ""}
    numbers = [Col("ms", ms, number=True), Col("TFLOP/s", tflops, number=True)]
    winner_params = Col("winner", [_lines(u, p) for u, p in zip(uid, params)], whole=True)
    return FitTable("autotune cache", [
        [Col("problem", describe), Col("device", device), Col("winner", uid, whole=True),
         Col("params", params), *numbers, Col("tuned", tuned), Col("here", here)],
        [Col("problem", describe), Col("device", device), winner_params, *numbers,
         Col("tuned", tuned), Col("here", here)],
        [Col("problem", [_lines(d, ", ".join(p for p in (dev, where[h]) if p))
                         for d, dev, h in zip(describe, device, here)]),
         winner_params, *numbers, Col("tuned", tuned)],
    ])
