"""`LocalExecutor`: the executor (runner/__init__.py's `Executor` seam) that runs worker
processes on this host.

`LocalExecutor` runs worker processes on this host (runner/processes.py starts them):
  - timing workers: one per GPU for `cuda` (or several interpreter workers for `cpu`); each
    builds, verifies and times candidates;
  - on `cuda`, a compile pool (runner/compile_pool.py; its own, or one shared by the GPUs of
    the host): warm processes that compile Triton candidates ahead of the timing worker
    (without launching anything), so the GPU never waits on a compile that could have
    overlapped; the timing process then loads the binary from Triton's cache. Candidates
    are measured as their binaries arrive.
Each task gets a deadline; a worker that misses it is killed and replaced, and a worker that
dies takes only its current candidate with it. (Ray is not another executor: scaleout/ray.py
spreads whole problems over Ray actors, each of which runs an ordinary Tuner on a
LocalExecutor, so its RayTuner is a tuner, as MultiDeviceTuner is.)

Lent workers: in a run marked `shareable` (a search's first timing of its candidates, never
the re-timing or the confirmation beside cuBLAS), another executor's idle timing workers may
be lent to this one (`borrow`): another GPU of the same model whose own problems are done
(scaleout.local.MultiDeviceTuner). They take candidates like this executor's own, their results say
which device measured them (`Candidate.measured_on`; the search times those near the best
again on its own GPU), and they go back when the run ends.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections import deque
from dataclasses import replace
from multiprocessing.connection import wait
from typing import Callable, Sequence

from ..candidates.choices import KernelTemplateChoice
from ..hardware.device import DeviceInfo
from ..store.results import BUDGET_RAN_OUT, RUNTIME_ERROR, SKIPPED, TIMEOUT, Candidate
from ..settings import TimingPolicy, TuneSettings
from . import Executor, ExecutorStats, ResultCallback
from .compile_pool import CompilePool, compile_key
from .messages import COMPILE, FAILED, MEASURE, READY, RESULT, CompileAnswer, WorkerTask
from .processes import WorkerProcess, stop_all, worker_context

class WorkerStartError(RuntimeError):
    pass


def default_compile_workers(device: DeviceInfo) -> int:
    """Half the cores, at most 8: more compilers contend and compile fewer configs a second
    (bench/README.md, "Cold tuning")."""
    if device.device_type != "cuda":
        return 0
    return max(1, min(8, (os.cpu_count() or 2) // 2))


class LocalExecutor(Executor):
    """Worker processes on this host, started lazily and kept across problems."""

    MAX_START_FAILURES = 3

    def __init__(self, device: DeviceInfo, settings: TuneSettings, workers: int | None = None,
                 gpu_indices: Sequence[int] | None = None, compile_pool: CompilePool | None = None) -> None:
        self.device = device
        self.settings = settings
        self.switches = settings.measure.switches
        self.switches.check(device.device_type)  # a bad value is the user's one-line error, now
        self.ctx = worker_context(self.switches.start_method, device.device_type)
        self.startups: list[tuple[str, float]] = []  # (role, seconds to ready) per start
        self._ready_at: list[float] = []  # time.perf_counter() when each of those came up
        # (sent, done, compile seconds in the worker) per kernel the pool built for this
        # executor's requests, perf_counter times: what the tuner reports as a problem's
        # compile pipeline.
        self.compile_log: list[tuple[float, float, float]] = []
        plugins = tuple(settings.plugins)
        if device.device_type == "cuda":
            indices = list(gpu_indices) if gpu_indices is not None else [device.index]
        else:
            indices = [0] * (workers or settings.workers or self.default_workers(device))
        self.timers = [WorkerProcess(self.ctx, device, i, plugins, "measure", self.switches) for i in indices]
        self.owns_pool = compile_pool is None
        self._pool_devices = [replace(device, index=i) for i in indices]  # an own pool's
        if compile_pool is None:
            count = settings.compile_workers
            if count is None:
                count = default_compile_workers(device)
            compile_pool = self._own_pool(count) if count else None
        self.compile_pool = compile_pool
        self._wake_r, self._wake_w = multiprocessing.Pipe(duplex=False)  # the pool's answers ring here
        self.start_failures = 0
        # Other executors' timing workers lent to the run in progress, and how each lender
        # gets them back; `_shareable`: the run in progress takes them.
        self._lend_lock = threading.Lock()
        self._shareable = False
        self._borrowed: list[WorkerProcess] = []
        self._give_backs: list[tuple[list[WorkerProcess], Callable[[list[WorkerProcess]], None]]] = []
        self.lent_results = 0  # candidates lent workers measured for this executor, over its life

    @property
    def compilers(self) -> list[WorkerProcess]:
        return self.compile_pool.workers if self.compile_pool is not None else []

    @staticmethod
    def default_workers(device: DeviceInfo) -> int:
        if device.device_type == "cuda":
            return 1
        return max(1, min(4, os.cpu_count() or 1))

    def start(self) -> None:
        """Start every worker process now (they import torch and triton in parallel with
        whatever the caller does next)."""
        for worker in self.timers:
            if worker.state == "down":
                worker.start(self.settings.startup_timeout_s)
        pool = self._pool()
        if pool is not None:
            pool.start()

    def compiles_ahead(self) -> bool:
        """See Executor.compiles_ahead: on CUDA, where it has a compile pool."""
        return self.compile_pool is not None

    def prefetch(self, choices: Sequence[KernelTemplateChoice]) -> int:
        """See Executor.prefetch: the compile pool builds them once nothing else waits."""
        pool = self._pool()
        if pool is None:
            return 0
        asked = 0
        for choice in choices:
            if self._needs_compile(choice):
                pool.prefetch(compile_key(choice), self._task(choice, self.settings.seed, None, COMPILE))
                asked += 1
        return asked

    def _task(self, choice: KernelTemplateChoice, seed: int, policy: TimingPolicy | None,
              mode: str) -> WorkerTask:
        """A worker's task. `policy` None: the first timing MeasurePolicy gives the choice's
        problem (graph timing where its floor is tiny), as the tuner's search would."""
        if policy is None:
            policy = self.settings.measure.timing_for(choice.problem, self.device.device_type)
        return WorkerTask.for_choice(choice, mode, seed, str(self.settings.kernel_dir), policy)

    def _needs_compile(self, choice: KernelTemplateChoice) -> bool:
        return self.compile_pool is not None and choice.template.backend != "aten"

    def take_stats(self, since: float) -> ExecutorStats:
        """See Executor.take_stats."""
        log, self.compile_log = self.compile_log, []
        pool = self.compile_pool
        return ExecutorStats(
            startups=tuple(s for s, at in zip(self.startups, self._ready_at) if at >= since),
            compiles=tuple(c for c in log if c[0] >= since) if log else None,
            compile_pool=pool.describe() if pool is not None else None)

    def lendable(self) -> list[WorkerProcess]:
        """See Executor.lendable: a worker marked idle whose process has died is not lent."""
        return [w for w in self.timers if w.state == "idle" and w.alive()]

    def borrow(self, workers: list[WorkerProcess], give_back: Callable[[list[WorkerProcess]], None]) -> bool:
        """See Executor.borrow (and the module: lent workers)."""
        with self._lend_lock:
            if not self._shareable:
                return False
            self._borrowed.extend(workers)
            self._give_backs.append((list(workers), give_back))
        try:
            self._wake_w.send_bytes(b"\0")  # the run's loop may be waiting: it takes them now
        except (OSError, ValueError):
            pass
        return True

    def _timers_now(self) -> list[WorkerProcess]:
        with self._lend_lock:
            return self.timers + self._borrowed

    def _end_sharing(self) -> None:
        with self._lend_lock:
            self._shareable = False
            give_backs, self._give_backs, self._borrowed = self._give_backs, [], []
        for workers, give_back in give_backs:
            give_back(workers)

    def run(self, choices: Sequence[KernelTemplateChoice], on_result: ResultCallback | None = None,
            policy: TimingPolicy | None = None, deadline: float | None = None,
            shareable: bool = False) -> list[Candidate]:
        """Measure every choice; results in the order of `choices`. Triton choices go to the
        compile pool first and are measured as their binaries arrive. Past `deadline`
        (time.monotonic()), nothing new starts and what is left is recorded as skipped.
        `shareable`: other executors' idle timing workers may be lent to this run (`borrow`)."""
        with self._lend_lock:
            self._shareable = shareable
        try:
            return self._run(choices, on_result, policy, deadline)
        finally:
            self._end_sharing()

    def _run(self, choices, on_result, policy, deadline) -> list[Candidate]:
        settings = self.settings
        results: list[Candidate | None] = [None] * len(choices)
        measure_queue = deque(i for i, c in enumerate(choices) if not self._needs_compile(c))
        compiling = {i for i, c in enumerate(choices) if self._needs_compile(c)}
        compile_seconds: dict[int, float] = {}
        answers: deque[tuple[int, CompileAnswer]] = deque()  # from the pool's thread
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

        this_thread = threading.get_ident()

        def answered(index: int):
            def callback(answer: CompileAnswer) -> None:  # on the pool's thread, or on ours from submit
                answers.append((index, answer))
                if threading.get_ident() != this_thread:  # ours reads `answers` before it waits
                    try:
                        self._wake_w.send_bytes(b"\0")
                    except (OSError, ValueError):
                        pass
            return callback

        def take_answers() -> None:
            while self._wake_r.poll():
                self._wake_r.recv_bytes()
            while answers:
                index, answer = answers.popleft()
                if index not in compiling:
                    continue
                compiling.discard(index)
                if answer.pool_failed:
                    raise WorkerStartError(answer.error)
                if answer.closed:  # not the kernel's fault: tried again another time
                    record(index, failed(index, SKIPPED, answer.error))
                elif answer.ok:
                    compile_seconds[index] = answer.compile_s
                    if not answer.reused:
                        self.compile_log.append((answer.sent_at, answer.done_at, answer.compile_s))
                    measure_queue.append(index)
                else:
                    record(index, failed(index, answer.status, answer.error))

        pool = self._pool()
        try:
            for index in sorted(compiling):
                choice = choices[index]
                pool.submit(compile_key(choice),
                                         self._task(choice, settings.seed, policy, COMPILE),
                                         owner, answered(index))
            while True:
                timers = self._timers_now()  # this executor's, and any lent to this run
                if not (compiling or measure_queue or any(w.state == "busy" for w in timers)):
                    break
                take_answers()
                if deadline is not None and time.monotonic() > deadline:
                    # --budget ends the tune: what waits is skipped, and what runs is stopped
                    # (a lent worker goes back down; its owner starts it again)
                    if pool is not None:
                        pool.withdraw(owner)
                    for index in sorted(compiling) + list(measure_queue):
                        record(index, failed(index, SKIPPED, BUDGET_RAN_OUT))
                    compiling.clear()
                    measure_queue.clear()
                    for worker in timers:
                        if worker.state == "busy":
                            index = worker.task_index
                            worker.kill()
                            record(index, self._where(worker, failed(index, SKIPPED, BUDGET_RAN_OUT)))
                    break
                for worker in timers:
                    if worker.state == "down" and (measure_queue or compiling) and worker in self.timers:
                        worker.start(settings.startup_timeout_s)
                    if worker.state == "idle" and measure_queue:
                        index = measure_queue.popleft()
                        # One seed for every candidate: the timing worker keeps one problem's
                        # inputs and reference between its candidates (candidate.CandidateRunner).
                        try:
                            worker.assign(index, self._task(choices[index], settings.seed, policy, MEASURE),
                                          settings.timeout_s)
                        except (OSError, ValueError):  # it died while idle: the task goes back;
                            worker.kill()  # an own worker starts again, a lent one is dropped
                            measure_queue.appendleft(index)
                live = [w for w in timers if w.state in ("starting", "busy")]
                if not live and not compiling and not answers:
                    if measure_queue:
                        continue
                    break
                wait_for = 0.5
                if live:
                    wait_for = max(0.01, min(0.5, min(w.deadline for w in live) - time.monotonic()))
                if deadline is not None:
                    wait_for = max(0.01, min(wait_for, deadline - time.monotonic()))
                ready = wait([w.conn for w in live] + [self._wake_r], timeout=wait_for)
                for worker in live:
                    if worker.conn in ready:
                        self._receive(worker, record, failed)
                now = time.monotonic()
                for worker in timers:
                    if worker.state == "busy" and now > worker.deadline:
                        index = worker.task_index
                        worker.kill()
                        record(index, self._where(worker, failed(
                            index, TIMEOUT, f"no result within {settings.timeout_s:g} s; worker killed")))
                    elif worker.state == "starting" and now > worker.deadline:
                        worker.kill()
                        self._start_failed(f"worker did not start within {settings.startup_timeout_s:g} s")
        except BaseException:
            # A timing worker still busy would hand its result to the next run: stop it (a
            # lent one too: it goes back down, and its owner starts it again if it needs it).
            for worker in self._timers_now():
                if worker.state == "busy":
                    worker.kill()
            raise
        finally:
            if pool is not None:
                pool.withdraw(owner)
        return [r for r in results if r is not None]

    def _pool(self) -> CompilePool | None:
        """The compile pool; an own pool that was closed (by `close`, or after a failed
        start) is made anew, a shared one is its owner's business."""
        pool = self.compile_pool
        if pool is not None and pool.closed and self.owns_pool:
            pool = self.compile_pool = self._own_pool(len(pool))
        return pool

    def _own_pool(self, count: int) -> CompilePool:
        return CompilePool(self.ctx, self._pool_devices, count, tuple(self.settings.plugins),
                           self.settings.timeout_s, self.settings.startup_timeout_s, self.switches)

    def _where(self, worker: WorkerProcess, candidate: Candidate) -> Candidate:
        """A result (or failure) with the device that measured it, where that was a worker lent
        by another device's executor."""
        if worker in self.timers:
            return candidate
        return replace(candidate, measured_on=worker.device.index)

    def _receive(self, worker: WorkerProcess, record, failed) -> None:
        """One message from a timing worker."""
        message, reason = worker.receive()
        if message is None:  # the process died
            if worker.state == "busy":
                record(worker.task_index, self._where(worker, failed(worker.task_index, RUNTIME_ERROR, reason)))
            else:
                self._start_failed(reason)
            worker.kill()
        elif message.kind == READY:
            worker.state = "idle"
            self.start_failures = 0  # they count in a row
            self.startups.append((worker.role, round(time.monotonic() - worker.started_at, 3)))
            self._ready_at.append(time.perf_counter())
        elif message.kind == FAILED:
            worker.kill()
            self._start_failed(message.error, message.trace)
        elif message.kind == RESULT:
            candidate = self._where(worker, message.candidate)
            if candidate.measured_on is not None:
                self.lent_results += 1
            record(worker.task_index, candidate)
            worker.task_index = None
            worker.state = "idle"
            if message.fatal:
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
        pool = self.compile_pool if self.owns_pool else None
        closing = None
        if pool is not None:
            closing = threading.Thread(target=pool.close, daemon=True)
            closing.start()
        stop_all(self.timers)
        if closing is not None:
            closing.join()

    def __enter__(self) -> "LocalExecutor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
