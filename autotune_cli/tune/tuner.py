"""The tuner: cache lookup -> choices -> benchmark -> pick -> store.

It emits events to a listener (report.py draws them) and never prints.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from ..version import __version__
from ..runner import Executor
from ..runner.executor import LocalExecutor
from ..store import CacheStore
from ..store.cache import Cache
from ..candidates.choices import ChoiceSet, KernelTemplateChoice, check_interpretable, get_choices
from ..store.entry import Entry, Winner
from ..errors import Interrupted, Terminated, UserError
from ..store.fingerprint import Fingerprint
from ..hardware.device import DeviceInfo, probe_device
from .hits import TuneOutcome, fingerprint_for, look_up, lookup_terms, refuse_newer  # noqa: F401  (TuneOutcome: re-exported)
from .selections import selection_view, stored_after, template_hashes
from ..store.phases import PhaseClock, TuneRecord
from ..plugins import load_plugins
from ..problem import GemmProblem
from .progress import TuneProgress, known_results
from ..search.pick import pick_winner
from ..store.results import Candidate, params_str
from ..search import SearchContext, get_strategy
from ..settings import TuneSettings, check_writable_folder
from ..text import printable


class TuneListener:
    """Receives the tuner's events. Every method is optional."""

    def notice(self, message: str) -> None: ...

    def cache_hit(self, problem: GemmProblem, entry: Entry) -> None: ...

    def planned(self, problem: GemmProblem, choices: ChoiceSet) -> None: ...

    def candidate_done(self, problem: GemmProblem, candidate: Candidate, done: int, total: int,
                       best: Candidate | None) -> None: ...

    def finished(self, outcome: "TuneOutcome") -> None: ...


def check_fits(problem: GemmProblem, device: DeviceInfo) -> None:
    """Refuse, before any allocation, a problem whose tensors cannot fit on the device
    (`does_not_fit` says why)."""
    why = does_not_fit(problem, device)
    if why:
        raise UserError(why)


def does_not_fit(problem: GemmProblem, device: DeviceInfo) -> str | None:
    """Why a problem's tensors cannot fit on the device, or None where they do: operands and
    output, the float64 reference of the output, and beside it the float64 operands that
    make it or the arrays the check works in, whichever is larger."""
    from ..runner.verify import CHECK_WORKING_ARRAYS

    operand_elems = problem.b * (problem.m * problem.k + problem.k * problem.n)
    out_elems = problem.b * problem.m * problem.n
    need = problem.min_bytes + 8 * out_elems + 8 * max(operand_elems, CHECK_WORKING_ARRAYS * out_elems)
    if device.device_type == "cuda":
        limit = int(device.total_memory * 0.9)
        where = f"{device.name} ({device.total_memory / 2**30:.0f} GiB)"
    else:
        try:
            limit = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.8)
        except (ValueError, OSError, AttributeError):
            return None
        where = f"this machine's memory ({limit / 0.8 / 2**30:.0f} GiB)"
    if need > limit:
        return (f"{problem.describe()} needs ~{need / 2**30:.1f} GiB to benchmark and "
                f"verify; it does not fit in {where}")
    return None


def _seconds(call: Callable, *args) -> float:
    """How long `call(*args)` took (what it returns is dropped)."""
    began = time.perf_counter()
    call(*args)
    return time.perf_counter() - began


class Tuner:
    """Tunes problems one after another, sharing one executor and one cache."""

    def __init__(self, settings: TuneSettings, listener: TuneListener | None = None,
                 executor_factory: Callable[[DeviceInfo, TuneSettings], Executor] | None = None,
                 device: DeviceInfo | None = None, cache: CacheStore | None = None) -> None:
        """`device`: tune on this device (one GPU of several) instead of probing GPU 0.
        `cache`: another CacheStore in place of the cache file (a Ray actor keeps its
        entries in memory and hands them to the driver, which alone writes)."""
        load_plugins(settings.plugins)
        self.settings = settings
        self.listener = listener or TuneListener()
        self.cache: CacheStore = cache if cache is not None else Cache(settings.cache_dir)
        # the cache file is written: its folder must take a file before workers start
        self._check_folder = cache is None
        self.executor_factory = executor_factory or LocalExecutor
        self._device: DeviceInfo | None = device
        self._executor: Executor | None = None
        self._forced: dict[GemmProblem, TuneOutcome] = {}  # under --force, each problem's first outcome

    @property
    def device(self) -> DeviceInfo:
        if self._device is None:
            self._device = probe_device(self.settings.device)
        return self._device

    def fingerprint(self, problem: GemmProblem) -> Fingerprint:
        return fingerprint_for(problem, self.device, self.settings.templates)

    def _emit_notices(self) -> None:
        while self.cache.notices:
            self.listener.notice(self.cache.notices.pop(0))

    def prefetch(self, problems: list[GemmProblem]) -> int:
        """Ask the executor to compile, once nothing else waits, the kernels of problems to
        be tuned after the one in progress (a list's next ones): the compile pool would
        otherwise idle while a problem is timed. Cached problems are left out; returns how
        many kernels were asked for (0 where the executor has no compile pool)."""
        if not self.executor.compiles_ahead():
            return 0  # nothing compiles ahead of the timing (the interpreter, another executor)
        asked = 0
        for problem in problems:
            found = look_up(self.cache, problem, self.device, self.settings.templates,
                            **lookup_terms(self.settings))
            if found.hit is not None and not self.settings.force:
                continue
            try:
                check_fits(problem, self.device)
                choice_set = get_choices(problem, self.device, self.settings)
            except UserError:  # said when the problem's own tune comes
                continue
            asked += self.executor.prefetch(choice_set.choices)
        return asked

    def tune(self, problem: GemmProblem, upcoming: tuple[GemmProblem, ...] = ()) -> TuneOutcome:
        """Tune `problem` (a cache hit answers at once), once in this tuner's life: a problem
        met again (listed twice: a call, and a group's one GEMM) is answered by the cache, or
        under --force, which skips the cache, by its first outcome. `upcoming`: the problems
        to be tuned next, whose kernels the compile pool builds once this problem's are
        asked for (`prefetch`, at its first result)."""
        if not self.settings.force:
            return self._tune(problem, upcoming)
        done = self._forced.get(problem)
        if done is None:
            done = self._forced[problem] = self._tune(problem, upcoming)
        return done

    def _tune(self, problem: GemmProblem, upcoming: tuple[GemmProblem, ...]) -> TuneOutcome:
        if problem.device != self.settings.device:
            raise ValueError(f"problem is for {problem.device}, tuner for {self.settings.device}")
        clock = PhaseClock()  # where this tune's seconds go (phases.py)
        with clock.phase("lookup"):
            found = look_up(self.cache, problem, self.device, self.settings.templates,
                            **lookup_terms(self.settings))
        if found.hit is None or self.settings.force:
            refuse_newer(self.cache)  # a newer autotune's file would refuse the winner
        self._emit_notices()
        if found.refused:
            self.listener.notice(found.refused)
        fingerprint, key, stored, hit = found.fingerprint, found.key, found.stored, found.hit
        if (hit is not None and self.settings.space_file and not self.settings.force
                and not self._tuned_with_space(problem, hit.entry)):  # --force tunes them anyway: no word
            self.listener.notice(f"the cached entry of {problem.describe()} was tuned with other configs "
                                 f"than {self.settings.space_file} lists: tuning those")
            hit = None
        if hit is not None and not self.settings.force:
            if found.hit_note:
                self.listener.notice(found.hit_note)
            self.listener.cache_hit(problem, hit.entry)
            self.listener.finished(hit)
            return hit
        # --budget bounds the whole tune: the enumeration and pruning of configs too
        deadline = (time.monotonic() + self.settings.budget_s) if self.settings.budget_s else None
        check_fits(problem, self.device)
        strategy = get_strategy(self.settings.search)
        started = time.perf_counter()
        if self._check_folder:
            check_writable_folder(self.settings.cache_dir)
            self._check_folder = False
        with clock.phase("start"):  # processes import torch while we do the rest
            self.executor.start()
        with clock.phase("choices"):
            choice_set = get_choices(problem, self.device, self.settings, deadline=deadline)
        if choice_set.cut_short and not choice_set.choices:
            raise UserError(f"the tuning budget ({self.settings.budget_s:g} s) ran out before any config "
                            f"of {problem.describe()} was listed; raise --budget")
        check_interpretable(problem, choice_set, self.settings)
        if choice_set.cut_short:
            self.listener.notice(f"the tuning budget ran out while listing configs: "
                                 f"{choice_set.considered} considered")
        for uid, (left, listed) in choice_set.space_left_out.items():
            self.listener.notice(printable(
                f"{self.settings.space_file}: {'every' if left == listed else f'{left} of {listed}'} "
                f"{'config' if left == listed else 'configs'} listed under {uid} left out for "
                f"{problem.describe()} (a form it cannot take, or the same config as another once the "
                f"blocks fit it)"))
        if not choice_set.choices and not choice_set.pruned:
            if choice_set.space_left_out:
                raise UserError(f"no candidates for {problem.describe()}: none of the configs "
                                f"{self.settings.space_file} lists applies to it")
            raise UserError(f"no candidates for {problem.describe()}: no template selected offers a config "
                            f"for it; try --templates aten or other templates")
        if not choice_set.choices:
            raise UserError(f"no candidates left for {problem.describe()} after pruning "
                            f"({choice_set.pruned_counts()}); try --templates aten or other configs")
        known = known_results(stored, force=self.settings.force)
        todo = [c for c in choice_set.choices if c.identity not in known]
        reused = [known[c.identity] for c in choice_set.choices
                  if c.identity in known]
        # and the twins an interrupted tune timed (search/base.time_fixed_twins): not in the
        # choice set, but results of it all the same
        reused += [known[t.identity] for t in map(KernelTemplateChoice.fixed_twin, choice_set.choices)
                   if t is not None and t.identity in known]
        listed = {c.identity for c in choice_set.choices}
        cut = stored is not None and any(c.cut_by_budget and c.identity in listed
                                         for c in (stored.candidates if stored.cut_short else ()))
        if reused and stored is not None and (stored.partial or cut):
            what = "an interrupted tune" if stored.partial else "a tune --budget cut short"
            self.listener.notice(f"resuming {what} of {problem.describe()}: "
                                 f"{len(reused)} result(s) kept, {len(todo)} to measure")
        self.listener.planned(problem, choice_set)
        hashes = template_hashes(problem)

        if stored is not None and stored.partial and set(stored.templates) - set(fingerprint.template_hashes):
            self.listener.notice(printable(  # the entry holds one tune's resume: this tune's takes its place
                f"an interrupted tune of {problem.describe()} with {', '.join(sorted(stored.templates))} "
                f"will not be resumed: this tune's entry takes its place (that tune starts afresh)"))

        def store(entry: Entry) -> Entry | None:  # what a wider tune learned stays (selections.stored_after)
            return self.cache.put_with(key, lambda current: stored_after(entry, current, hashes))

        progress = TuneProgress(
            self.listener, self.cache, self.settings.measure,
            lambda kept: self._entry(problem, fingerprint, kept, choice_set, time.perf_counter() - started),
            problem, key, choice_set, reused, started, clock, store=store)
        if upcoming:  # after this problem's compiles are asked for: at its first result
            progress.at_first_result = lambda: clock.add("prefetch", _seconds(self.prefetch, list(upcoming)))
        for candidate in reused:
            progress.report(candidate)
        candidates = list(reused)
        try:
            if todo:
                measure = self.settings.measure.for_problem(problem, self.device.device_type)
                ctx = SearchContext(problem=problem, device=self.device, choices=todo,
                                    executor=self.executor, measure=measure, deadline=deadline,
                                    on_result=progress.on_result, clock=clock)
                candidates += strategy.search(ctx)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (errors.Terminated)
            raise self._interrupted(problem, progress, exc) from None
        except BaseException:  # the tune failed: what finished is kept for the next one
            try:
                progress.save()
            except Exception:  # noqa: BLE001 - the failure is what the caller hears of
                pass
            progress.close()
            raise
        progress.close()
        seconds = time.perf_counter() - started
        stats = self.executor.take_stats(started)
        record = TuneRecord.of(clock, started, (c.phases for c in candidates), resumed=len(reused),
                               timeline=progress.timeline, compiles=stats.compiles,
                               compile_pool=stats.compile_pool, startups=stats.startups)
        entry = self._entry(problem, fingerprint, candidates, choice_set, seconds, record)
        with clock.phase("save"):
            written = store(entry)
        if written is None:  # no winner: the one served stays (selections.stored_after)
            kept = self.cache.get(key)
            if kept is not None and kept.winner is not None:
                label = f"{kept.winner.uid} {params_str(kept.winner.params)}".strip()
                self.listener.notice(printable(
                    f"no candidate of this tune of {problem.describe()} won; the cache keeps the winner it "
                    f"serves, {label} ({kept.winner.ms:.4f} ms), and not this tune's results"))
        else:
            entry = written
        # what this tune's selection picked (the stored entry may hold a wider tune's results
        # too); the finished entry's own save is known only once it is written: the
        # outcome's copy has it, the stored one stops at the search
        view = replace(selection_view(entry, fingerprint.template_hashes), phases=clock.with_total())
        if entry.winner is not None and view.winner is not None and entry.winner.identity != view.winner.identity:
            self.listener.notice(printable(
                f"the cache keeps {' '.join(filter(None, (entry.winner.uid, params_str(entry.winner.params))))} "
                f"({entry.winner.ms:.4f} ms) as the winner of {problem.describe()}: an earlier tune's, of "
                f"templates not selected here"))
        self._emit_notices()
        outcome = TuneOutcome(problem, key, view, from_cache=False)
        self.listener.finished(outcome)
        return outcome

    def _tuned_with_space(self, problem: GemmProblem, entry: Entry) -> bool:
        """Whether `entry` measured exactly the configs --space lists for `problem` (after
        pruning): an entry tuned over another space answers another question."""
        listed = get_choices(problem, self.device, self.settings).choices
        twins = {t.identity for t in map(KernelTemplateChoice.fixed_twin, listed) if t is not None}
        return {c.identity for c in listed} == {c.identity for c in entry.candidates} - twins

    @staticmethod
    def _interrupted(problem: GemmProblem, progress: TuneProgress, exc: KeyboardInterrupt) -> Interrupted:
        """Save what has finished, then say so: what to raise for a tune stopped by a signal."""
        terminated = isinstance(exc, Terminated)
        name, code = ("SIGTERM", 143) if terminated else ("SIGINT", 130)
        try:
            saved = progress.save()
        except Exception as error:  # noqa: BLE001 - the interruption is still what is reported
            progress.close()
            return Interrupted(f"interrupted ({name}); the finished results of {problem.describe()} "
                               f"could not be saved: {error}", code)
        progress.close()
        if progress.held_back:
            return Interrupted(f"interrupted ({name}); the cached entry of {problem.describe()} is kept as it "
                               f"was (its winner still serves), this tune's results are not saved", code)
        if not saved:
            return Interrupted(f"interrupted ({name}) before any result of {problem.describe()} "
                               f"finished; nothing saved", code)
        return Interrupted(f"interrupted ({name}): {saved} finished result(s) of {problem.describe()} "
                           f"saved; run the same command again to resume", code)

    @property
    def executor(self) -> Executor:
        if self._executor is None:
            self._executor = self.executor_factory(self.device, self.settings)
        return self._executor

    @property
    def started_executor(self) -> Executor | None:
        """The executor if this tuner has made one (None: it has not needed one yet)."""
        return self._executor

    def _entry(self, problem: GemmProblem, fingerprint: Fingerprint, candidates: list[Candidate],
               choice_set: ChoiceSet, seconds: float, record: TuneRecord | None = None) -> Entry:
        """The entry of these results; `record`: what the finished tune recorded about itself
        (a partial entry has none)."""
        winner = pick_winner(candidates, self.settings.measure)
        ordered = sorted(candidates, key=lambda c: (not c.ok, c.ms if c.ms is not None else 0.0))
        return Entry(
            problem=problem,
            fingerprint=fingerprint.to_dict(),
            fingerprint_digest=fingerprint.digest(),
            machine=fingerprint.machine_digest(),
            winner=None if winner is None else Winner.of(winner, problem),
            candidates=tuple(ordered),
            pruned=choice_set.pruned_counts(),
            considered=choice_set.considered,
            search=self.settings.search,
            # the file as a path from anywhere: the entry may be read from another folder
            space=str(Path(self.settings.space_file).resolve()) if self.settings.space_file else None,
            cut_short=any(c.cut_by_budget for c in candidates),
            tool_version=__version__,
            tuned_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            tune_seconds=round(seconds, 3),
            **(record.entry_fields() if record is not None else {}),
        )

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()
            self._executor = None

    def __enter__(self) -> "Tuner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
