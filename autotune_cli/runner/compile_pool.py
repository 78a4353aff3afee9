"""The compile pool: warm processes that compile Triton candidates ahead of the timing
workers, so that a GPU never waits on a compile that could have overlapped.

One pool serves every device of a host that has the same GPU model (scaleout/local.py shares it;
a lone `LocalExecutor` owns one). A kernel is compiled once however many devices ask for it:
requests carry a key (`compile_key`) that says which binary they need, a request for a key
already queued or running waits on that compile, and a key already built is answered at
once. The binary lands in Triton's cache, where every timing process finds it. Were a key
ever too coarse, the timing process would compile what it misses itself: slower, never
wrong. A kernel that several devices wait for is compiled before those only one waits for
(`_shared` ahead of `_queue`, each first come first served): problems that differ only in
size share their binaries, and otherwise a second device's first problem would wait for its
kernels behind the first device's whole list.

Each request's answer comes through a callback, called from the pool's own thread, with a
`CompileAnswer` (runner/messages.py): built (with the perf_counter times of the compile that
built it; `reused` where it was built for an earlier request or ahead of need, `prefetch`),
or failed (`status`, `error`), `pool_failed` when no compile can be had from the pool any
more, `closed` when the pool was closed first (not the kernel's fault).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import deque
from dataclasses import replace
from multiprocessing import Pipe
from multiprocessing.connection import wait
from typing import Any, Callable, Hashable, Sequence

from ..hardware.device import DeviceInfo
from ..store.results import TIMEOUT
from ..settings import Switches
from .messages import COMPILED, FAILED, READY, CompileAnswer, WorkerTask
from .processes import WorkerProcess, stop_all

Callback = Callable[[CompileAnswer], None]

MAX_START_FAILURES = 3
EARLY_DEATH_S = 5.0  # a process that dies this soon after coming up counts as a failed start


def compile_key(choice) -> tuple:
    """What decides a Triton candidate's binary: its rendered source (which holds whatever the
    problem fixes in the text, e.g. EVEN_K or a split-K's K per split), its full parameters
    (warps, stages, launch constexprs), and what Triton specializes on in the problem's
    arguments (dtype, layout, op, bias, a batch, which sizes are multiples of 16 or equal to
    1). Problems that differ only in sizes beyond that share one binary: kernels are named by
    their text and sizes are runtime arguments."""
    p = choice.problem
    # the sizes, and for a batch its strides (M*K, K*N, M*N), which Triton specializes too;
    # values past 2**31 get 64-bit arguments
    dims = (p.m, p.n, p.k) + ((p.m * p.k, p.k * p.n, p.m * p.n) if p.b > 1 else ())
    try:
        source = choice.source
    except Exception:  # noqa: BLE001 - a template that cannot render fails in its worker instead
        source = None
    digest = hashlib.sha256(source.encode()).hexdigest()[:20] if source else None
    return (choice.identity, digest, p.dtype,
            p.layout, p.op, p.bias, p.b > 1, p.allow_tf32,
            tuple(d % 16 == 0 for d in dims), tuple(d == 1 for d in dims),
            any(d * p.b >= 2**31 for d in dims))


class _Job:
    __slots__ = ("key", "task", "waiters")

    def __init__(self, key: Hashable, task: WorkerTask) -> None:
        self.key = key
        self.task = task
        self.waiters: list[tuple[object, Callback]] = []  # (owner, callback)

    def owners(self) -> int:
        """How many distinct owners wait for it."""
        return len({id(owner) for owner, _ in self.waiters})


class CompilePool:
    """Compile processes for one GPU model, shared by the devices of a host.

    Only the pool's thread starts, feeds, stops and reaps the processes; other threads touch
    the queue and the job table under the lock. Whatever goes wrong in that thread fails the
    pool (every waiter is told, `pool_failed`), it never dies silently."""

    def __init__(self, ctx, devices: Sequence[DeviceInfo], count: int, plugins: tuple[str, ...],
                 timeout_s: float, startup_timeout_s: float, switches: Switches) -> None:
        self.timeout_s = timeout_s
        self.startup_timeout_s = startup_timeout_s
        # Spread over the devices: each process brings CUDA up on one of them.
        self.workers = [WorkerProcess(ctx, devices[n % len(devices)], devices[n % len(devices)].index,
                                      plugins, "compile", switches) for n in range(count)]
        self.startups: list[float] = []  # seconds to ready, per process start
        # How its CUDA processes compile, per start: "offline" (no CUDA: runner/offline_compile.py)
        # or "cuda: <why not offline>".
        self.offline_modes: dict[str, int] = {}
        self.compiled = 0  # kernels built (not answered from `_built`)
        self._lock = threading.Lock()
        self._queue: deque[_Job] = deque()  # queued, one owner waiting
        self._shared: deque[_Job] = deque()  # queued, several owners waiting: compiled first
        self._ahead: deque[_Job] = deque()  # asked for ahead of need (`prefetch`): compiled last
        self._jobs: dict[Hashable, _Job] = {}  # queued or being compiled
        self._running: dict[int, _Job] = {}  # id(worker) -> its job
        self._built: dict[Hashable, CompileAnswer] = {}  # key -> the answer that built it
        self._wake_r, self._wake_w = Pipe(duplex=False)
        self._thread: threading.Thread | None = None
        self._closed = False
        self._stopped_on_close = False  # close() stopped the processes (else the thread does)
        # Per process: failed starts in a row (a start that comes up resets it; a process that
        # dies within EARLY_DEATH_S of coming up counts as one) and when to try again.
        self._failures: dict[int, int] = {id(w): 0 for w in self.workers}
        self._retry_at: dict[int, float] = {id(w): 0.0 for w in self.workers}
        self._ready_at: dict[int, float] = {}
        self._ever_started: set[int] = set()
        self.failure: str | None = None

    def __len__(self) -> int:
        return len(self.workers)

    def describe(self) -> dict[str, Any]:
        """For the cache entry: how many processes, and how they compile (offline or why not)."""
        with self._lock:
            return {"processes": len(self.workers), "modes": dict(self.offline_modes)}

    @property
    def closed(self) -> bool:
        return self._closed

    # -- used by executors (any thread) -----------------------------------------------------

    def start(self) -> None:
        """Start the thread that starts and feeds the processes (their imports then run
        while the caller goes on)."""
        with self._lock:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(target=self._run, daemon=True, name="autotune-compile-pool")
            self._thread.start()

    def submit(self, key: Hashable, task: WorkerTask, owner: object, callback: Callback) -> None:
        """Ask for the binary `key` (built from `task`); `callback(answer)` once it is there
        (at once, on the caller's thread, when it is known already or the pool is closed)."""
        self.start()
        answer = None
        with self._lock:
            if self._closed:
                answer = CompileAnswer.pool_closed()
            elif self.failure is not None:
                answer = CompileAnswer.pool_failure(self.failure)
            elif key in self._built:
                answer = replace(self._built[key], reused=True)
            else:
                job = self._jobs.get(key)
                if job is None:
                    job = self._jobs[key] = _Job(key, task)
                    self._queue.append(job)
                elif job in self._ahead:  # prefetched, needed now: in its turn with the rest
                    self._ahead.remove(job)
                    self._queue.append(job)
                job.waiters.append((owner, callback))
                if job.owners() == 2 and job in self._queue:
                    self._queue.remove(job)  # another device waits for it too: ahead
                    self._shared.append(job)
        if answer is not None:
            callback(answer)
        else:
            self._wake()

    def prefetch(self, key: Hashable, task: WorkerTask) -> None:
        """Compile `key` when nothing asked for is waiting: a list's next problem, while this
        one is timed (its binary is then in Triton's cache, and `_built`, when asked for)."""
        self.start()
        with self._lock:
            if self._closed or self.failure is not None or key in self._built or key in self._jobs:
                return
            job = self._jobs[key] = _Job(key, task)
            self._ahead.append(job)
        self._wake()

    def withdraw(self, owner: object) -> None:
        """Forget `owner`'s requests: a queued compile nobody waits for any more is dropped
        (one already running finishes and is kept)."""
        with self._lock:
            for job in list(self._jobs.values()):
                job.waiters = [(o, cb) for o, cb in job.waiters if o is not owner]
            for queue in (self._shared, self._queue):
                dropped = [job for job in queue if not job.waiters]
                for job in dropped:
                    queue.remove(job)
                    self._jobs.pop(job.key, None)

    def close(self) -> None:
        """Stop the thread and the processes; whoever still waits is told the pool closed
        (a transient answer: the executor records SKIPPED, which is tried again later)."""
        with self._lock:
            self._closed = True
            thread = self._thread
        self._wake()
        if thread is not None:
            thread.join(timeout=30)
        if thread is None or not thread.is_alive():  # else the thread stops them on its way out
            self._stopped_on_close = True
            stop_all(self.workers)
        self._fail_all(CompileAnswer.pool_closed())
        for end in (self._wake_r, self._wake_w):
            end.close()

    # -- the pool's thread ------------------------------------------------------------------

    def _wake(self) -> None:
        try:
            self._wake_w.send_bytes(b"\0")
        except (OSError, ValueError):
            pass

    def _finish(self, job: _Job, answer: CompileAnswer) -> None:
        with self._lock:
            if self._jobs.get(job.key) is job:
                del self._jobs[job.key]
            if answer.ok:
                self._built[job.key] = answer
            waiters, job.waiters = job.waiters, []
        for _, callback in waiters:
            callback(answer)

    def _fail_all(self, answer: CompileAnswer) -> None:
        with self._lock:
            jobs = list(self._jobs.values())
            self._jobs.clear()
            self._queue.clear()
            self._shared.clear()
            self._ahead.clear()
            self._running.clear()
            waiters = [cb for job in jobs for _, cb in job.waiters]
            for job in jobs:
                job.waiters = []
        for callback in waiters:
            callback(answer)

    def _fail(self, reason: str) -> None:
        """No compile can be had from this pool any more: tell every waiter, now and later
        (first: nothing after this may keep them waiting), then stop the processes."""
        with self._lock:
            self.failure = reason
        self._fail_all(CompileAnswer.pool_failure(reason))
        for worker in self.workers:
            try:
                worker.kill()
            except Exception:  # noqa: BLE001
                pass

    def _start_failed(self, worker, reason: str) -> None:
        """One failed start (or an early death) of `worker`: it waits longer before the next
        try; the pool fails only when every process has failed MAX_START_FAILURES times in a
        row and none is up."""
        key = id(worker)
        self._failures[key] += 1
        self._retry_at[key] = time.monotonic() + 0.5 * self._failures[key]
        up = any(w.state in ("starting", "idle", "busy") for w in self.workers)
        if not up and all(n >= MAX_START_FAILURES for n in self._failures.values()):
            self._fail(f"compile worker failed to start: {reason}")

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - a dead thread must not leave waiters hanging
            self._fail(f"compile pool stopped: {type(exc).__name__}: {exc}")
        if self._closed and not self._stopped_on_close:  # close() gave up waiting for us
            stop_all(self.workers)

    def _pop_job(self) -> _Job | None:
        """The next job to compile (under the lock): one that several owners wait for first."""
        for queue in (self._shared, self._queue, self._ahead):
            if queue:
                return queue.popleft()
        return None

    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                want = len(self._shared) + len(self._queue) + len(self._ahead)
            # Processes are started outside the lock (a start may wait on the forkserver): all
            # at first (a warm pool), later again when there is work, after any back-off.
            now = time.monotonic()
            for worker in self.workers:
                key = id(worker)
                if (self.failure is None and worker.state == "down" and now >= self._retry_at[key]
                        and (want or key not in self._ever_started)):
                    self._ever_started.add(key)
                    try:
                        worker.start(self.startup_timeout_s)
                    except Exception as exc:  # noqa: BLE001 - no process to be had now: counted, retried
                        worker.kill()
                        self._start_failed(worker, f"{type(exc).__name__}: {exc}")
                if worker.state == "idle" and want:
                    with self._lock:
                        job = self._pop_job()
                        if job is not None:
                            self._running[id(worker)] = job
                    if job is None:
                        continue
                    want -= 1
                    try:
                        worker.assign(0, job.task, self.timeout_s)
                    except OSError:  # it died while idle: the job goes back, the process is replaced
                        with self._lock:
                            self._running.pop(id(worker), None)
                            (self._shared if job.owners() > 1 else self._queue if job.waiters
                             else self._ahead).appendleft(job)
                        want += 1
                        self._died(worker)
            watched = [w for w in self.workers if w.state in ("starting", "busy", "idle")]
            timeout = 0.5
            deadlines = [w.deadline for w in watched if w.state in ("starting", "busy")]
            if deadlines:
                timeout = max(0.01, min(0.5, min(deadlines) - time.monotonic()))
            ready = wait([w.conn for w in watched] + [self._wake_r], timeout=timeout)
            if self._wake_r in ready:
                while self._wake_r.poll():
                    self._wake_r.recv_bytes()
            for worker in watched:
                if worker.conn in ready:
                    self._receive(worker)
            now = time.monotonic()
            for worker in self.workers:
                if worker.state == "busy" and now > worker.deadline:
                    with self._lock:
                        job = self._running.pop(id(worker), None)
                    worker.kill()
                    if job is not None:
                        self._finish(job, CompileAnswer.failure(
                            f"no compile within {self.timeout_s:g} s; worker killed", TIMEOUT))
                elif worker.state == "starting" and now > worker.deadline:
                    worker.kill()
                    self._start_failed(worker, f"did not start within {self.startup_timeout_s:g} s")

    def _died(self, worker, reason: str = "worker died") -> None:
        """A process that was up is gone: replaced when there is work; one that dies soon
        after coming up counts as a failed start (it would otherwise be restarted for ever)."""
        early = time.monotonic() - self._ready_at.get(id(worker), 0.0) < EARLY_DEATH_S
        worker.kill()
        if early:
            self._start_failed(worker, reason)

    def _receive(self, worker) -> None:
        message, reason = worker.receive()
        if message is None:  # the process died
            state = worker.state
            with self._lock:
                job = self._running.pop(id(worker), None)
            if state == "starting":
                worker.kill()
                self._start_failed(worker, reason)
            else:
                self._died(worker, reason)
            if state == "busy" and job is not None:
                self._finish(job, CompileAnswer.failure(f"{reason} while compiling"))
        elif message.kind == READY:
            worker.state = "idle"
            self._failures[id(worker)] = 0
            self._ready_at[id(worker)] = time.monotonic()
            self.startups.append(round(time.monotonic() - worker.started_at, 3))
            mode = message.compile_mode
            if mode is not None:
                with self._lock:
                    self.offline_modes[mode] = self.offline_modes.get(mode, 0) + 1
        elif message.kind == FAILED:
            worker.kill()
            self._start_failed(worker, message.error)
        elif message.kind == COMPILED:
            with self._lock:
                job = self._running.pop(id(worker), None)
            sent_at = worker.assigned_at
            worker.task_index = None
            worker.state = "idle"
            if message.fatal:
                worker.kill()
            answer = message.compiled
            if answer.ok:
                self.compiled += 1
                answer = replace(answer, sent_at=sent_at, done_at=time.perf_counter())
            if job is not None:
                self._finish(job, answer)
