"""The executor seam: submit candidates for a problem, receive results.

`LocalExecutor` runs a pool of spawned worker processes on this host: one per GPU for
`cuda`, or several interpreter workers for `cpu`. Each candidate gets a deadline; a worker
that misses it is killed and replaced, and a worker that dies takes only its current
candidate with it. Another executor (Ray, say) implements the same two methods.
"""

from __future__ import annotations

import multiprocessing
import signal
import time
from collections import deque
from dataclasses import asdict
from multiprocessing.connection import wait
from typing import Any, Callable, Protocol, Sequence

from ..choices import KernelTemplateChoice
from ..fingerprint import DeviceInfo
from ..results import RUNTIME_ERROR, TIMEOUT, Candidate
from ..settings import TuneSettings
from .worker import worker_main

ResultCallback = Callable[[int, Candidate], None]


class Executor(Protocol):
    def run(self, choices: Sequence[KernelTemplateChoice], on_result: ResultCallback | None = None
            ) -> list[Candidate]: ...

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
    def __init__(self, ctx, device: DeviceInfo, gpu_index: int, plugins: tuple[str, ...]) -> None:
        self.ctx = ctx
        self.device = device
        self.gpu_index = gpu_index
        self.plugins = plugins
        self.process = None
        self.conn = None
        self.state = "down"  # down | starting | idle | busy
        self.deadline = 0.0
        self.task_index: int | None = None
        self.task_started = 0.0

    def start(self, startup_timeout: float) -> None:
        parent, child = self.ctx.Pipe()
        self.process = self.ctx.Process(
            target=worker_main,
            args=(child, self.device.device_type, self.gpu_index, self.plugins, self.device.l2_bytes),
            daemon=True, name=f"autotune-worker-{self.device.device_type}{self.gpu_index}",
        )
        self.process.start()
        child.close()
        self.conn = parent
        self.state = "starting"
        self.deadline = time.monotonic() + startup_timeout

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

    def stop(self) -> None:
        if self.conn is not None and self.state in ("idle", "busy"):
            try:
                self.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        if self.process is not None:
            self.process.join(timeout=2)
        self.kill()


class LocalExecutor:
    """A pool of worker processes on this host, started lazily and kept across problems."""

    MAX_START_FAILURES = 3

    def __init__(self, device: DeviceInfo, settings: TuneSettings, workers: int | None = None) -> None:
        self.device = device
        self.settings = settings
        count = workers or settings.workers or self.default_workers(device)
        self.ctx = multiprocessing.get_context("spawn")
        self.workers = [_Worker(self.ctx, device, device.index, tuple(settings.plugins))
                        for _ in range(count)]
        self.start_failures = 0

    @staticmethod
    def default_workers(device: DeviceInfo) -> int:
        if device.device_type == "cuda":
            return 1
        import os

        return max(1, min(4, os.cpu_count() or 1))

    def _task(self, choice: KernelTemplateChoice, seed: int) -> dict[str, Any]:
        return {
            "uid": choice.uid,
            "problem": choice.problem.to_dict(),
            "config": choice.config_dict,
            "seed": seed,
            "kernel_dir": str(self.settings.kernel_dir),
            "timing": asdict(self.settings.timing_policy),
        }

    def run(self, choices: Sequence[KernelTemplateChoice], on_result: ResultCallback | None = None
            ) -> list[Candidate]:
        results: list[Candidate | None] = [None] * len(choices)
        pending = deque(range(len(choices)))
        settings = self.settings

        def record(index: int, candidate: Candidate) -> None:
            results[index] = candidate
            if on_result is not None:
                on_result(index, candidate)

        def failed(index: int, status: str, reason: str) -> Candidate:
            choice = choices[index]
            return Candidate(uid=choice.uid, params=choice.params, status=status, error=reason)

        while pending or any(w.state == "busy" for w in self.workers):
            for worker in self.workers:
                if worker.state == "down" and pending:
                    worker.start(settings.startup_timeout_s)
                if worker.state == "idle" and pending:
                    index = pending.popleft()
                    worker.conn.send(self._task(choices[index], settings.seed + index))
                    worker.state = "busy"
                    worker.task_index = index
                    worker.task_started = time.monotonic()
                    worker.deadline = worker.task_started + settings.timeout_s
            live = [w for w in self.workers if w.state in ("starting", "busy")]
            if not live:
                continue
            now = time.monotonic()
            wait_for = max(0.01, min(w.deadline for w in live) - now)
            ready = wait([w.conn for w in live], timeout=min(wait_for, 1.0))
            for worker in live:
                if worker.conn not in ready:
                    continue
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
                elif message["kind"] == "failed":
                    worker.kill()
                    self._start_failed(message["error"], message.get("trace", ""))
                elif message["kind"] == "result":
                    record(worker.task_index, Candidate.from_dict(message["candidate"]))
                    worker.task_index = None
                    worker.state = "idle"
                    if message.get("fatal"):
                        worker.kill()
            now = time.monotonic()
            for worker in self.workers:
                if worker.state == "busy" and now > worker.deadline:
                    index = worker.task_index
                    worker.kill()
                    record(index, failed(index, TIMEOUT,
                                         f"no result within {settings.timeout_s:g} s; worker killed"))
                elif worker.state == "starting" and now > worker.deadline:
                    worker.kill()
                    self._start_failed(f"worker did not start within {settings.startup_timeout_s:g} s")
        return [r for r in results if r is not None]

    def _start_failed(self, reason: str, trace: str = "") -> None:
        self.start_failures += 1
        if self.start_failures >= self.MAX_START_FAILURES:
            self.close()
            raise WorkerStartError(f"benchmark worker failed to start: {reason}\n{trace}".rstrip())

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()

    def __enter__(self) -> "LocalExecutor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
