"""A problem's cache lookup: its fingerprint on a device, its key, the entry stored there.

The tuner looks up through this module, and so does a command before it starts anything:
this module imports neither torch nor triton nor the tuning machinery (executor, choices,
search), so that a cached problem is answered for the cost of reading the cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Mapping

from ..store import CacheStore
from ..store.cache import Cache
from ..store.entry import Entry, Winner, key_for
from ..store.fingerprint import Fingerprint
from ..hardware.device import DeviceInfo, probe_device
from ..plugins import load_plugins
from ..problem import GemmProblem
from ..settings import TuneSettings
from ..templates import templates_for
from .selections import answer, cut_short_in


@dataclass(frozen=True)
class TuneOutcome:
    problem: GemmProblem
    key: str
    entry: Entry
    from_cache: bool

    @property
    def winner(self) -> Winner | None:
        return self.entry.winner


def fingerprint_for(problem: GemmProblem, device: DeviceInfo,
                    only: tuple[str, ...] | None = None) -> Fingerprint:
    """The machine plus the source hash of every template that serves the problem (of those
    in `only`, when given). The machine makes the key; the templates are what a tune
    considers, recorded in its entry and held against a stored one (`answer`)."""
    templates = {t.uid: t.source_hash() for t in templates_for(problem, only)}
    return Fingerprint.of(device, templates)


def reusable(entry: Entry, wanted: Mapping[str, str]) -> bool:
    """Whether a tune of `wanted` may keep `entry`'s results (an interrupted run's, known
    failures): no template the two share has changed its source since."""
    recorded = entry.templates
    return all(recorded.get(uid, digest) == digest for uid, digest in wanted.items())


@dataclass(frozen=True)
class Lookup:
    problem: GemmProblem
    fingerprint: Fingerprint
    key: str
    # what is stored under the key (a winner, a failure, a partial run) unless a template
    # it shares with this tune has changed since: its results are not reused then
    stored: Entry | None
    refused: str = ""  # why what is stored there is not used (see look_up), if it is not
    budgeted: bool = False  # this tune has a --budget: an entry one cut short answers it
    exhaustive: bool = False  # --search exhaustive: an entry of the default search does not answer it
    own_space: bool = False  # --space: the tuner holds the entry against the configs listed

    @cached_property  # read by the tuner, `cached` and `hit_note`: the answer and its pick once
    def hit(self) -> TuneOutcome | None:
        """The outcome to answer with. An entry without a winner (all failed, or an
        interrupted run), or not tuned with every template of this selection as it is now
        (`answer`), is no hit: it is tuned again (resumed) and replaced."""
        view = None if self.stored is None else answer(self.stored, self.fingerprint.template_hashes)
        if view is None or (not self.budgeted and cut_short_in(view)):
            return None  # a tune --budget cut short is resumed by one without
        if self.exhaustive and (view.search != "exhaustive" or view.space):
            return None  # asked to search wider than the stored tune did
        return TuneOutcome(self.problem, self.key, view, from_cache=True)

    @property
    def hit_note(self) -> str:
        """What a hit must say of itself ("" where nothing): a winner of a user's --space
        answers a default lookup, but as what it is, the best of the configs listed there."""
        hit = self.hit
        if hit is None or not hit.entry.space or self.own_space:
            return ""
        from ..templates import registered_template
        from ..text import printable

        if not any((t := registered_template(uid)) is not None and t.takes_configs
                   for uid in self.fingerprint.template_hashes):
            return ""  # no template selected takes configs: a space changed nothing it asks

        return printable(f"the cached winner of {self.problem.describe()} is the best of the configs "
                         f"{hit.entry.space} lists (--space); --force tunes the default search")


def look_up(cache: CacheStore, problem: GemmProblem, device: DeviceInfo,
            only: tuple[str, ...] | None = None, budgeted: bool = False, exhaustive: bool = False,
            own_space: bool = False) -> Lookup:
    """`cache`: the cache file, or a Ray actor's entries. An entry whose
    params are not what its templates declare (templates/params.py: anyone who can write the
    file could have put it there) is not used, neither as a hit nor to resume from: the
    problem is tuned again, and `refused` says why (the tuner tells its listener)."""
    from ..templates.params import entry_problem
    from ..text import printable

    fingerprint = fingerprint_for(problem, device, only)
    key = key_for(problem, fingerprint.digest())
    stored = cache.get(key)
    why = entry_problem(stored) if stored is not None else None
    if why:
        return Lookup(problem, fingerprint, key, None,
                      refused=printable(f"cache entry {key} is not used: {why}; tuning it again"))
    if stored is not None and not reusable(stored, fingerprint.template_hashes):
        stored = None  # a template changed since: nothing of it stands, it is tuned afresh
    return Lookup(problem, fingerprint, key, stored, budgeted=budgeted, exhaustive=exhaustive,
                  own_space=own_space)


def cached(settings: TuneSettings, problem: GemmProblem, listener=None) -> TuneOutcome | None:
    """The cached outcome of `problem` under these settings, told to `listener` (a
    TuneListener) as a hit, or None when it must be tuned (nothing usable stored, or
    `settings.force`). Nothing is started: a command asks this before any worker."""
    if settings.force:
        return None
    load_plugins(settings.plugins)
    cache = Cache(settings.cache_dir)
    # On a GPU, the driver's answers as remembered beside the cache: no cuInit (gpu_memo.py).
    device = probe_device(settings.device, remembered_in=settings.cache_dir)
    found = look_up(cache, problem, device, settings.templates, **lookup_terms(settings))
    if found.hit is None:
        refuse_newer(cache)
    if listener is not None:
        while cache.notices:
            listener.notice(cache.notices.pop(0))
    outcome = found.hit
    if outcome is not None and listener is not None:
        if found.hit_note:
            listener.notice(found.hit_note)
        listener.cache_hit(problem, outcome.entry)
        listener.finished(outcome)
    return outcome


def to_tune(cache, problem, device, settings) -> bool:
    """Whether a tune of `problem` will run (and write the cache): --force, or no entry
    answers it. NewerCache where the file is a newer autotune's (`refuse_newer`)."""
    tune = settings.force or look_up(cache, problem, device, settings.templates,
                                     **lookup_terms(settings)).hit is None
    if tune:
        refuse_newer(cache)
    return tune


def refuse_newer(cache: CacheStore) -> None:
    """NewerCache where a tune is to follow and `cache` is a newer autotune's file (read as
    empty): it would refuse the winner, so the tune is refused now, in one line, before any
    work (its reader's note, not told, would only say it again)."""
    if isinstance(cache, Cache) and cache.newer_schema is not None:
        cache.check_writable()


def any_to_tune(cache, problems, device, settings) -> bool:
    """Whether a tune of any of `problems` will run (`to_tune`)."""
    return any(to_tune(cache, problem, device, settings) for problem in problems)


def lookup_terms(settings: TuneSettings) -> dict[str, bool]:
    """What of a tune's settings decides whether a stored entry answers it (`look_up`)."""
    return {"budgeted": bool(settings.budget_s), "exhaustive": settings.search == "exhaustive",
            "own_space": bool(settings.space_file)}
