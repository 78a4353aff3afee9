"""Search strategies: how to spend benchmark time over a set of choices.

A strategy is a module with one entry point, `search(ctx) -> list[Candidate]`, its way
described in its docstring. `--search NAME` picks it; adding one is a new file plus a line here.
"""

from __future__ import annotations

from ..errors import UserError
from . import default, exhaustive
from .base import SearchContext

STRATEGIES = {
    "default": default,
    "exhaustive": exhaustive,
}


def get_strategy(name: str):
    try:
        return STRATEGIES[name]
    except KeyError:
        raise UserError(f"unknown search {name!r}; choose one of {', '.join(STRATEGIES)}") from None


__all__ = ["STRATEGIES", "SearchContext", "get_strategy"]
