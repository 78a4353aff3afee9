"""The executor seam: submit candidates for a problem, receive results.

`LocalExecutor` runs spawned worker processes on this host:
  - timing workers: one per GPU for `cuda` (or several interpreter workers for `cpu`); each
    builds, verifies and times candidates;
  - on `cuda`, a compile pool: warm processes that compile Triton candidates ahead of the
    timing worker (without launching anything), so the GPU never waits on a compile that
    could have overlapped; the timing process then loads the binary from Triton's cache.
Each task gets a deadline; a worker that misses it is killed and replaced, and a worker that
dies takes only its current candidate with it. Another executor (Ray, say) implements the
same `run` and `close`.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from dataclasses import asdict, replace
from multiprocessing.connection import wait
from typing import Any, Callable, Protocol, Sequence

from ..choices import KernelTemplateChoice
from ..errors import UserError
from ..fingerprint import DeviceInfo
from ..results import COMPILE_ERROR, RUNTIME_ERROR, SKIPPED, TIMEOUT, Candidate
from ..settings import TimingPolicy, TuneSettings
from .compile_pool import CompilePool, compile_key
from .worker import worker_main

ResultCallback = Callable[[int, Candidate], None]


class Executor(Protocol):
    def run(self, choices: Sequence[KernelTemplateChoice], on_result: ResultCallback | None = None,
            policy: TimingPolicy | None = None, deadline: float | None = None) -> list[Candidate]: ...

    def close(self) -> None: ...


class WorkerStartError(RuntimeError):
    pass


def _exit_reason(exitcode: int | None) -> str:
    if exitcode is None:
        return "worker vanished"
    if exitcode < 0:
        try:
            return f"worker killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"worker killed by signal {-exitcode}"
    return f"worker exited with code {exitcode}"


class _Worker:
    def __init__(self, ctx, device: DeviceInfo, gpu_index: int, plugins: tuple[str, ...],
                 role: str) -> None:
        self.ctx = ctx
        self.device = device
        self.gpu_index = gpu_index
        self.plugins = plugins
        self.role = role  # "measure" or "compile"
        self.process = None
        self.conn = None
        self.state = "down"  # down | starting | idle | busy
        self.deadline = 0.0
        self.task_index: int | None = None
        self.started_at = 0.0
        self.assigned_at = 0.0  # time.perf_counter() when its current task was sent

    def start(self, startup_timeout: float) -> None:
        parent, child = self.ctx.Pipe()
        # The environment travels explicitly: a forkserver child would otherwise inherit the
        # server's environment from when it started, not the caller's of now.
        self.process = self.ctx.Process(
            target=worker_main,
            args=(child, self.device.device_type, self.gpu_index, self.plugins, self.device.l2_bytes,
                  worker_environment(self.ctx, self.device.device_type), self.role),
            daemon=True, name=f"autotune-{self.role}-{self.device.device_type}{self.gpu_index}",
        )
        self.started_at = time.monotonic()
        self.process.start()
        child.close()
        self.conn = parent
        self.state = "starting"
        self.deadline = time.monotonic() + startup_timeout

    def assign(self, index: int, task: dict, timeout: float) -> None:
        self.conn.send(task)
        self.assigned_at = time.perf_counter()
        self.state = "busy"
        self.task_index = index
        self.deadline = time.monotonic() + timeout

    def kill(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.kill()
        if self.process is not None:
            self.process.join(timeout=5)
        if self.conn is not None:
            self.conn.close()
        self.process = self.conn = None
        self.state = "down"
        self.task_index = None

    def request_stop(self) -> None:
        """Ask the process to exit; it tears down (CUDA and all) on its own time."""
        if self.conn is not None and self.state in ("idle", "busy"):
            try:
                self.conn.send(None)
            except (OSError, BrokenPipeError):
                pass

    def stop(self, deadline: float | None = None) -> None:
        """Stop the process: asked first, killed if it is still there at `deadline`."""
        self.request_stop()
        if self.process is not None:
            wait_s = 2.0 if deadline is None else max(0.0, deadline - time.monotonic())
            self.process.join(timeout=wait_s)
        self.kill()


# Modules a forkserver imports once, so that each worker it forks starts with them loaded
# instead of importing torch and triton again (seconds each, and nine at once contend).
FORKSERVER_PRELOAD = ["torch", "triton", "autotune_cli.bench.worker", "autotune_cli.templates"]

# Whether the forkserver this process started imported triton as Triton's interpreter
# (TRITON_INTERPRET=1: CPU workers) or not (GPU workers). Triton decorates its own library
# at import, so a server serves one kind only; the other kind is spawned.
_forkserver_interprets: bool | None = None
# Held while the forkserver is (re)started, which briefly changes os.environ, and while a
# worker's environment is copied (the tuners of several GPUs start workers in threads).
_forkserver_lock = threading.Lock()


def worker_context(method: str | None = None, device_type: str = "cuda"):
    """The multiprocessing context workers start from: a preloaded forkserver by default
    where the platform has one, else spawn. Never plain fork: the caller may have CUDA up."""
    method = method or os.environ.get("AUTOTUNE_START_METHOD") or (
        "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn")
    if method not in ("forkserver", "spawn"):
        raise UserError(f"AUTOTUNE_START_METHOD must be forkserver or spawn, not {method!r}")
    interprets = device_type == "cpu"
    if method == "forkserver":
        with _forkserver_lock:
            if _forkserver_interprets is None:
                _ensure_forkserver(interprets)
            if _forkserver_interprets != interprets:
                method = "spawn"
    return multiprocessing.get_context(method)


def _ensure_forkserver(interprets: bool) -> None:
    """Start the forkserver, or start it again if it died, under the environment it must
    import with: TRITON_INTERPRET for its kind, and this process's sys.path (Python 3.11's
    forkserver does not take it over; PYTHONSAFEPATH keeps the working folder out, so that a
    folder named torch or triton there is not imported instead). Call with the lock held."""
    global _forkserver_interprets
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(FORKSERVER_PRELOAD)
    import sys

    server_env = {
        "TRITON_INTERPRET": "1" if interprets else "0",
        "PYTHONPATH": os.pathsep.join(os.getcwd() if p == "" else p for p in sys.path),
        "PYTHONSAFEPATH": "1",
    }
    saved = {name: os.environ.get(name) for name in server_env}
    os.environ.update(server_env)
    try:
        forkserver.ensure_running()  # a no-op while the server lives
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    _forkserver_interprets = interprets


def worker_environment(ctx, device_type: str) -> dict[str, str]:
    """The caller's environment for a new worker, copied under the lock; first, for a
    forkserver worker, the server is made sure of (restarted in its kind if it died)."""
    with _forkserver_lock:
        if ctx.get_start_method() == "forkserver":
            _ensure_forkserver(device_type == "cpu")
        return dict(os.environ)


def prestart_workers(device_type: str) -> None:
    """Start the forkserver now, so that its imports of torch and triton run beside the
    caller's own (the CLI calls this before it imports torch) rather than after them."""
    worker_context(None, device_type)


def default_compile_workers(device: DeviceInfo) -> int:
    """Measured on the 16-core H200 host: 8 warm compilers gave 6.3 configs/s, 16 only 2.1."""
    if device.device_type != "cuda":
        return 0
    return max(1, min(8, (os.cpu_count() or 2) // 2))


class LocalExecutor:
    """Worker processes on this host, started lazily and kept across problems."""

    MAX_START_FAILURES = 3

    def __init__(self, device: DeviceInfo, settings: TuneSettings, workers: int | None = None,
                 gpu_indices: Sequence[int] | None = None, compile_pool: CompilePool | None = None) -> None:
        self.device = device
        self.settings = settings
        self.ctx = worker_context(settings.start_method, device.device_type)
        self.startups: list[tuple[str, float]] = []  # (role, seconds to ready) per start
        # (sent, done, compile seconds in the worker) per kernel the pool built for this
        # executor's requests, perf_counter times: what the tuner reports as a problem's
        # compile pipeline.
        self.compile_log: list[tuple[float, float, float]] = []
        plugins = tuple(settings.plugins)
        if device.device_type == "cuda":
            indices = list(gpu_indices) if gpu_indices is not None else [device.index]
        else:
            indices = [0] * (workers or settings.workers or self.default_workers(device))
        self.timers = [_Worker(self.ctx, device, i, plugins, "measure") for i in indices]
        self.owns_pool = compile_pool is None
        if compile_pool is None:
            count = settings.compile_workers
            if count is None:
                count = default_compile_workers(device)
            if count:
                compile_pool = CompilePool(self.ctx, [replace(device, index=i) for i in indices], count,
                                           plugins, settings.timeout_s, settings.startup_timeout_s)
        self.compile_pool = compile_pool
        self._wake_r, self._wake_w = multiprocessing.Pipe(duplex=False)  # the pool's answers ring here
        self.start_failures = 0

    @property
    def compilers(self) -> list[_Worker]:
        return self.compile_pool.workers if self.compile_pool is not None else []

    @staticmethod
    def default_workers(device: DeviceInfo) -> int:
        if device.device_type == "cuda":
            return 1
        return max(1, min(4, os.cpu_count() or 1))

    @property
    def workers(self) -> list[_Worker]:
        return self.timers + self.compilers

    def start(self) -> None:
        """Start every worker process now (they import torch and triton in parallel with
        whatever the caller does next)."""
        for worker in self.timers:
            if worker.state == "down":
                worker.start(self.settings.startup_timeout_s)
        if self.compile_pool is not None:
            self.compile_pool.start()

    def _task(self, choice: KernelTemplateChoice, seed: int, policy: TimingPolicy, mode: str) -> dict[str, Any]:
        return {
            "mode": mode,
            "uid": choice.uid,
            "problem": choice.problem.to_dict(),
            "config": choice.config_dict,
            "seed": seed,
            "kernel_dir": str(self.settings.kernel_dir),
            "timing": asdict(policy),
        }

    def _needs_compile(self, choice: KernelTemplateChoice) -> bool:
        return self.compile_pool is not None and choice.template.backend != "aten"

    def run(self, choices: Sequence[KernelTemplateChoice], on_result: ResultCallback | None = None,
            policy: TimingPolicy | None = None, deadline: float | None = None) -> list[Candidate]:
        """Measure every choice; results in the order of `choices`. Triton choices go to the
        compile pool first and are measured as their binaries arrive. Past `deadline`
        (time.monotonic()), nothing new starts and what is left is recorded as skipped."""
        settings = self.settings
        policy = policy or settings.timing_policy
        results: list[Candidate | None] = [None] * len(choices)
        measure_queue = deque(i for i, c in enumerate(choices) if not self._needs_compile(c))
        compiling = {i for i, c in enumerate(choices) if self._needs_compile(c)}
        compile_seconds: dict[int, float] = {}
        answers: deque[tuple[int, dict]] = deque()  # (index, payload) from the pool's thread
        owner = object()  # stands for this run's requests in the pool

        def record(index: int, candidate: Candidate) -> None:
            if index in compile_seconds:  # compiled by the pool; the first run only loaded it
                candidate = replace(candidate, compile_s=compile_seconds[index],
                                    first_run_s=candidate.compile_s)
            results[index] = candidate
            if on_result is not None:
                on_result(index, candidate)

        def failed(index: int, status: str, reason: str) -> Candidate:
            choice = choices[index]
            return Candidate(uid=choice.uid, params=choice.params, status=status, error=reason)

        def answered(index: int):
            def callback(payload: dict) -> None:  # runs on the pool's thread
                answers.append((index, payload))
                try:
                    self._wake_w.send_bytes(b"\0")
                except (OSError, ValueError):
                    pass
            return callback

        def take_answers() -> None:
            while self._wake_r.poll():
                self._wake_r.recv_bytes()
            while answers:
                index, payload = answers.popleft()
                if index not in compiling:
                    continue
                compiling.discard(index)
                if payload.get("pool_failed"):
                    raise WorkerStartError(payload["error"])
                if payload.get("ok"):
                    compile_seconds[index] = payload["compile_s"]
                    if not payload.get("reused"):
                        self.compile_log.append((payload["sent_at"], payload["done_at"], payload["compile_s"]))
                    measure_queue.append(index)
                else:
                    record(index, failed(index, payload.get("status", COMPILE_ERROR), payload["error"]))

        try:
            for index in sorted(compiling):
                choice = choices[index]
                self.compile_pool.submit(compile_key(choice),
                                         self._task(choice, settings.seed, policy, "compile"),
                                         owner, answered(index))
            while compiling or measure_queue or any(w.state == "busy" for w in self.timers):
                take_answers()
                if deadline is not None and time.monotonic() > deadline:
                    if self.compile_pool is not None:
                        self.compile_pool.withdraw(owner)
                    for index in sorted(compiling) + list(measure_queue):
                        record(index, failed(index, SKIPPED, "the tuning budget ran out"))
                    compiling.clear()
                    measure_queue.clear()
                    if not any(w.state == "busy" for w in self.timers):
                        break
                for worker in self.timers:
                    if worker.state == "down" and (measure_queue or compiling):
                        worker.start(settings.startup_timeout_s)
                    if worker.state == "idle" and measure_queue:
                        index = measure_queue.popleft()
                        # One seed for every candidate: the timing worker keeps one problem's
                        # inputs and reference between its candidates (worker.CandidateRunner).
                        worker.assign(index, self._task(choices[index], settings.seed, policy, "measure"),
                                      settings.timeout_s)
                live = [w for w in self.timers if w.state in ("starting", "busy")]
                if not live and not compiling and not answers:
                    if measure_queue:
                        continue
                    break
                wait_for = 0.5
                if live:
                    wait_for = max(0.01, min(0.5, min(w.deadline for w in live) - time.monotonic()))
                ready = wait([w.conn for w in live] + [self._wake_r], timeout=wait_for)
                for worker in live:
                    if worker.conn in ready:
                        self._receive(worker, record, failed)
                now = time.monotonic()
                for worker in self.timers:
                    if worker.state == "busy" and now > worker.deadline:
                        index = worker.task_index
                        worker.kill()
                        record(index, failed(index, TIMEOUT,
                                             f"no result within {settings.timeout_s:g} s; worker killed"))
                    elif worker.state == "starting" and now > worker.deadline:
                        worker.kill()
                        self._start_failed(f"worker did not start within {settings.startup_timeout_s:g} s")
        finally:
            if self.compile_pool is not None:
                self.compile_pool.withdraw(owner)
        return [r for r in results if r is not None]

    def _receive(self, worker: _Worker, record, failed) -> None:
        """One message from a timing worker."""
        try:
            message = worker.conn.recv()
        except (EOFError, OSError):
            message = None
        if message is None:  # the process died
            if worker.process is not None:
                worker.process.join(timeout=5)
            reason = _exit_reason(worker.process.exitcode if worker.process else None)
            if worker.state == "busy":
                record(worker.task_index, failed(worker.task_index, RUNTIME_ERROR, reason))
            else:
                self._start_failed(reason)
            worker.kill()
        elif message["kind"] == "ready":
            worker.state = "idle"
            self.startups.append((worker.role, round(time.monotonic() - worker.started_at, 3)))
        elif message["kind"] == "failed":
            worker.kill()
            self._start_failed(message["error"], message.get("trace", ""))
        elif message["kind"] == "result":
            record(worker.task_index, Candidate.from_dict(message["payload"]))
            worker.task_index = None
            worker.state = "idle"
            if message.get("fatal"):
                worker.kill()

    def _start_failed(self, reason: str, trace: str = "") -> None:
        self.start_failures += 1
        if self.start_failures >= self.MAX_START_FAILURES:
            self.close()
            raise WorkerStartError(f"benchmark worker failed to start: {reason}\n{trace}".rstrip())

    def close(self) -> None:
        # Every worker is asked first, so that they all tear down at once, then each is
        # waited for (killed if still there after two seconds in all). A shared compile
        # pool is closed by its owner.
        for worker in self.timers:
            worker.request_stop()
        pool = self.compile_pool if self.owns_pool else None
        closing = None
        if pool is not None:
            closing = threading.Thread(target=pool.close, daemon=True)
            closing.start()
        deadline = time.monotonic() + 2.0
        for worker in self.timers:
            worker.stop(deadline)
        if closing is not None:
            closing.join()

    def __enter__(self) -> "LocalExecutor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
