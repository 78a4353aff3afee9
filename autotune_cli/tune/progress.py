"""A tune's results as they come (TuneProgress): each told to the listener, and a partial
entry saved soon after each, so that an interrupted tune resumes where it stopped; and what
a resumed tune keeps of a stored entry (known_results). The tuner (tuner.py) makes one
TuneProgress per problem it measures.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import replace
from typing import Callable

from ..candidates.choices import ChoiceSet
from ..store import CacheStore
from ..store.entry import Entry
from ..store.phases import PhaseClock
from ..problem import GemmProblem
from ..search.pick import pick_winner
from ..store.results import SKIPPED, Candidate
from ..settings import MeasurePolicy


def known_results(stored: Entry | None, force: bool = False) -> dict[tuple, Candidate]:
    """Results already measured under this fingerprint that need not be measured again:
    everything measured by an interrupted (partial) run (never what it skipped: that includes
    a failure of the environment and a screening result, both to be measured again); from a
    finished run without a winner, only its deterministic failures (compile errors, wrong
    results); from a run --budget cut short, its finished results too (those it skipped are
    measured). `force` (--force) keeps nothing: everything is measured again."""
    if stored is None or force:
        return {}
    keep = ("compile_error", "wrong_result")
    known = {}
    for candidate in stored.candidates:
        if candidate.status in keep or ((stored.partial or stored.cut_short) and candidate.status != SKIPPED):
            known[candidate.identity] = candidate
    return known


def screened(candidate: Candidate) -> Candidate:
    """A screening result as it is kept: measured in a few runs, so it may rank a field but
    never win; it is stored as skipped (and measured again by a resumed tune)."""
    if not candidate.ok:
        return candidate
    return replace(candidate, status=SKIPPED,
                   error=f"screened at {candidate.ms:.4f} ms in {candidate.runs} run(s); not timed fully")


class TuneProgress:
    """Collects results as they come, tells the listener, and saves a partial entry soon
    after each result, so that an interrupted run (kill -9 included) resumes where it
    stopped: from a timer thread, at once when the last save is SAVE_INTERVAL_S old or
    older, else at that point. The interval grows to SAVE_COST_FACTOR times what a save takes, so that
    saving a large entry costs a bounded share of the tune. A partial entry holds the
    results that a resumed tune keeps (none that were skipped)."""

    SAVE_INTERVAL_S = 0.5
    SAVE_COST_FACTOR = 4.0

    def __init__(self, listener, cache: CacheStore, measure: MeasurePolicy,
                 make_entry: Callable[[list[Candidate]], Entry], problem: GemmProblem, key: str,
                 choice_set: ChoiceSet, reused: list[Candidate], started: float,
                 clock: PhaseClock | None = None, store: Callable[[Entry], Entry | None] | None = None) -> None:
        """`listener`: the tuner's TuneListener; `cache`: where partial entries go (put);
        `make_entry(kept)`: the entry of these results (the tuner's, so that a partial entry
        has a finished one's shape); `store(entry)`: how one is written in place of a plain
        put (it may keep what is stored: then None)."""
        self.listener = listener
        self.cache = cache
        self.measure = measure
        self.make_entry = make_entry
        self.store = store or (lambda entry: (cache.put(key, entry), entry)[1])
        self.held_back = False  # a partial entry was not written: a finished one is stored there
        self.clock = clock or PhaseClock()
        self.at_first_result: Callable[[], None] | None = None  # called once, at the first result
        self.problem = problem
        self.key = key
        self.choice_set = choice_set
        self.started = started
        self.latest: dict[tuple, Candidate] = {c.identity: c for c in reused}
        self.valid: dict[tuple, Candidate] = {k: c for k, c in self.latest.items() if c.ok}  # for the display
        self.done = 0
        self.reported: set[tuple] = set()
        self.timeline: list[tuple[str, str, float]] = []  # (candidate, round, seconds since start)
        self.last_save = -math.inf
        self.interval = self.SAVE_INTERVAL_S
        self.saved = 0  # results in the last partial entry written
        self._lock = threading.RLock()  # the results
        self._save_lock = threading.RLock()  # one save at a time, in the order of their snapshots
        self._dirty = False
        self._timer: threading.Timer | None = None
        self._closed = False
        self._error: BaseException | None = None  # a save from the timer failed: raised here next

    def report(self, candidate: Candidate) -> None:
        self.reported.add(candidate.identity)
        self.done += 1
        best = pick_winner(list(self.valid.values()), self.measure)
        total = max(len(self.choice_set.choices), self.done)
        self.listener.candidate_done(self.problem, candidate, self.done, total, best)

    def on_result(self, choice, candidate: Candidate, round_name: str) -> None:
        if self.at_first_result is not None:
            call, self.at_first_result = self.at_first_result, None
            call()
        ident = candidate.identity
        if candidate.status != SKIPPED:
            self.timeline.append((candidate.label(), round_name, round(time.perf_counter() - self.started, 3)))
        with self._lock:
            if round_name == "screen" or ident not in self.latest or candidate.ok:
                self.latest[ident] = screened(candidate) if round_name == "screen" else candidate
                self._dirty = True
            if candidate.ok:
                self.valid[ident] = candidate
            elif round_name == "screen":
                self.valid.pop(ident, None)
        if ident not in self.reported:
            self.report(candidate)
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        self._schedule()

    def _schedule(self) -> None:
        """Make sure a timer thread saves within the interval (at once when the last save is
        that old): never on the tune's own thread, whose loop feeds the timing worker (a save
        grows with the cache, problem by problem: bench/README.md, "Cold tuning")."""
        wait = max(0.0, self.last_save + self.interval - time.monotonic())
        with self._lock:
            if self._timer is None and not self._closed:
                self._timer = threading.Timer(wait, self._timed_save)
                self._timer.daemon = True
                self._timer.start()

    def _timed_save(self) -> None:
        with self._lock:
            self._timer = None
        try:
            self.save()
        except Exception as exc:  # noqa: BLE001 - the tune's own thread raises it
            self._error = exc

    def save(self) -> int:
        """Write the partial entry if anything changed since the last; returns how many
        results the stored partial entry holds."""
        with self._save_lock:
            with self._lock:
                if self._closed or not self._dirty or self.held_back:
                    return self.saved
                kept = [c for c in self.latest.values() if c.status != SKIPPED]
                self._dirty = False
                if not kept:  # an entry of no results would only stand where nothing was tuned
                    return self.saved
            began = time.monotonic()
            entry = replace(self.make_entry(kept), winner=None, partial=True)
            try:
                written = self.store(entry)
            except BaseException:
                self._dirty = True
                raise
            if written is None:
                self.held_back = True
                return self.saved
            self.saved = len(kept)
            self.last_save = time.monotonic()
            self.clock.add("partial_save", self.last_save - began)
            self.interval = max(self.SAVE_INTERVAL_S, self.SAVE_COST_FACTOR * (self.last_save - began))
            return self.saved

    def close(self) -> None:
        """No partial save after this (the finished entry is written next)."""
        with self._lock:
            self._closed = True
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        with self._save_lock:  # a save under way finishes before the finished entry is written
            pass
