"""The checks a cache entry's fields pass as they are read (entry.py's `from_dict`): each
recorded field with its check and what it must be, so that a wrong type damages the entry
when it is read (`DamagedCache`, one line) and never crashes a report later.

Plain Python: no torch, no triton.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["CANDIDATE_NUMBERS", "DamagedCache", "PHASE_FIELDS", "RECORDED", "RECORDED_SHAPES", "is_count",
           "is_non_negative", "is_number", "is_str", "json_kind", "mapping_of", "require", "rows_of", "show_value"]


class DamagedCache(ValueError):
    """A cache document, or an entry in it, is not what autotune writes."""


def show_value(value: Any) -> str:
    """repr, cut short: a message stays one readable line whatever the file holds."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def require(condition: bool, message: str) -> None:
    if not condition:
        raise DamagedCache(message)


def is_number(value: Any) -> bool:
    """A finite int or float that the tables can format as a float (so not 10**400)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def json_kind(value: Any) -> str:
    """What a JSON value is, in words: "a number", "a list", ..."""
    for kind, name in ((bool, "true or false"), (int, "a number"), (float, "a number"), (str, "a string"),
                       (list, "a list"), (type(None), "null")):
        if isinstance(value, kind):
            return name
    return f"a {type(value).__name__}"


def is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_non_negative(value: Any) -> bool:
    return is_number(value) and value >= 0


def is_str(value: Any) -> bool:
    return isinstance(value, str)


def mapping_of(check: Any) -> Any:
    """A check of {string: value} whose every value passes `check`."""
    return lambda value: isinstance(value, dict) and all(is_str(k) and check(v) for k, v in value.items())


def rows_of(*checks: Any) -> Any:
    """A check of a list of rows, each a list whose items pass `checks` in turn."""
    return lambda value: isinstance(value, list) and all(
        isinstance(row, list) and len(row) == len(checks) and all(c(v) for c, v in zip(checks, row))
        for row in value)


# The fields an entry may hold besides problem, fingerprint, winner and candidates, in the
# order the tuner writes them, each with its check and what it must be (null: not recorded);
# any other field is kept as it is (Entry.extra). The reports format them, so a wrong type
# must damage the entry when it is read, not crash a report later.
RECORDED_SHAPES: dict[str, tuple[Any, str]] = {
    "pruned": (mapping_of(is_count), "{stage: count}"),
    "considered": (is_count, "a count"),
    "search": (is_str, "a string"),
    "space": (is_str, "a string"),
    "tool_version": (is_str, "a string"),
    "tuned_at": (is_str, "a string"),
    "tune_seconds": (is_non_negative, "a number of 0 or more"),
    "partial": (lambda v: isinstance(v, bool), "true or false"),
    "cut_short": (lambda v: isinstance(v, bool), "true or false"),
    "resumed": (is_count, "a count"),
    "timeline": (rows_of(is_str, is_str, is_number), "[[candidate, round, seconds], ...]"),
    "compiles": (rows_of(is_number, is_number, is_number), "[[sent, done, seconds], ...]"),
    "compile_pool": (lambda v: isinstance(v, dict), "an object"),
    "phases": (mapping_of(is_non_negative), "{phase: seconds}"),
    "worker_s": (mapping_of(is_non_negative), "{step: seconds}"),
    "rounds": (mapping_of(is_count), "{round: count}"),
    "compile_pool_s": (lambda v: isinstance(v, dict) and is_count(v.get("kernels"))
                       and is_non_negative(v.get("busy")) and is_non_negative(v.get("span")),
                       "{kernels: count, busy: seconds, span: seconds}"),
    "startups": (rows_of(is_str, is_non_negative), "[[role, seconds], ...]"),
}
RECORDED = tuple(RECORDED_SHAPES)
# A candidate's numbers besides its time: each a finite number of 0 or more, or null.
CANDIDATE_NUMBERS = ("p20", "p80", "max_rel_error", "worst_of_allowed", "compile_s", "first_run_s")
# Where a tune's seconds went (phases.py), in the order the reports give them.
PHASE_FIELDS = ("phases", "worker_s", "compile_pool_s", "startups", "rounds")
