"""`--executor ray`: `RayTuner`, the tuner that schedules whole problems onto Ray actors, each
owning one GPU of some node (`num_gpus=1`; with `--device cpu`, one CPU: `num_cpus=1`).

An actor runs the ordinary `Tuner` with a `LocalExecutor` on its GPU (Ray has set
CUDA_VISIBLE_DEVICES to it) and a `ReportingCache` (in memory): it probes its own device, so the entry
it returns carries the fingerprint of the machine that measured it. The driver sends with
each problem the cache entries it holds for that problem (any fingerprint: the actor's
own lookup picks the one that matches it, or resumes a partial one), receives the
entry and key back, and alone writes the cache file. Each node compiles with its own
compile pool into its own Triton cache.

An actor's `tune` is a Ray generator: it streams each partial entry its tuner saves (the
results measured so far, as `progress.TuneProgress` writes them about every half second)
and then the outcome; the driver writes each to the cache file as it arrives, as a local
tune writes its own, so that a kill -9 of the driver loses nothing an actor reported.

Faults: an actor that dies (ray.kill, a lost node) loses nothing it already reported
(the driver stored it on arrival); its unfinished problem is re-queued on the survivors
(at most MAX_ATTEMPTS tries per problem), which resume from its partial entry. The run ends
with every problem tuned or reported failed. The package (and any --plugin file) must be
importable on every node.

Nothing of Ray's reaches the command's stdout (--json is parsed from it): the cluster's error
messages, which Ray's driver prints there whatever `log_to_driver` says, go to stderr. A
--ray-address that cannot be joined (malformed, refused, unreachable, or a port that is not a
Ray head's) is one line at once.
"""

from __future__ import annotations

import os
import queue
import socket
import tempfile
import threading
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import ray
from ray.exceptions import RayTaskError

from ..runner.executor import default_compile_workers
from ..store.cache import Cache
from ..errors import UserError
from ..store.entry import CacheKey, Entry
from ..hardware.device import probe_device
from ..problem import GemmProblem
from .common import MAX_ATTEMPTS, LockedListener, MemoryCache, ProblemResult
from ..settings import TuneSettings
from ..tune.selections import stored_after, template_hashes
from ..tune.tuner import TuneListener, TuneOutcome, Tuner

CONNECT_TIMEOUT_S = 5.0  # a cluster's head that does not accept a connection in this long is unreachable


class ReportingCache(MemoryCache):
    """An actor's cache: each entry its tuner puts (partial ones as results come, then the
    finished one) is also queued for the driver, which alone writes the file."""

    def __init__(self) -> None:
        super().__init__()
        self.outbox: queue.Queue | None = None

    def put(self, key: str, entry: Entry) -> None:
        super().put(key, entry)
        if self.outbox is not None:
            self.outbox.put((key, entry))


@dataclass(frozen=True, slots=True)
class ActorReport:
    """What an actor's tune streams to the driver: each partial entry its tuner saves
    (`partial`), then the finished entry with the outcome (`from_cache`) and where it was
    tuned (host, process, device name). Pickled by Ray between the driver and its actors."""

    key: str
    entry: Entry
    partial: bool = False
    from_cache: bool = False
    host: str = ""
    pid: int = 0
    device: str = ""


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
        self.cache = ReportingCache()
        self.tuner = Tuner(self.settings, cache=self.cache, device=device)
        self.device_name = device.name

    def tune(self, problem: GemmProblem, entries: dict[str, Entry]):
        """Yields an ActorReport for each partial entry the tune saves, then one of the
        outcome. The tune runs on a thread of its own so that its partial entries stream out
        while it runs."""
        self.cache.entries = dict(entries)
        self.cache.outbox = outbox = queue.Queue()
        ended: dict = {}

        def run() -> None:
            try:
                ended["outcome"] = self.tuner.tune(problem)
            except BaseException as exc:  # noqa: BLE001 - raised to the driver below
                ended["error"] = exc
            finally:
                outbox.put(None)

        thread = threading.Thread(target=run, name="autotune-ray-tune", daemon=True)
        thread.start()
        try:
            while (item := outbox.get()) is not None:
                key, entry = item
                if entry.partial:  # the finished entry goes with the outcome
                    yield ActorReport(key, entry, partial=True)
        finally:
            self.cache.outbox = None
        thread.join()
        if "error" in ended:
            raise ended["error"]
        outcome = ended["outcome"]
        yield ActorReport(outcome.key, outcome.entry, from_cache=outcome.from_cache,
                          host=socket.gethostname(), pid=os.getpid(), device=self.device_name)

    def close(self) -> None:
        self.tuner.close()


RemoteTuneActor = ray.remote(max_restarts=0, max_task_retries=0)(TuneActor)


def store_report(cache, key: str, entry: Entry) -> None:
    """An actor's entry written as its tuner would have written it here (selections.stored_after:
    what the cache learned of other templates stays; a partial one never replaces a winner)."""
    hashes = template_hashes(entry.problem)
    cache.put_with(key, lambda current: stored_after(entry, current, hashes))


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


def check_address(address: str) -> None:
    """A Ray address the driver can join, or a UserError (one line) at once: "auto" and
    "local" (Ray's own), else host:port or ray://host:port whose host accepts a TCP
    connection within CONNECT_TIMEOUT_S. (Ray itself waits a minute or more on a head that
    does not answer.) Another scheme is left to Ray, which refuses what it cannot use."""
    text = address.strip()
    if text in ("auto", "local"):
        return
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    if scheme not in ("", "ray"):
        return
    shown = repr(address[:120])
    host, colon, port = rest.rpartition(":")
    host = host.strip("[]")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"--ray-address {shown}: not a Ray address (host:port of the cluster's head, "
                        f"ray://host:port, or auto)")
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S) as conn:
            # under Ray's TLS (RAY_USE_TLS) the head wants a TLS handshake first: left to Ray
            speaks_grpc = ray_tls() or answers_http2(conn)
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise UserError(f"--ray-address {shown}: cannot reach {host}:{port} ({why})") from None
    if not speaks_grpc:
        raise UserError(f"--ray-address {shown}: {host}:{port} answers, but not as a Ray head "
                        f"(no gRPC there: is the port the head's?)")


# An HTTP/2 client's opening (its preface and an empty SETTINGS frame): a gRPC server, as a
# Ray head's GCS and its client server are, answers with a SETTINGS frame of its own.
HTTP2_OPENING = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
SETTINGS_FRAME = 4  # the frame type, the fourth byte of a frame's 9-byte header


def ray_tls() -> bool:
    """Whether Ray's gRPC runs over TLS here (RAY_USE_TLS, as Ray reads it)."""
    return os.environ.get("RAY_USE_TLS", "0").strip().lower() in ("1", "true")


def answers_http2(conn: socket.socket) -> bool:
    """Whether the server on `conn` answers an HTTP/2 opening with a SETTINGS frame within
    CONNECT_TIMEOUT_S: what Ray's own join would otherwise wait tens of seconds to find out
    of a port that takes connections but speaks something else."""
    conn.sendall(HTTP2_OPENING)
    header = b""
    try:
        while len(header) < 9:
            chunk = conn.recv(9 - len(header))
            if not chunk:
                break
            header += chunk
    except TimeoutError:  # took the connection, said nothing
        return False
    return len(header) == 9 and header[3] == SETTINGS_FRAME


def _join(address: str | None) -> None:
    """ray.init: a local cluster (None), or the one at `address`, checked first; an address
    Ray refuses is a UserError (one line)."""
    if address is not None:
        check_address(address)
    try:
        ray.init(address=address, log_to_driver=False, include_dashboard=False)
    except (ConnectionError, ValueError) as exc:
        if address is None:
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"--ray-address {address[:120]!r}: {first}") from None


def _ray_messages_to_stderr() -> None:
    """Ray's driver prints the cluster's error messages (a dead worker's yellow "(raylet)"
    line) on sys.stdout from a thread of its own, log_to_driver or not; send them to stderr,
    where the command's progress goes, so that stdout holds only the command's output. (Ray
    calls ray._private.worker.print_to_stdstream by name for each.)"""
    from ray._private import worker as ray_worker

    original = getattr(ray_worker, "print_to_stdstream", None)
    if original is None or getattr(original, "to_stderr", False):
        return

    def print_to_stderr(data, *args, **kwargs):
        return original({**data, "is_err": True}, *args, **kwargs)

    print_to_stderr.to_stderr = True
    ray_worker.print_to_stdstream = print_to_stderr


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
            _join(settings.ray_address or os.environ.get("RAY_ADDRESS") or None)
            self.owns_ray = True
        _ray_messages_to_stderr()
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
        in_flight: dict = {}  # an actor's tune (its stream of reports) -> (actor slot, problem index)
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
                stream = self.actors[slot].tune.remote(result.problem, self._entries_for(result.problem))
                in_flight[stream] = (slot, index)
            if not in_flight:
                break  # no actor left
            (stream,), _ = ray.wait(list(in_flight), num_returns=1)
            slot, index = in_flight[stream]
            result = results[index]
            try:
                report: ActorReport = ray.get(next(stream))
            except RayTaskError as exc:  # the problem failed on its own; the actor goes on
                del in_flight[stream]
                cause = getattr(exc, "cause", None) or exc
                result.error = str(cause) if isinstance(cause, UserError) else \
                    f"{type(cause).__name__}: {str(cause).strip().splitlines()[-1] if str(cause).strip() else ''}"
                result.slot = slot
                idle.append(slot)
                finish(result)
                continue
            except Exception as exc:  # noqa: BLE001 - the actor died (RayActorError) or cannot be reached
                # (StopIteration: its stream ended without an outcome): its problem goes to a
                # survivor, which resumes from the partial entry stored for it
                del in_flight[stream]
                alive.discard(slot)
                text = str(exc).strip()
                lost[slot] = text.splitlines()[0] if text else type(exc).__name__
                if alive and result.attempts < MAX_ATTEMPTS:
                    pending.appendleft(index)
                else:
                    result.error = f"actor {slot} lost: {lost[slot]}"
                    finish(result)
                continue
            if report.partial:  # results measured so far: stored now, the tune goes on
                store_report(self.cache, report.key, report.entry)
                continue
            del in_flight[stream]
            idle.append(slot)
            outcome = TuneOutcome(result.problem, report.key, report.entry, report.from_cache)
            if not outcome.from_cache:
                store_report(self.cache, outcome.key, outcome.entry)  # the driver alone writes
            else:
                self.listener.cache_hit(result.problem, outcome.entry)
            self.listener.finished(outcome)
            result.outcome, result.slot = outcome, slot
            result.device, result.host = report.device, report.host
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
        except Exception:  # noqa: BLE001 - best effort: the actors are killed next
            pass
        for actor in self.actors:
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - an actor already gone
                pass
        self.actors = []
        if self.owns_ray:
            ray.shutdown()
            self.owns_ray = False

    def __enter__(self) -> "RayTuner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
