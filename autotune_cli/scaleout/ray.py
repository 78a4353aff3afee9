"""`--executor ray`: `RayTuner`, the tuner that schedules whole problems onto Ray actors, each
owning one GPU of some node (`num_gpus=1`; with `--device cpu`, one CPU: `num_cpus=1`).

An actor runs the ordinary `Tuner` with a `LocalExecutor` on its GPU (Ray has set
CUDA_VISIBLE_DEVICES to it) and a `MemoryCache`: it probes its own device, so the entry
it returns carries the fingerprint of the machine that measured it. The driver sends with
each problem the cache entries it holds for that problem (any fingerprint: the actor's
own lookup picks the one that matches it, or resumes a partial one), receives the
entry and key back, and alone writes the cache file. Each node compiles with its own
compile pool into its own Triton cache.

Faults: an actor that dies (ray.kill, a lost node) loses nothing it already returned
(the driver stored it on arrival); its unfinished problem is re-queued on the survivors
(at most MAX_ATTEMPTS tries per problem). The run ends with every problem tuned or
reported failed. The package (and any --plugin file) must be importable on every node.
"""

from __future__ import annotations

import os
import socket
import tempfile
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

import ray
from ray.exceptions import RayTaskError

from ..runner.executor import default_compile_workers
from ..cache import Cache
from ..errors import UserError
from ..entry import CacheKey, Entry
from ..device import probe_device
from ..problem import GemmProblem
from .common import MAX_ATTEMPTS, LockedListener, MemoryCache, ProblemResult
from ..settings import TuneSettings
from ..tuner import TuneListener, TuneOutcome, Tuner


class TuneActor:
    """One device of the cluster: tunes the problems it is given, writes no file."""

    def __init__(self, settings: TuneSettings, gpus_on_node: int = 1) -> None:
        device = probe_device(settings.device, 0)
        node_dir = Path(tempfile.gettempdir()) / f"autotune-ray-{os.getuid()}"
        if settings.device == "cpu":
            local = replace(settings, workers=1, compile_workers=0)
        else:
            compile_workers = settings.compile_workers
            if compile_workers is None:  # the node's compile cores, shared by its GPUs
                compile_workers = max(1, default_compile_workers(device) // max(1, gpus_on_node))
            local = replace(settings, compile_workers=compile_workers)
        self.settings = replace(local, cache_dir=node_dir, gpus=1, executor="local", ray_address=None)
        self.cache = MemoryCache()
        self.tuner = Tuner(self.settings, cache=self.cache, device=device)
        self.identity_ = {"host": socket.gethostname(), "pid": os.getpid(), "device": device.name}

    def tune(self, problem: dict, entries: dict[str, dict]) -> dict:
        self.cache.entries = dict(entries)
        outcome = self.tuner.tune(GemmProblem.from_dict(problem))
        return {"key": outcome.key, "entry": outcome.entry, "from_cache": outcome.from_cache,
                **self.identity_}

    def close(self) -> None:
        self.tuner.close()


RemoteTuneActor = ray.remote(max_restarts=0, max_task_retries=0)(TuneActor)


def _cluster_count(settings: TuneSettings) -> int:
    resources = ray.cluster_resources()
    kind = "GPU" if settings.device == "cuda" else "CPU"
    have = int(resources.get(kind, 0))
    if have < 1:
        raise UserError(f"the Ray cluster has no {kind} for --device {settings.device}")
    count = settings.gpus or have
    if count > have:
        raise UserError(f"--gpus {count}: the Ray cluster has {have} {kind}(s)")
    return count


def _gpus_per_node() -> int:
    counts = [int(node.get("Resources", {}).get("GPU", 0)) for node in ray.nodes() if node.get("Alive")]
    return max(counts or [1]) or 1


class RayTuner:
    """The scale-out tuner on a Ray cluster (a ScaledTuner, like MultiDeviceTuner; not an
    executor: each actor's Tuner runs its candidates through its own LocalExecutor). The
    driver: schedules whole problems onto actors and alone stores what they return."""

    def __init__(self, settings: TuneSettings, listener: TuneListener | None = None,
                 actors: int | None = None) -> None:
        self.settings = settings
        self.listener = LockedListener(listener or TuneListener())
        self.owns_ray = False
        if not ray.is_initialized():
            address = settings.ray_address or os.environ.get("RAY_ADDRESS") or None
            ray.init(address=address, log_to_driver=False, include_dashboard=False)
            self.owns_ray = True
        count = actors or _cluster_count(settings)
        if settings.device == "cuda":
            options = {"num_gpus": 1, "num_cpus": 0}
            per_node = _gpus_per_node()
        else:
            options = {"num_cpus": 1}
            per_node = 1
        self.actors = [RemoteTuneActor.options(**options).remote(settings, per_node)
                       for _ in range(count)]
        self.cache = Cache(settings.cache_dir)

    def _entries_for(self, problem: GemmProblem) -> dict[str, Entry]:
        """The entries stored for `problem`, under any fingerprint."""
        wanted = problem.key()
        return {k: v for k, v in self.cache.load().items()
                if getattr(CacheKey.try_parse(k), "problem", None) == wanted}

    def tune_all(self, problems: Sequence[GemmProblem],
                 on_result: Callable[[ProblemResult], None] | None = None) -> list[ProblemResult]:
        results = [ProblemResult(i, p) for i, p in enumerate(problems)]
        pending = deque(range(len(problems)))
        idle = deque(range(len(self.actors)))
        alive = set(range(len(self.actors)))
        in_flight: dict = {}  # object ref -> (actor slot, problem index)
        self.in_flight = in_flight  # seen by tests, which kill a busy actor
        lost: dict[int, str] = {}

        def finish(result: ProblemResult) -> None:
            if on_result is not None:
                on_result(result)

        while pending or in_flight:
            while pending and idle:
                slot, index = idle.popleft(), pending.popleft()
                result = results[index]
                result.attempts += 1
                ref = self.actors[slot].tune.remote(result.problem.to_dict(),
                                                    self._entries_for(result.problem))
                in_flight[ref] = (slot, index)
            if not in_flight:
                break  # no actor left
            (ref,), _ = ray.wait(list(in_flight), num_returns=1)
            slot, index = in_flight.pop(ref)
            result = results[index]
            try:
                value = ray.get(ref)
            except RayTaskError as exc:  # the problem failed on its own; the actor goes on
                cause = getattr(exc, "cause", None) or exc
                result.error = str(cause) if isinstance(cause, UserError) else \
                    f"{type(cause).__name__}: {str(cause).strip().splitlines()[-1] if str(cause).strip() else ''}"
                result.slot = slot
                idle.append(slot)
                finish(result)
                continue
            except Exception as exc:  # the actor died (RayActorError) or cannot be reached:
                alive.discard(slot)  # its problem goes to a survivor
                lost[slot] = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                if alive and result.attempts < MAX_ATTEMPTS:
                    pending.appendleft(index)
                else:
                    result.error = f"actor {slot} lost: {lost[slot]}"
                    finish(result)
                continue
            idle.append(slot)
            outcome = TuneOutcome(result.problem, value["key"], value["entry"], value["from_cache"])
            if not outcome.from_cache:
                self.cache.put(outcome.key, outcome.entry)  # the driver alone writes
            else:
                self.listener.cache_hit(result.problem, outcome.entry)
            self.listener.finished(outcome)
            result.outcome, result.slot = outcome, slot
            result.device, result.host = value["device"], value["host"]
            finish(result)
        why = "; ".join(f"actor {s}: {e}" for s, e in sorted(lost.items())) or "none started"
        for result in results:
            if result.outcome is None and result.error is None:
                result.error = f"no actor left to tune it ({why})"
                finish(result)
        return results

    def close(self) -> None:
        try:  # stop the actors' worker processes cleanly, then the actors
            ray.wait([actor.close.remote() for actor in self.actors],
                     num_returns=len(self.actors), timeout=10)
        except Exception:
            pass
        for actor in self.actors:
            try:
                ray.kill(actor)
            except Exception:
                pass
        self.actors = []
        if self.owns_ray:
            ray.shutdown()
            self.owns_ray = False

    def __enter__(self) -> "RayTuner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
