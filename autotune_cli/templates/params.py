"""Declared template parameters, and the check every stored winner passes before it is used.

Params come back from files that others may write (a shared cache folder, `cache import`),
and a Triton kernel's source, rendered from them, is Python that the caller's process
imports: a value that is not what the template declares could be code. So each template
declares every parameter its `full_params` gives (`Template.params_schema`: name -> Int,
Bool, Choice or Text), and a stored winner is used only when its params are exactly those,
of the declared kinds and ranges, and what the template itself derives from them for the
entry's problem (`full_params(problem, params) == params`). A plugin's template declares its
own; one that declares none takes no params.

Plain Python: imports neither torch nor triton (the cache commands check imports with it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

from ..problem import GemmProblem

if TYPE_CHECKING:
    from ..store.entry import Entry

_SAFE_TEXT = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:+-")


def _show(value: Any) -> str:
    """repr, cut short: one line whatever the value holds (repr escapes control characters)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class Int:
    """An int (not a bool) in [low, high]; `power_of_two` where a block size must be one."""

    low: int
    high: int
    power_of_two: bool = False

    def problem(self, value: Any) -> str | None:
        if type(value) is not int:
            return "not an integer"
        if not self.low <= value <= self.high:
            return f"not in {self.low}..{self.high}"
        if self.power_of_two and value & (value - 1):
            return "not a power of two"
        return None


@dataclass(frozen=True)
class Bool:
    def problem(self, value: Any) -> str | None:
        return None if type(value) is bool else "not true or false"


@dataclass(frozen=True)
class Choice:
    """One of `values`, of the same type (1 is not True, "1" is not 1)."""

    values: tuple

    def problem(self, value: Any) -> str | None:
        if any(type(value) is type(v) and value == v for v in self.values):
            return None
        return f"not one of {', '.join(map(repr, self.values))}"


@dataclass(frozen=True)
class Text:
    """A short string of letters, digits and _ . : + - only: nothing that can end a string
    literal or a comment in generated source, nor move a terminal's cursor."""

    max_length: int = 64

    def problem(self, value: Any) -> str | None:
        if type(value) is not str:
            return "not a string"
        if len(value) > self.max_length:
            return f"longer than {self.max_length} characters"
        if not set(value) <= _SAFE_TEXT:
            return "holds characters other than letters, digits and _ . : + -"
        return None


Param = Union[Int, Bool, Choice, Text]


class BadParams(ValueError):
    """Params that are not what their template declares; `field` names the first bad one."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def check_params(template, params: Any, *, complete: bool = True) -> None:
    """BadParams unless every param is declared by `template` (its `params_schema`) and of
    the declared kind; `complete`: and every declared one is present."""
    schema: dict[str, Param] = template.params_schema
    if not isinstance(params, dict):
        raise BadParams("params", f"{template.uid} params are not an object")
    for name, value in params.items():
        spec = schema.get(name) if isinstance(name, str) else None
        if spec is None:
            raise BadParams(str(name), f"param {_show(name)} is not declared by {template.uid}")
        why = spec.problem(value)
        if why:
            raise BadParams(name, f"param {name} = {_show(value)} is {why}")
    if complete:
        missing = [name for name in schema if name not in params]
        if missing:
            raise BadParams(missing[0], f"param {missing[0]} is missing ({template.uid} declares it)")


def check_winner(template, problem: GemmProblem, params: Any) -> None:
    """BadParams unless `params` are what `template` declares and derives for `problem`:
    complete, of the declared kinds, and a fixed point of its `full_params`."""
    check_params(template, params, complete=True)
    try:
        derived = template.full_params(problem, params)
    except (ValueError, TypeError, KeyError) as exc:
        raise BadParams("params", f"{template.uid} refuses these params ({_show(str(exc))})") from None
    for name in sorted(set(derived) | set(params), key=str):
        if derived.get(name) != params.get(name) or type(derived.get(name)) is not type(params.get(name)):
            raise BadParams(name, f"param {name} = {_show(params.get(name))} is not what {template.uid} "
                                  f"derives for {problem.describe()} ({_show(derived.get(name))})")


def winner_problem(entry: "Entry") -> str | None:
    """Why the winner of a cache entry (an entry.Entry, whose fields are checked) must not be
    built, naming the bad field, or None: its template must be registered here (a plugin's
    loaded), its params pass `check_winner` for the entry's problem, and it must be one of
    the entry's own results that passed (`unverified_winner`)."""
    from .registry import registered_template

    winner = entry.winner
    if winner is None:
        return None
    template = registered_template(winner.uid)
    if template is None:
        return f"winner template {_show(winner.uid)} is not registered here (a plugin's needs --plugin)"
    try:
        check_winner(template, entry.problem, winner.params)
    except BadParams as exc:
        return f"winner {exc}"
    return unverified_winner(entry)


def unverified_winner(entry: "Entry") -> str | None:
    """Why `entry`'s winner is not a verified result of its own candidates, or None. A tune
    picks its winner among its `ok` candidates (search/pick.py), and every entry autotune
    writes records them: a winner whose own result failed (wrong_result, compile_error), or
    that none of its results is, was never checked against the reference, so it is refused."""
    identity = entry.winner.identity
    own = [c for c in entry.candidates if c.identity == identity]
    passed = [c for c in own if c.ok]
    if passed:
        if any(_same_time(c.ms, entry.winner.ms) for c in passed):
            return None
        return (f"winner is not a verified candidate: its time, {_show(entry.winner.ms)} ms, is not "
                f"its own result's ({_show(passed[0].ms)} ms)")
    if own:
        status = own[0].status if own[0].status != "ok" else "ok without a time"
        return f"winner is not a verified candidate: its own result is {status}"
    if not entry.candidates:
        return "winner is not a verified candidate: the entry records no results"
    return "winner is not a verified candidate: its config is none of the entry's results"


def _same_time(recorded: Any, winner: Any) -> bool:
    """Whether a winner's time is its result's: the pick copies it (store/entry.Winner.of),
    so only a hand-edited entry differs (a relative 1e-6 for any float printing)."""
    try:
        return abs(float(recorded) - float(winner)) <= 1e-6 * max(abs(float(recorded)), 1e-12)
    except (TypeError, ValueError):
        return False


def entry_problem(entry: "Entry") -> str | None:
    """`winner_problem`, and each candidate of a registered template has only declared
    params of the declared kinds (results, never built, but printed, and a resumed tune
    may adopt them)."""
    from .registry import registered_template

    why = winner_problem(entry)
    if why:
        return why
    for i, candidate in enumerate(entry.candidates):
        template = registered_template(candidate.uid)
        if template is None:
            continue
        try:
            check_params(template, candidate.params, complete=False)
        except BadParams as exc:
            return f"candidate {i} {exc}"
    return None
