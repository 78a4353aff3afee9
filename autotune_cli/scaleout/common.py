"""What the local and the Ray scale-out share: the in-memory cache an actor tunes into, the
listener that serializes several devices' events, one problem's result, the retry bound
and `--gpus`."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ..store import CacheStore
from ..store.entry import Entry
from ..errors import UserError
from ..problem import GemmProblem
from ..tune.tuner import TuneListener, TuneOutcome

MAX_ATTEMPTS = 3


class MemoryCache(CacheStore):
    """A CacheStore held in memory: a Ray actor tunes into one and hands the entry to the
    driver, which alone writes the file."""

    def __init__(self, entries: dict[str, Entry] | None = None) -> None:
        self.entries: dict[str, Entry] = dict(entries or {})
        self.notices: list[str] = []

    def load(self) -> dict[str, Entry]:
        return dict(self.entries)

    def get(self, key: str) -> Entry | None:
        return self.entries.get(key)

    def put(self, key: str, entry: Entry) -> None:
        self.entries[key] = entry

    def put_with(self, key: str, make) -> Entry | None:
        entry = make(self.entries.get(key))
        if entry is not None:
            self.put(key, entry)
        return entry


class LockedListener(TuneListener):
    """Serializes a listener's events: several devices report at once."""

    def __init__(self, inner: TuneListener) -> None:
        self.inner = inner
        self.lock = threading.Lock()

    def _call(self, name: str, *args) -> None:
        method = getattr(self.inner, name, None)
        if method is not None:
            with self.lock:
                method(*args)

    def notice(self, message): self._call("notice", message)
    def cache_hit(self, problem, entry): self._call("cache_hit", problem, entry)
    def planned(self, problem, choices): self._call("planned", problem, choices)
    def candidate_done(self, problem, candidate, done, total, best):
        self._call("candidate_done", problem, candidate, done, total, best)
    def finished(self, outcome): self._call("finished", outcome)


@dataclass
class ProblemResult:
    """One problem's end: its outcome, or why there is none, and where it was measured."""

    index: int
    problem: GemmProblem
    outcome: TuneOutcome | None = None
    slot: int | None = None  # the device (or actor) that produced the outcome
    device: str | None = None  # that device's name
    host: str | None = None
    attempts: int = 0
    error: str | None = None
    span: tuple[float, float] | None = None  # perf_counter at the start and end of its last attempt

    @property
    def ok(self) -> bool:
        return self.outcome is not None


def parse_gpus(text: str | int | None) -> int:
    """`--gpus N|all`: a count from 1 to MAX_WORKERS (each device is a tuner with its own
    worker processes: more is a typo, not a machine), or 0 for all."""
    from ..settings import MAX_WORKERS

    if text is None:
        return 1
    value = str(text).strip().lower()
    if value == "all":
        return 0
    try:
        count = int(value) if len(value) <= 20 else 0
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_WORKERS:
        raise UserError(f"--gpus takes a positive count or 'all' (at most {MAX_WORKERS}), "
                        f"got {value[:40]!r}")
    return count
