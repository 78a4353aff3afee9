"""Tuning at compile time in a torch.distributed job: the ranks of a job (torchrun, one
process per GPU) split the problems that no rank has a winner for, and every result reaches
every rank, so that each problem is tuned once per job and every rank routes the same winner.

`share_tuning` is called by every rank with the same graph's problems (sorted here by key,
so that every rank agrees on their order):

  1. One all_gather: each rank's device fingerprint (GPU model, driver, CUDA runtime, torch,
     triton: what a cache key names), host, cache folder, and the winner it already holds
     (key and config) for each problem.
  2. Ranks of one fingerprint form a group. A problem that no rank of the group holds is
     tuned by one of them (dealt in turn, in key order); a problem that some rank holds is
     tuned by none: the entry of the lowest rank holding it goes to the group's ranks that
     lack it or hold another winner. Ranks of different GPU models never use each other's
     entries (a key names its machine): each group tunes its own model's problems among
     its own ranks, as if the others were another job.
  3. Each rank tunes its share in one tuner on its own device (torch.cuda.current_device()),
     its workers and compile pool cut to its share of the host; rank 0 alone shows progress.
  4. A second all_gather carries every entry tuned or shared (the stored entry, with its
     key) and every failure. In each (host, cache folder, group) the lowest rank merges its
     group's entries into that cache (the file lock and merge as for any writer: one writer
     per host and folder), and a barrier holds the others until it has, so that no rank
     routes before its cache holds them. When nothing is missing anywhere, step 1 is all.

Failures never hang a job. A rank whose tuning raises reports its unfinished problems as
failed in the gather: they are left to the compiler on every rank (rank 0 names them in one
line) and tuned again by a later compile; what it finished is shared as usual. A collective
that fails (a rank died, or took longer than the group's timeout, AUTOTUNE_RANK_TIMEOUT_S,
default 30 min, which must cover the slowest rank's share) is caught: the rank says so in one
line, routes what its own cache holds (its own tuning is there), leaves the rest to the
compiler, and tunes nothing more at compile time in this process (the job can no longer
agree on winners; another tune alone would pick its own). Its routes may then differ from
the other ranks' for the problems it did not get.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..store.entry import Entry
from ..problem import GemmProblem
from ..settings import TuneSettings, check_seconds

if TYPE_CHECKING:
    from ..store.cache import Cache

__all__ = ["DEFAULT_TIMEOUT_S", "TIMEOUT_ENV", "in_job", "plan", "share_tuning"]

DEFAULT_TIMEOUT_S = 1800.0
TIMEOUT_ENV = "AUTOTUNE_RANK_TIMEOUT_S"

# The gloo group made beside the program's own, with the default group it was made under (a
# program may tear its group down and start another); and whether a collective of ours has
# failed in this process.
_GROUPS: list[tuple[Any, Any]] = []
_BROKEN: list[str] = []


def world_size() -> int:
    """The job's size: 1 where torch.distributed is not initialized."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return 1
    return dist.get_world_size()


def in_job() -> bool:
    """Whether this process is one rank of a torch.distributed job of several."""
    return world_size() > 1


@dataclass(frozen=True)
class RankState:
    """What a rank says before tuning: its device's fingerprint digest, host, cache folder,
    and for each problem it holds a winner for, (cache key, winner's config identity)."""

    rank: int
    machine: str
    host: str
    folder: str
    held: dict[str, tuple]


@dataclass(frozen=True)
class Plan:
    """Who does what: the problem keys each rank tunes, and the problem keys whose held
    entry each rank gives to its group."""

    tune: dict[int, tuple[str, ...]]
    give: dict[int, tuple[str, ...]]

    @property
    def idle(self) -> bool:
        """Nothing to tune and nothing to give anywhere: the job agrees already."""
        return not any(self.tune.values()) and not any(self.give.values())


def plan(states: Sequence[RankState], problem_keys: Sequence[str]) -> Plan:
    """Divide the work among ranks of the same fingerprint (see the module)."""
    groups: dict[str, list[RankState]] = {}
    for state in sorted(states, key=lambda s: s.rank):
        groups.setdefault(state.machine, []).append(state)
    tune: dict[int, list[str]] = {s.rank: [] for s in states}
    give: dict[int, list[str]] = {s.rank: [] for s in states}
    for members in groups.values():
        dealt = 0
        for key in sorted(problem_keys):
            holders = [s for s in members if key in s.held]
            if not holders:
                tune[members[dealt % len(members)].rank].append(key)
                dealt += 1
            elif any(s.held.get(key) != holders[0].held[key] for s in members):
                give[holders[0].rank].append(key)
    return Plan({r: tuple(k) for r, k in tune.items()}, {r: tuple(k) for r, k in give.items()})


@dataclass(frozen=True)
class RankResult:
    """What a rank hands to every other after tuning: entries by cache key (each with the
    problem key it serves, the entry as a dict), the problems it could not tune (problem key
    -> why), and, where its tune raised, why and the problems that left unfinished."""

    rank: int
    entries: dict[str, tuple[str, dict]]
    failed: dict[str, str]
    crash: str | None = None
    unfinished: tuple[str, ...] = ()


class _Collectives:
    """The gloo group's collectives, each a one-line failure instead of an exception."""

    def __init__(self, group: Any, rank: int) -> None:
        self.group = group
        self.rank = rank

    def gather(self, what: str, obj: Any) -> list | None:
        import torch.distributed as dist

        out: list = [None] * dist.get_world_size(self.group)
        try:
            dist.all_gather_object(out, obj, group=self.group)
        except Exception as exc:  # noqa: BLE001 - a timeout, a rank gone: told, never raised
            self.fail(what, exc)
            return None
        return out

    def barrier(self) -> bool:
        import torch.distributed as dist

        try:
            dist.barrier(group=self.group)
        except Exception as exc:  # noqa: BLE001
            self.fail("waiting for the cache writers", exc)
            return False
        return True

    def fail(self, what: str, exc: BaseException) -> None:
        why = _short(exc)
        _BROKEN.append(why)
        _say(f"autotune: rank {self.rank}: {what} failed ({why}); what this rank's cache lacks is "
             "left to the compiler, and no more is tuned at compile time in this process")


def _short(exc: BaseException) -> str:
    """An exception's message on one short line, without the C++ source location gloo
    puts in front ("[.../pair.cc:553] Connection closed by peer ...")."""
    text = re.sub(r"^\[[^\]]*\]\s*", "", " ".join(str(exc).split()))
    return (text[:140] + "…" if len(text) > 140 else text) or type(exc).__name__


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def timeout_s() -> float:
    """The bound on each collective of ours: AUTOTUNE_RANK_TIMEOUT_S, else DEFAULT_TIMEOUT_S."""
    text = os.environ.get(TIMEOUT_ENV)
    if text is None or not text.strip():
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    check_seconds(TIMEOUT_ENV, value)
    return value


def _group() -> Any:
    """Our gloo group beside the program's own (made once per default group, by every rank:
    new_group is itself collective). Gloo: the objects travel on the CPU, the program's NCCL
    streams and communicators are untouched, and our timeout and failures are our own."""
    from datetime import timedelta

    import torch.distributed as dist

    world = dist.distributed_c10d._get_default_group()
    if _GROUPS and _GROUPS[0][0] is world:
        return _GROUPS[0][1]
    group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s()))
    _GROUPS[:] = [(world, group)]
    return group


def _device(settings: TuneSettings):
    """This rank's device: the current CUDA device (as torchrun's ranks set it), or the CPU."""
    from ..hardware.device import probe_device

    if settings.device != "cuda":
        return probe_device(settings.device)
    import torch

    return probe_device("cuda", torch.cuda.current_device())


def rank_settings(settings: TuneSettings, device, on_host: int) -> TuneSettings:
    """One rank's share of its host (`on_host` ranks there): interpreter workers on the CPU,
    compile-pool processes on a GPU (the size one device would use, divided)."""
    from ..runner.executor import default_compile_workers
    from .local import slot_settings

    if device.device_type != "cuda":
        return slot_settings(settings, device, on_host)
    if settings.compile_workers is not None:
        return settings
    return replace(settings, compile_workers=max(1, default_compile_workers(device) // on_host))


def share_tuning(problems: Sequence[GemmProblem], held: Callable[[GemmProblem], tuple[str, Entry] | None],
                 settings: TuneSettings, tune: Callable) -> int:
    """Tune `problems` (every one a graph routes; the same on every rank) with the other ranks
    of the job (see the module). `held(problem)`: this rank's cached (key, entry), or None.
    `tune`: routing.tuning.tune_missing. Returns how many problems this rank's cache lacked or
    was given another winner for (0: its routes cannot have changed)."""
    import torch.distributed as dist

    from ..store.cache import Cache
    from ..store.fingerprint import Fingerprint

    rank = dist.get_rank()
    by_key = {problem.key(): problem for problem in problems}
    mine = {key: found for key, problem in sorted(by_key.items()) if (found := held(problem)) is not None}
    lacking = len(by_key) - len(mine)
    if _BROKEN:  # this job can no longer agree: route what is cached, tune nothing
        return 0
    try:
        coll = _Collectives(_group(), rank)
    except Exception as exc:  # noqa: BLE001
        _Collectives(None, rank).fail("making the gloo group", exc)
        return 0
    device = _device(settings)
    folder = str(Path(settings.cache_dir).expanduser().resolve())
    state = RankState(rank, Fingerprint.of(device, {}).digest(), socket.gethostname(), folder,
                      {key: (found[0], found[1].winner.identity) for key, found in mine.items()})
    states = coll.gather("sharing which problems each rank holds", state)
    if states is None:
        return 0
    work = plan(states, list(by_key))
    if work.idle:
        return 0
    share = [by_key[key] for key in work.tune[rank]]
    if rank == 0:
        _say(_job_line(states, work))
    on_host = sum(1 for s in states if s.host == state.host)
    tuned, result = _tune_share(share, rank_settings(settings, device, on_host), device, rank, tune)
    cache = Cache(settings.cache_dir)
    for problem_key, key in tuned.items():  # as stored: the writers' merge then skips its own
        entry = cache.get(key)
        if entry is not None:
            result.entries[key] = (problem_key, entry.to_dict())
    for problem_key in work.give[rank]:
        key, entry = mine[problem_key]
        result.entries[key] = (problem_key, entry.to_dict())
    results = coll.gather("gathering the tuning results", result)
    if results is None:
        return lacking
    if rank == 0:
        _tell_failures(results, by_key)
    group = {s.rank for s in states if s.machine == state.machine}
    given = {key: item for r in results if r.rank in group for key, item in r.entries.items()}
    if not any(r.entries for r in results):  # the same answer on every rank: all skip the barrier
        return lacking
    writers: dict[tuple, int] = {}
    for s in states:
        writers.setdefault((s.host, s.folder, s.machine), s.rank)
    error = None
    if writers[(state.host, state.folder, state.machine)] == rank:
        try:
            _merge(cache, given)
        except Exception as exc:  # noqa: BLE001 - raised after the barrier: the others must not wait
            error = exc
    if not coll.barrier():
        _merge(cache, given)  # its writer may not have written: the merge makes a second write safe
    if error is not None:
        raise error
    changed = sum(1 for key, (problem_key, entry) in given.items()
                  if state.held.get(problem_key) != (key, _identity(entry)))
    return lacking + changed


def _identity(entry: dict) -> tuple:
    from ..store.results import config_identity

    winner = entry.get("winner") or {}
    return config_identity(winner.get("uid", ""), winner.get("params") or {})


def _tune_share(share: list[GemmProblem], settings: TuneSettings, device, rank: int, tune: Callable
                ) -> tuple[dict[str, str], RankResult]:
    """Tune this rank's share: (problem key -> cache key of each tuned, this rank's result
    without its entries). A tune that raises leaves its unfinished problems failed."""
    tuned: dict[str, str] = {}
    failed: dict[str, str] = {}

    def done(problem: GemmProblem, key: str | None, entry: Entry | None, why: str | None) -> None:
        if key is not None:
            tuned[problem.key()] = key
        else:
            failed[problem.key()] = why or "failed"

    if share:
        try:
            tune(share, settings, quiet=rank != 0, device=device, on_done=done)
        except Exception as exc:  # noqa: BLE001 - the job goes on; rank 0 tells of it
            why = f"{type(exc).__name__}: {_short(exc)}"
            unfinished = tuple(p.key() for p in share if p.key() not in tuned and p.key() not in failed)
            return tuned, RankResult(rank, {}, failed, why, unfinished)
    return tuned, RankResult(rank, {}, failed)


def _merge(cache: Cache, given: dict[str, tuple[str, dict]]) -> None:
    """Write into `cache` each given entry it does not already hold as it is."""
    def change(current: dict[str, Entry]) -> dict[str, dict]:
        return {key: entry for key, (_, entry) in given.items()
                if key not in current or current[key].to_dict(copy_=False) != entry}

    cache.merge(change)


def _job_line(states: Sequence[RankState], work: Plan) -> str:
    """Rank 0's one line on what the job does with this graph's missing problems."""
    tuning = sum(len(keys) for keys in work.tune.values())
    giving = sum(len(keys) for keys in work.give.values())
    machines = len({s.machine for s in states})
    parts = []
    if tuning:
        parts.append(f"{tuning} problem{'s' if tuning != 1 else ''} to tune, {len(work.tune[0])} of them here")
    if giving:
        parts.append(f"{giving} given from a rank's cache to the ranks that lack {'them' if giving != 1 else 'it'}")
    if machines > 1:
        parts.append(f"{machines} kinds of GPU, each tuning its own")
    return f"autotune: {len(states)} ranks share this graph's tuning: " + "; ".join(parts)


def _tell_failures(results: Sequence[RankResult], by_key: dict[str, GemmProblem]) -> None:
    """Rank 0's lines on what was not tuned: a line per problem another rank could not tune
    (rank 0's own were told by its tune), a line per rank whose tune raised."""
    for result in results:
        if result.rank != 0:
            for problem_key, why in result.failed.items():
                _say(f"autotune: {by_key[problem_key].describe()} left to the compiler: {why} (rank {result.rank})")
        if result.crash is not None and result.unfinished:
            names = "; ".join(by_key[key].describe() for key in result.unfinished)
            count = len(result.unfinished)
            _say(f"autotune: tuning failed on rank {result.rank} ({result.crash}): {count} problem"
                 f"{'s' if count != 1 else ''} left to the compiler: {names}")
