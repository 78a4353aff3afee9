"""Finding this machine's cached entry for a problem, for the Python API.

The fingerprint that selects an entry is the tuner's own (hits.fingerprint_for, on the
device the operands are on, as probe_device reads it): its digest, the machine's, makes the
key, and the templates the entry was tuned with must be registered here with the source they
had then; so an entry from another machine, or one whose template source has changed since,
is never used. Nothing here starts a worker or builds a Tuner; torch is not imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..store.cache import Cache, CacheUnavailable
from ..store.entry import Entry, key_for
from ..errors import UserError, warn_caller
from ..problem import GemmProblem


NOTHING_CACHED = "nothing cached for it on this machine"
STALE = "its cached entry"  # the start of every reason an entry of this machine is not used


class AutotuneFallbackWarning(UserWarning):
    """A call ran torch's own op because no cached winner applies."""


class WinnerLookup:
    """Reads one cache folder (`cache_dir()`, asked at each read) and answers which entry
    serves a problem here; remembers the file's entries until it changes."""

    def __init__(self, cache_dir: Callable[[], Path]) -> None:
        self._cache_dir = cache_dir
        self._devices: dict[tuple[str, int], object] = {}  # (device type, index) -> DeviceInfo
        self._entries: tuple[tuple, dict[str, Entry]] | None = None
        # problem key -> [(key, entry)] of the entries read: a model's thousands of problems
        # are each found without a pass over every entry
        self._by_problem: dict[str, list[tuple[str, Entry]]] = {}
        # (key, winner identity) -> why that winner is not built ("" if it is fine)
        self._refused: dict[tuple, str] = {}
        self._unreadable_told: set[str] = set()  # cache files said to be unreadable

    def reset(self) -> None:
        self._unreadable_told.clear()
        self._devices.clear()
        self._entries = None
        self._by_problem = {}
        self._refused.clear()

    def entries(self) -> dict[str, Entry]:
        """The cache's entries, read again only when the file changed; none, with a warning
        (once), where the cache cannot be read at all (a file where its folder should be, a
        permission): the calls then run torch's ops, as with nothing cached."""
        cache = Cache(self._cache_dir())
        try:
            stat = cache.path.stat()
            stamp = (str(cache.path), stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            return self._unreadable(cache, CacheUnavailable(f"cannot read the cache at {cache.path}: "
                                                            f"{exc.strerror or exc}"))
        if self._entries is not None and self._entries[0] == stamp:
            return self._entries[1]
        try:
            entries = cache.load()
        except CacheUnavailable as exc:
            return self._unreadable(cache, exc)
        for notice in cache.notices:
            warn_caller(f"autotune: {notice}", AutotuneFallbackWarning)
        self._entries = (stamp, entries)
        self._by_problem = {}
        for key, entry in entries.items():  # each agrees with its key (cache_document)
            self._by_problem.setdefault(entry.problem.key(), []).append((key, entry))
        self._refused = {}
        return entries

    def _unreadable(self, cache: Cache, exc: Exception) -> dict[str, Entry]:
        if str(cache.path) not in self._unreadable_told:
            self._unreadable_told.add(str(cache.path))
            warn_caller(f"autotune: {exc}; calls run torch's ops", AutotuneFallbackWarning)
        return {}

    def fingerprint(self, problem: GemmProblem, templates: tuple[str, ...] | None, index: int = 0):
        """The Fingerprint a tune of `problem` with `templates` (uids or backends; None: all)
        makes on GPU `index` here: its digest is the key's, its templates what it considers.
        Each device is probed once: a host with two GPU models has a key for each."""
        from ..hardware.device import probe_device
        from ..tune.hits import fingerprint_for

        slot = (problem.device, index if problem.device == "cuda" else 0)
        device = self._devices.get(slot)
        if device is None:
            device = self._devices[slot] = probe_device(problem.device, index=slot[1])
        return fingerprint_for(problem, device, templates)

    def find(self, problem: GemmProblem, templates: str | tuple[str, ...] | None = None, index: int = 0
             ) -> tuple[str, Entry] | None:
        """(key, entry) of the cached result for `problem` on this machine's GPU `index` (the
        operands' device), or None.

        `templates`: the entry as a tune with this selection (as `--templates`) would have
        made it (selections.answer), if it can say. Otherwise the entry of this machine for the
        problem, if every template it was tuned with is registered here with the source it
        had then, and its winner is registered here.
        """
        from ..tune.selections import answer

        if problem.device == "cuda":
            from ..hardware.device import cuda_available

            if not cuda_available():
                return None  # no GPU here: no GPU winner can be this machine's
        entries = self.entries()
        if templates is not None:
            only = tuple(t.strip() for t in templates.split(",")) if isinstance(templates, str) else tuple(templates)
            wanted = self.fingerprint(problem, only, index)
            key = key_for(problem, wanted.digest())
            entry = entries.get(key)
            view = None if entry is None else answer(entry, wanted.template_hashes)
            return (key, view) if view is not None and self._usable(key, view) else None
        best: tuple[str, Entry] | None = None
        for key, entry, why in self._examined(problem, index):
            if not why and (best is None or entry.winner.ms < best[1].winner.ms):
                best = (key, entry)
        return best

    def miss_reason(self, problem: GemmProblem, index: int = 0) -> str:
        """Why `find` (every template) has no entry for `problem`: what this machine's entry
        for it lacks (a template changed since, one not registered here, no winner), or that
        there is none. The first words say which (routing/report.py sorts by them)."""
        for _, _, why in self._examined(problem, index):
            if why:
                return why
        return NOTHING_CACHED

    def _examined(self, problem: GemmProblem, index: int):
        """(key, entry as this process sees it, why it is not used or "") for each entry of
        `problem` read from the cache that was made on this machine (GPU `index`): an entry
        of another machine is none of this one's business. An entry may hold results of
        templates not registered here (a plugin's, a tune with --plugin): it is seen as a
        tune of the registered ones alone would have made it (selections.selection_view)."""
        from ..tune.selections import judged_hashes, selection_view, unserved_reason

        entries = self._by_problem.get(problem.key(), ())
        if not entries:
            return
        here = key_for(problem, self.fingerprint(problem, None, index).digest())  # the machine alone
        for key, entry in entries:
            if key != here:
                continue
            if entry.winner is None:
                yield key, entry, f"{STALE} {unserved_reason(entry, {})}"
                continue
            judged = judged_hashes(entry)  # the registered templates it records, their sources here
            known = {uid: entry.templates[uid] for uid in judged}
            why = unserved_reason(entry, judged)
            if why:
                yield key, entry, f"{STALE} {why}"
                continue
            view = selection_view(entry, known)
            if view.winner is None:
                yield key, entry, f"{STALE} {_unjudged(entry, known)}"
                continue
            if not self._usable(key, view):  # its params are refused (warned about once)
                yield key, view, f"{STALE} is refused: {self._refused[(key, view.winner.identity)]}"
                continue
            yield key, view, ""

    def _usable(self, key: str, entry: Entry) -> bool:
        """A winner whose template is registered here (a plugin's must be imported first)
        and whose params are what that template declares and derives: anyone who can write
        the cache file could otherwise put code in a kernel's source. A refused entry is a
        miss, warned about once per read of the file."""
        from ..templates import get_template
        from ..templates.params import winner_problem

        winner = entry.winner
        if winner is None:
            return False
        try:
            get_template(winner.uid)
        except UserError:
            return False
        memo = (key, winner.identity)  # a selection's answer (selections.answer) may have its own winner
        why = self._refused.get(memo)
        if why is None:
            why = self._refused[memo] = winner_problem(entry) or ""
            if why:
                from ..text import printable

                warn_caller(printable(f"autotune: cache entry {key} is not used: {why}"), AutotuneFallbackWarning)
        return not why


def _unjudged(entry: Entry, known: dict) -> str:
    """Why no winner of `entry` can be judged here (`known`: the templates it records that
    are registered here), worded to follow STALE: say what is missing, the fingerprint's
    record of the winner's template (its source then, to check against this one's) or the
    template itself here."""
    from ..templates import registered_template

    if not entry.templates:
        return "records no templates in its fingerprint (fingerprint.templates): no source to check its winner by"
    if entry.winner.uid not in entry.templates:
        return (f"does not record its winner's template {entry.winner.uid} in its fingerprint "
                "(fingerprint.templates): no source to check it by")
    unregistered = sorted(uid for uid in entry.templates if registered_template(uid) is None)
    if unregistered:
        return f"names {', '.join(unregistered)}, not registered here (a plugin not loaded?)"
    return f"records no result of {', '.join(sorted(known))} that passed"
