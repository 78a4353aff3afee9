"""Heuristics registry: which configs to try for a (template uid, device type, op).

A heuristic is a class registered with `@register_heuristic(uid, device_type, op)`; either
of device_type and op may be None, meaning "any". Lookup goes from most to least specific:
(uid, dev, op) -> (uid, None, op) -> (uid, dev, None) -> (uid, None, None) -> a base
heuristic that yields nothing.
"""

from __future__ import annotations

from typing import Any, Iterator, NamedTuple

from ..problem import GemmProblem


class HeuristicKey(NamedTuple):
    uid: str
    device_type: str | None
    op: str | None


def heuristic_key(uid: str, device_type: str | None, op: str | None) -> HeuristicKey:
    """The one place a key is built, for registration and lookup alike."""
    return HeuristicKey(uid, device_type, op)


class Heuristic:
    """Yields config dicts for a problem. Subclasses override `_impl` (and `should_run`)."""

    def should_run(self, problem: GemmProblem, search: str) -> bool:
        return True

    def get_configs(
        self, problem: GemmProblem, search: str = "default", space: list[dict] | None = None
    ) -> Iterator[dict[str, Any]]:
        if not self.should_run(problem, search):
            return
        yield from self._impl(problem, search, space)

    def _impl(
        self, problem: GemmProblem, search: str, space: list[dict] | None
    ) -> Iterator[dict[str, Any]]:
        return iter(())


_HEURISTICS: dict[HeuristicKey, type[Heuristic]] = {}


def register_heuristic(uid: str, device_type: str | None = None, op: str | None = None):
    key = heuristic_key(uid, device_type, op)

    def decorate(cls: type[Heuristic]) -> type[Heuristic]:
        if key in _HEURISTICS:
            raise ValueError(f"a heuristic is already registered for {key}")
        _HEURISTICS[key] = cls
        return cls

    return decorate


def unregister_heuristic(uid: str, device_type: str | None = None, op: str | None = None) -> None:
    _HEURISTICS.pop(heuristic_key(uid, device_type, op), None)


def lookup_heuristic(uid: str, device_type: str, op: str) -> Heuristic:
    for key in (
        heuristic_key(uid, device_type, op),
        heuristic_key(uid, None, op),
        heuristic_key(uid, device_type, None),
        heuristic_key(uid, None, None),
    ):
        if key in _HEURISTICS:
            return _HEURISTICS[key]()
    return Heuristic()
