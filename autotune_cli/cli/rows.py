"""A tuned problem's row in the model and list reports: its cuBLAS baseline, what the
winner saves per forward pass, when its stage ended."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..store.entry import Entry, Winner

def aten_ms(entry: "Entry") -> float | None:
    """The cuBLAS baseline of a tuned entry: the fastest plain vendor call on the operands as
    given (`Template.vendor`), what the model runs untuned. Other aten candidates
    (aten::mm_aligned copies into padded buffers) are wins over it, not it."""
    from ..templates import vendor_uids

    vendors = vendor_uids()
    times = [c.ms for c in entry.candidates if c.status == "ok" and c.uid in vendors and c.ms]
    return min(times) if times else None


def failed_line(row: dict) -> str:
    """The line that says a problem of a list failed: its error without the problem said
    twice (an error names its problem, to stand alone)."""
    describe, error = row["describe"], str(row["error"])
    return f"failed: {describe}: {error.removeprefix(describe).lstrip(' :')}"


def saved_ms(baseline_ms: float | None, winner: "Winner | None", count: int) -> float | None:
    """Milliseconds per forward pass the winner saves over the baseline, for `count` calls
    (None when either time is unknown)."""
    if baseline_ms is None or winner is None or not winner.ms:
        return None
    return (baseline_ms - winner.ms) * count


class StageClock:
    """Seconds since the command started at which each stage ended (for --json readers)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.stages: dict[str, float] = {}

    def mark(self, stage: str) -> None:
        self.stages[stage] = round(time.perf_counter() - self.started, 3)


def plan_rows(found) -> list[dict]:
    """One row per distinct problem found in a model: what `--plan` shows and `model` tunes."""
    from ..model import plan_flops_share

    shares = plan_flops_share(found)
    return [{"problem": f.problem.to_dict(), "describe": f.problem.describe(), "count": f.count,
             "gflop": f.problem.flops / 1e9, "share": share, "sources": list(f.sources),
             "hint": f.hint, "group": f.group} for f, share in zip(found, shares)]


def result_row(item, planned: dict, outcome, clock: StageClock, slot=0, device_name=None, host=None,
               error=None, span=None) -> dict:
    """A plan row with what tuning its problem gave (or why it failed)."""
    winner = outcome.winner if outcome else None
    aten = aten_ms(outcome.entry) if outcome else None
    saved = saved_ms(aten, winner, item.count)
    if outcome is not None and device_name is None:
        device_name = outcome.entry.device_name
    row = {**planned, "key": outcome.key if outcome else None,
           "from_cache": outcome.from_cache if outcome else False,
           "winner": None if winner is None else winner.to_dict(), "aten_ms": aten, "saved_ms": saved,
           "slot": slot, "device": device_name,
           "tune_seconds": outcome.entry.tune_seconds if outcome and not outcome.from_cache else None}
    if span is not None:  # seconds since the command started: when its tune began and ended
        row["span_s"] = [round(t - clock.started, 3) for t in span]
    if host is not None:
        row["host"] = host
    if error is not None:
        row["error"] = error
    return row


def pass_totals(rows: list[dict], scenarios: list[dict]) -> list[dict]:
    """The GEMM time of one forward pass, aten's and the winners': one record per scenario
    (set of dynamic-dim values, model.find_gemms's `scenarios`) the model was read at, each
    summing every problem that runs there: the static ones and those whose hint agrees with
    its values (two independent dims' problems both run in a pass):
    {"at": values, "problems": n, "aten_ms", "tuned_ms", "saved_ms"}; where cuBLAS was not
    timed for some (--templates left aten out) aten_ms and saved_ms are None and
    "aten_untimed" counts them."""
    totals = []
    for at in scenarios or [{}]:
        ran = [row for row in rows if (not row.get("hint") or row["hint"].items() <= at.items())
               and not row.get("group")]  # a group's one GEMM: its linears' time again
        untimed = sum(1 for row in ran if not row["aten_ms"])
        if untimed:  # no baseline to count the rest at
            tuned = [row["winner"]["ms"] * row["count"] for row in ran if row["winner"] and row["winner"].get("ms")]
            totals.append({"at": at, "problems": len(ran), "tuned_problems": len(tuned), "aten_ms": None,
                           "tuned_ms": sum(tuned), "saved_ms": None, "aten_untimed": untimed})
            continue
        total = sum(row["aten_ms"] * row["count"] for row in ran)
        saved = sum(row["saved_ms"] for row in ran if row["saved_ms"] is not None)  # none: aten runs
        totals.append({"at": at, "problems": len(ran), "aten_ms": total, "tuned_ms": total - saved,
                       "saved_ms": saved})
    return totals


def pass_estimates(rows: list[dict], scenarios: list[dict]) -> list[str]:
    """`pass_totals` as lines."""
    lines = []
    for one in pass_totals(rows, scenarios):
        at = one["at"]
        where = f" at {', '.join(f'{name}={value}' for name, value in at.items())}" if at else ""
        if one["aten_ms"] is None:
            lines.append(f"estimated GEMM time per forward pass{where}: tuned {one['tuned_ms']:.4f} ms over "
                         f"{one['tuned_problems']} of {one['problems']} problem(s); aten not timed for "
                         f"{one['aten_untimed']} (--templates without aten, or failed)")
            continue
        lines.append(f"estimated GEMM time per forward pass{where}: aten {one['aten_ms']:.4f} ms, "
                     f"tuned {one['tuned_ms']:.4f} ms (saves {one['saved_ms']:.4f} ms)")
    return lines

