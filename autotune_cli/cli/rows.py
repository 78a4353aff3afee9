"""A tuned problem's row in the model and list reports: its cuBLAS baseline, what the
winner saves per forward pass, when its stage ended."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..entry import Entry, Winner

def aten_ms(entry: "Entry") -> float | None:
    """The cuBLAS baseline of a tuned entry: the fastest plain vendor call on the operands as
    given (results.VENDOR_UIDS), what the model runs untuned. Other aten candidates
    (aten::mm_aligned copies into padded buffers) are wins over it, not it."""
    from ..results import VENDOR_UIDS

    times = [c.ms for c in entry.candidates if c.status == "ok" and c.uid in VENDOR_UIDS and c.ms]
    return min(times) if times else None


def saved_ms(baseline_ms: float | None, winner: "Winner | None", count: int) -> float | None:
    """Milliseconds per forward pass the winner saves over the baseline, for `count` calls
    (None when either time is unknown)."""
    if baseline_ms is None or winner is None or not winner.ms:
        return None
    return (baseline_ms - winner.ms) * count


class _Clock:
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
             "hint": f.hint} for f, share in zip(found, shares)]


def result_row(item, planned: dict, outcome, clock: _Clock, slot=0, device_name=None, host=None,
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


def pass_estimates(rows: list[dict]) -> list[str]:
    """The GEMM time of one forward pass, aten's and the winners': one line per set of
    dynamic-dim values the model was read at (a pass runs at one of them, never all), each
    summing the problems that run there (the static ones, and those hinted at those values).
    Where cuBLAS was not timed (--templates left aten out) the line says so, not 0 ms."""
    # the values a pass runs at: each hint that no other hint extends (a problem that
    # depends on fewer dims runs in every pass its values agree with)
    hints = [dict(h) for h in {tuple(sorted(row["hint"].items())) for row in rows if row.get("hint")}]
    passes = [h for h in hints if not any(h != o and h.items() <= o.items() for o in hints)]
    passes = sorted(passes, key=lambda h: [h[name] for name in sorted(h)]) or [{}]
    lines = []
    for at in passes:
        ran = [row for row in rows
               if not row.get("hint") or row["hint"].items() <= at.items()]
        where = f" at {', '.join(f'{name}={value}' for name, value in at.items())}" if at else ""
        if not all(row["aten_ms"] for row in ran):  # no baseline to count the rest at
            tuned = [row["winner"]["ms"] * row["count"] for row in ran if row["winner"] and row["winner"].get("ms")]
            lines.append(f"estimated GEMM time per forward pass{where}: tuned {sum(tuned):.4f} ms over "
                         f"{len(tuned)} of {len(ran)} problem(s); aten not timed for "
                         f"{sum(1 for row in ran if not row['aten_ms'])} (--templates without aten, or failed)")
            continue
        total = sum(row["aten_ms"] * row["count"] for row in ran)
        saved = sum(row["saved_ms"] for row in ran if row["saved_ms"] is not None)  # none: aten runs
        lines.append(f"estimated GEMM time per forward pass{where}: aten {total:.4f} ms, "
                     f"tuned {total - saved:.4f} ms (saves {saved:.4f} ms)")
    return lines

