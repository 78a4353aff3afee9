"""Timing functions. One is injected into the worker per device; every candidate, aten and
Triton alike, is timed by the same one."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, replace
from typing import Callable

from ..settings import TimingPolicy


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float
    runs: int
    mode: str = "events"
    gave_up: bool = False  # stopped after the first runs: over `give_up_ms` (the median is theirs)


def gave_up(samples_ms: list[float], mode: str) -> Timing:
    """The timing of a candidate given up on after its first runs."""
    return replace(summarize(samples_ms, mode), gave_up=True)


def summarize(samples_ms: list[float], mode: str = "events") -> Timing:
    ordered = sorted(samples_ms)

    def quantile(q: float) -> float:
        pos = q * (len(ordered) - 1)
        low = int(pos)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)

    return Timing(statistics.median(ordered), quantile(0.2), quantile(0.8), len(ordered), mode)


def time_cpu(fn: Callable[[], None], policy: TimingPolicy,
             reset: Callable[[], None] | None = None, give_up_ms: float | None = None) -> Timing:
    """perf_counter around each run; runs until the budget or max_runs is spent. `reset`
    (the output's NaN fill) is called before every timed run, outside the clock: which run
    is the last is known only after it, and the caller checks the last one's output.
    `give_up_ms`: stop after the first run if it took longer (Timing.gave_up)."""
    for _ in range(policy.warmup):
        fn()
    samples: list[float] = []
    spent = 0.0
    while len(samples) < policy.max_runs:
        if reset is not None:
            reset()
        start = time.perf_counter()
        fn()
        elapsed = (time.perf_counter() - start) * 1e3
        samples.append(elapsed)
        spent += elapsed
        if give_up_ms is not None and len(samples) == 1 and elapsed > give_up_ms:
            return gave_up(samples, "perf_counter")
        if len(samples) >= policy.min_runs and spent >= policy.budget_ms:
            break
    return summarize(samples, "perf_counter")


def _operand_bytes(ops, with_out: bool = True) -> int:
    """The bytes the operands' elements span (each from its first element to its last, a
    pitched row's padding between them included): not their storages', which placed
    operands share (CandidateRunner.placed: one buffer, a placement's offset in it)."""
    from ..templates.base import elements_spanned

    total = 0
    for tensor in (ops.a, ops.b, ops.out if with_out else None, ops.bias):
        if tensor is not None and tensor.numel():
            total += elements_spanned(tensor) * tensor.element_size()
    return total


def clone_operands(ops, share_out: bool = False):
    """A copy of the operands with the same strides: clone keeps those of a dense tensor
    (A, B and the bias, row- or column-major), but makes a view of padded rows (an output
    with a template's `out_pitch`) contiguous, so the output is made with its pitch.
    `share_out`: the copy writes into `ops.out` itself."""
    from ..templates.base import Operands, empty_out_like

    def clone(tensor):
        return None if tensor is None else tensor.clone()

    out = ops.out if share_out else empty_out_like(ops.out).copy_(ops.out)
    return Operands(a=clone(ops.a), b=clone(ops.b), out=out,
                    bias=clone(ops.bias), scale_a=clone(ops.scale_a), scale_b=clone(ops.scale_b))


class ClockWarmer:
    """Brings the GPU's clocks up before a measurement that follows idle time.

    An idle GPU's clocks are a fraction of their rate under work: a kernel timed straight
    after a pause is timed partly on the way up. That happens to the first candidate of
    each problem (often aten::mm, timed while the Triton candidates still compile) and to
    any candidate after a compile stall, not to those timed back to back; such a reading
    was slow enough to flip a pick (bench/README.md, "Kernel speed").
    So where the GPU has been idle `idle_s` or longer, the runnable is launched for about
    `warm_ms` first, as triton.testing.do_bench warms up for 25 ms before every measurement."""

    MAX_LAUNCHES = 5000

    def __init__(self, idle_s: float = 0.05, warm_ms: float = 25.0, clock: Callable[[], float] = time.monotonic):
        self.idle_s = idle_s
        self.warm_ms = warm_ms
        self.clock = clock
        self.last_busy = -math.inf

    def warm(self, launch: Callable[[], None], per_run_ms: float) -> int:
        """Launch `launch` about warm_ms / per_run_ms times if the GPU has been idle; returns
        how many (0: it was busy a moment ago). The caller synchronizes."""
        if self.clock() - self.last_busy < self.idle_s:
            return 0
        count = min(self.MAX_LAUNCHES, max(1, math.ceil(self.warm_ms / max(per_run_ms, 1e-3))))
        for _ in range(count):
            launch()
        return count

    def busy(self) -> None:
        """The GPU has just finished work."""
        self.last_busy = self.clock()


def capture_graph(launch: Callable[[], None], warmup: int = 1, thread_local: bool = False):
    """A CUDA graph of what `launch()` queues, after `warmup` (at least one) runs of it on a
    side stream, as capture needs. `thread_local`: CUDA work of other threads stays legal
    while it captures (a compile's timing, beside other threads)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(max(warmup, 1)):
            launch()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local" if thread_local else "global"):
        launch()
    return graph


class CudaTimer:
    """Times a runnable on CUDA.

    events: CUDA events around each run, the L2 flushed (a buffer twice its size zeroed)
    before every run, then the GPU kept busy for about 50 µs more (`torch.cuda._sleep`)
    before the start event; median of the runs. The wait is there so that the time between
    the events is the GPU's: a runnable whose host side is slow to launch (a Triton launch
    from Python is tens of µs, more with the host's cores busy compiling) would otherwise
    leave the GPU idle after the start event and be charged for it (with the host's cores
    busy, a two-kernel winner read a quarter slow: bench/README.md, "Kernel speed").
    graph: for tiny problems, one CUDA graph holds launches over several copies of the
    inputs, together larger than the L2 (so each launch finds its data cold, as a
    flush would leave it), all writing one output (TimingPolicy.rotate_out), and the
    graph's time over the number of launches is one sample. Launch overhead is gone,
    which is the point for kernels of a few µs.
    """

    MAX_COPIES = 64
    BUSY_CYCLES = 100_000  # about 50 µs at a 2 GHz clock: covers a slow host launch

    def __init__(self, l2_bytes: int) -> None:
        import torch

        self.torch = torch
        self.l2_bytes = max(l2_bytes, 8 << 20)
        size = max(2 * l2_bytes, 64 << 20)
        self.flush_buffer = torch.empty(size // 4, dtype=torch.int32, device="cuda")
        self.spin = getattr(torch.cuda, "_sleep", None)  # a kernel that spins for N cycles
        self.warmer = ClockWarmer()

    def estimate_ms(self, fn: Callable[[], None], warmup: int) -> float:
        torch = self.torch
        for _ in range(max(warmup, 1)):
            fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if self.spin is not None:  # as before each timed run: the first launch's host side is
            self.spin(self.BUSY_CYCLES)  # not charged (the estimate may give a candidate up)
        start.record()
        for _ in range(3):
            fn()
        end.record()
        torch.cuda.synchronize()
        return max(start.elapsed_time(end) / 3, 1e-4)

    def __call__(self, fn: Callable[[], None], policy: TimingPolicy,
                 reset: Callable[[], None] | None = None, give_up_ms: float | None = None) -> Timing:
        """`reset` (the output's NaN fill) is queued before the last timed run, outside its
        events and before its L2 flush: the caller checks that run's output. `give_up_ms`:
        stop after the estimate (runs back to back on a warm L2: it reads fast, never slow)
        if it is over that (Timing.gave_up)."""
        torch = self.torch
        estimate = self.estimate_ms(fn, policy.warmup)
        if self.warmer.warm(fn, estimate):  # the estimate was taken on cold clocks: again
            estimate = self.estimate_ms(fn, 0)
        if give_up_ms is not None and estimate > give_up_ms:
            self.warmer.busy()
            return gave_up([estimate], "events")
        runs = int(min(policy.max_runs, max(policy.min_runs, policy.budget_ms / estimate)))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
        for i in range(runs):
            if reset is not None and i == runs - 1:
                reset()
            if policy.flush_l2:
                self.flush_buffer.zero_()
            if self.spin is not None:
                self.spin(self.BUSY_CYCLES)
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        self.warmer.busy()
        return summarize([s.elapsed_time(e) for s, e in zip(starts, ends)], "events")

    def measure(self, run, ops, policy: TimingPolicy, reset: Callable[[], None] | None = None,
                give_up_ms: float | None = None) -> Timing:
        if policy.mode == "graph":
            return self.graph(run, ops, policy, reset, give_up_ms)
        return self(lambda: run(ops), policy, reset, give_up_ms)

    def graph(self, run, ops, policy: TimingPolicy, reset: Callable[[], None] | None = None,
              give_up_ms: float | None = None) -> Timing:
        torch = self.torch
        rotated = _operand_bytes(ops, with_out=policy.rotate_out)
        copies = max(1, min(self.MAX_COPIES, math.ceil(2.5 * self.l2_bytes / max(rotated, 1))))
        sets = [ops] + [clone_operands(ops, share_out=not policy.rotate_out) for _ in range(copies - 1)]

        def every_set() -> None:
            for item in sets:
                run(item)

        graph = capture_graph(every_set, policy.warmup)
        graph.replay()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        per_replay = max(start.elapsed_time(end), 1e-4)
        warmed = self.warmer.warm(graph.replay, per_replay)
        if warmed:
            torch.cuda.synchronize()
        if give_up_ms is not None:  # one replay on warm clocks says enough (that one was on cold)
            reading = per_replay
            if warmed:
                start.record()
                graph.replay()
                end.record()
                torch.cuda.synchronize()
                reading = max(start.elapsed_time(end), 1e-4)
            if reading / copies > give_up_ms:
                self.warmer.busy()
                del graph
                return gave_up([reading / copies], f"graph×{copies}")
        replays = int(min(policy.max_runs, max(policy.min_runs, policy.budget_ms / per_replay)))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
        for i in range(replays):
            if reset is not None and i == replays - 1:  # the last replay writes it anew
                reset()
            starts[i].record()
            graph.replay()
            ends[i].record()
        torch.cuda.synchronize()
        self.warmer.busy()
        del graph
        return summarize([s.elapsed_time(e) / copies for s, e in zip(starts, ends)], f"graph×{copies}")
