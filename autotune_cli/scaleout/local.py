"""Scale out: spread PROBLEMS over every GPU of a host (here) or over a Ray cluster
(scaleout/ray.py, imported only for `--executor ray`).

On one host, `MultiDeviceTuner` owns one `Tuner` per device, each with its own
`LocalExecutor` pinned to that GPU (the worker maps the index into the parent's
CUDA_VISIBLE_DEVICES); the devices of one GPU model share one compile pool, which builds
each kernel once for all of them (runner/compile_pool.py). One thread per device
takes the next problem from a shared queue (most candidates first: `schedule_order`) and
tunes it; the work itself runs in the executors' subprocesses. Each device is probed on its
own, so each result carries the fingerprint of the GPU that measured it: GPUs with
different names never share an entry. The cache file is shared through its lock (every
writer re-reads and merges).

On the CPU, `--gpus N` makes N worker groups stand in for N devices.

The tail: a device whose problems are done while another's is still in its first round (the
search's first timing of every candidate) lends its idle timing worker to that round
(`LocalExecutor.borrow`) and gets it back when the round ends, rather than wait. Lending goes
only between GPUs of one model (one fingerprint, one compile pool). Each result a lent worker
measured says where (`measured_on`), and the re-timing after that round, on the problem's own
GPU, takes every such result within 10% of the best (search/base.retime_contenders), so the
pick rests on the problem's own GPU (a deadline that cuts the re-timing short leaves the
lent readings as they are).

Faults: a device whose workers cannot be (re)started is retired and its unfinished
problem goes back on the queue for the survivors (a problem is tried on at most
MAX_ATTEMPTS devices); what a device finished is in the cache already. A problem that
fails on its own (it does not fit, no candidates left) is reported failed and the device
goes on. The run ends with every problem tuned or reported failed.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import replace
from typing import Callable, Sequence

from ..runner import Executor
from ..runner.compile_pool import CompilePool
from ..runner.executor import LocalExecutor, WorkerStartError, default_compile_workers
from ..runner.processes import worker_context
from ..errors import Interrupted, Terminated, UserError
from ..hardware.device import DeviceInfo, cuda_device_count, probe_device
from ..problem import GemmProblem
from ..settings import TuneSettings
from ..tune.tuner import TuneListener, Tuner
from .common import MAX_ATTEMPTS, LockedListener, ProblemResult

STOP_WAIT_S = 5.0  # how long a stopped tune of several problems waits for the tunes in flight to save
LEND_POLL_S = 0.05  # how often an idle device looks for a round to lend its worker to


def local_devices(settings: TuneSettings) -> list[DeviceInfo]:
    """The devices of this host to tune on: GPUs 0..N-1 of the visible ones, each probed
    on its own; on the CPU, N worker groups (one device, N slots)."""
    if settings.device == "cpu":
        count = settings.gpus or 1
        cores = os.cpu_count() or 1
        if count > cores:  # each group is a tuner with its own workers: one per core at most
            raise UserError(f"--gpus {count} on the CPU: at most {cores} worker groups "
                            f"(one per core)")
        cpu = probe_device("cpu")
        return [replace(cpu, index=i) for i in range(count)]
    visible = cuda_device_count()
    count = settings.gpus or visible
    if visible == 0:
        raise UserError("--device cuda: no CUDA GPU is visible (use --device cpu)")
    if count > visible:
        raise UserError(f"--gpus {count}: only {visible} GPU(s) visible")
    return [probe_device("cuda", i) for i in range(count)]


def schedule_order(problems: Sequence[GemmProblem], devices: int,
                   work: Callable[[GemmProblem], float]) -> list[int]:
    """The order devices take problems in: the model's on one device; on several, the most
    `work` first (ties in the model's order), so that the last problems handed out are the
    short ones and the devices finish close together."""
    order = list(range(len(problems)))
    if devices > 1:
        costs = [work(p) for p in problems]
        order.sort(key=lambda i: -costs[i])  # stable
    return order


def candidate_count(settings: TuneSettings, device: DeviceInfo) -> Callable[[GemmProblem], float]:
    """A problem's work, as the number of candidates it will time (what a tune's time goes
    with, whatever the sizes: bench/README.md, "Two GPUs against one"); 0 where its
    candidates cannot be listed (the tune will say why). A problem the cache answers counts
    its candidates all the same: it is handed out early and takes a moment. The exhaustive
    search times at most its compile cap of any space that large: each problem counts the
    cap, without listing its thousands of configs (0.5 s a problem on a slow host, which
    the tune lists again)."""
    from ..candidates.choices import get_choices
    from ..search.exhaustive import COMPILE_CAP

    if settings.search == "exhaustive":
        return lambda problem: float(COMPILE_CAP)

    def work(problem: GemmProblem) -> float:
        try:
            return float(len(get_choices(problem, device, settings).choices))
        except Exception:  # noqa: BLE001 - the tune reports it
            return 0.0

    return work


def slot_settings(settings: TuneSettings, device: DeviceInfo, slots: int) -> TuneSettings:
    """One device's share of the host on the CPU: the interpreter workers are split between
    the worker groups. (On CUDA each device has one timing process and the compile pool is
    shared: see `shared_compile_pools`.)"""
    if device.device_type == "cuda":
        return settings
    total = settings.workers or LocalExecutor.default_workers(device)
    return replace(settings, workers=max(1, total // slots))


def shared_compile_pools(settings: TuneSettings, devices: Sequence[DeviceInfo]) -> dict[str, CompilePool]:
    """One compile pool per GPU model among `devices`, shared by the devices of that model:
    a kernel that several devices need is compiled once. Its size: `--compile-workers` if
    given, else one device's usual pool per GPU, as far as half the host's cores go. Its
    processes compile without bringing CUDA up (runner/offline_compile.py), so a larger pool
    comes up as fast as a small one and finishes sooner; where each process brings CUDA up
    (the stand-in refused: the pool's `offline_modes`), a larger pool comes up later and
    finishes no sooner (bench/README.md, "Two GPUs against one"). GPUs of different models
    never share one (their binaries differ)."""
    pools: dict[str, CompilePool] = {}
    by_name: dict[str, list[DeviceInfo]] = {}
    for device in devices:
        by_name.setdefault(device.name, []).append(device)
    for name, group in by_name.items():
        count = settings.compile_workers
        if count is None:
            per_device = default_compile_workers(group[0])
            count = min(per_device * len(group), max(per_device, (os.cpu_count() or 2) // 2))
        if count:
            switches = settings.measure.switches
            ctx = worker_context(switches.start_method, group[0].device_type)
            pools[name] = CompilePool(ctx, group, count, tuple(settings.plugins), settings.timeout_s,
                                      settings.startup_timeout_s, switches)
    return pools


class MultiDeviceTuner:
    """Tunes problems on several devices of this host at once, one problem per device."""

    def __init__(self, settings: TuneSettings, listener: TuneListener | None = None,
                 devices: Sequence[DeviceInfo] | None = None,
                 executor_factory: Callable[[DeviceInfo, TuneSettings], Executor] | None = None) -> None:
        self.settings = settings
        self.listener = LockedListener(listener or TuneListener())
        self.devices = list(devices) if devices is not None else local_devices(settings)
        n = len(self.devices)
        self.pools = shared_compile_pools(settings, self.devices) if executor_factory is None else {}

        def local_executor(device: DeviceInfo, device_settings: TuneSettings) -> LocalExecutor:
            return LocalExecutor(device, device_settings, compile_pool=self.pools.get(device.name))

        self.tuners = [Tuner(slot_settings(settings, d, n), self.listener, executor_factory or local_executor,
                             device=d) for d in self.devices]
        self.alive = [True] * n
        self.slot_errors: dict[int, str] = {}
        self.lent_rounds = [0] * n  # rounds of other devices each device lent its workers to

    def tune_all(self, problems: Sequence[GemmProblem],
                 on_result: Callable[[ProblemResult], None] | None = None) -> list[ProblemResult]:
        results = [ProblemResult(i, p) for i, p in enumerate(problems)]
        queue = deque(schedule_order(problems, len(self.tuners), candidate_count(self.settings, self.devices[0])))
        cond = threading.Condition()
        state = {"in_flight": 0}

        report_lock = threading.Lock()

        def finish(result: ProblemResult) -> None:
            if on_result is not None:
                with report_lock:
                    on_result(result)

        def drive(slot: int) -> None:
            tuner = self.tuners[slot]
            while True:
                with cond:
                    while not queue and state["in_flight"] and self.alive[slot]:
                        # nothing queued: lend this device's timing worker to another's round
                        # (blocks until it is back), else wait; a failing device may hand
                        # its problem back meanwhile
                        cond.release()
                        try:
                            lent = self.lend_idle_workers(slot)
                        finally:
                            cond.acquire()
                        if not lent:
                            cond.wait(timeout=LEND_POLL_S)
                    if not queue or not self.alive[slot]:
                        return
                    index = queue.popleft()
                    state["in_flight"] += 1
                result = results[index]
                result.attempts += 1
                began = time.perf_counter()
                try:
                    outcome = tuner.tune(result.problem)
                except (WorkerStartError, OSError, EOFError) as exc:  # the device is lost
                    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                    with cond:
                        self.alive[slot] = False
                        self.slot_errors[slot] = reason
                        state["in_flight"] -= 1
                        survivors = any(self.alive)
                        if survivors and result.attempts < MAX_ATTEMPTS:
                            queue.appendleft(index)
                            again = True
                        else:
                            result.error = f"device {slot} ({self.devices[slot].name}) failed: {reason}"
                            again = False
                        cond.notify_all()
                    if not again:
                        finish(result)
                    tuner.close()
                    return
                except Exception as exc:  # noqa: BLE001 - the problem failed, not the device
                    result.error = str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"
                    result.slot, result.device = slot, self.devices[slot].name
                else:
                    result.outcome = outcome
                    result.slot, result.device = slot, self.devices[slot].name
                result.span = (began, time.perf_counter())
                with cond:
                    state["in_flight"] -= 1
                    cond.notify_all()
                finish(result)

        threads = [threading.Thread(target=drive, args=(slot,), daemon=True,
                                    name=f"autotune-device-{slot}") for slot in range(len(self.tuners))]
        try:  # a signal may arrive while the threads are still being started
            for thread in threads:
                thread.start()
            for thread in threads:
                while thread.is_alive():
                    thread.join(timeout=0.5)
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: stop, save, say what was saved
            self._stop(queue, cond, threads)
            raise self._interrupted(results, exc) from None
        except BaseException:
            self._stop(queue, cond, threads)
            raise
        lost = "; ".join(f"device {s}: {e}" for s, e in sorted(self.slot_errors.items()))
        for result in results:
            if result.outcome is None and result.error is None:
                result.error = f"no device left to tune it ({lost or 'all failed'})"
                finish(result)
        return results

    def _stop(self, queue: deque, cond: threading.Condition, threads: list[threading.Thread]) -> None:
        """No new problem starts; every device's workers are closed, so that each tune in
        flight ends and saves what it finished (its tuner's own save, within STOP_WAIT_S)."""
        with cond:
            queue.clear()
            self.alive = [False] * len(self.alive)
            cond.notify_all()
        self.close()
        waited = time.monotonic() + STOP_WAIT_S
        for thread in threads:
            if thread.ident is not None:  # started
                thread.join(timeout=max(0.0, waited - time.monotonic()))

    @staticmethod
    def _interrupted(results: list[ProblemResult], exc: KeyboardInterrupt) -> Interrupted:
        """The one line for a tune of several problems stopped by a signal."""
        name, code = ("SIGTERM", 143) if isinstance(exc, Terminated) else ("SIGINT", 130)
        done = sum(1 for r in results if r.outcome is not None)
        return Interrupted(f"interrupted ({name}): {done} of {len(results)} problem(s) tuned and saved, "
                           f"the finished results of the others kept; run the same command again to resume",
                           code)

    def lend_idle_workers(self, slot: int) -> bool:
        """Lend device `slot`'s idle timing workers to a round of another device of the same
        GPU model that takes them (its first measurement of a problem's candidates), and wait
        until they are back: True; False where no round takes them now."""
        mine = self.tuners[slot].started_executor
        workers = mine.lendable() if mine is not None else []
        if not workers:
            return False
        for other, tuner in enumerate(self.tuners):
            if other == slot or not self.alive[other] or self.devices[other].name != self.devices[slot].name:
                continue
            borrower = tuner.started_executor
            back = threading.Event()
            if borrower is not None and borrower.borrow(workers, lambda _, back=back: back.set()):
                back.wait()
                self.lent_rounds[slot] += 1
                return True
        return False

    def close(self) -> None:
        """Close every device's workers and the compile pools at once: each process takes a
        moment to tear CUDA down."""
        closers = [threading.Thread(target=closer, daemon=True)
                   for closer in [t.close for t in self.tuners] + [p.close for p in self.pools.values()]]
        for thread in closers:
            thread.start()
        for thread in closers:
            thread.join()

    def __enter__(self) -> "MultiDeviceTuner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
