"""Timing functions. One is injected into the worker per device; every candidate, aten and
Triton alike, is timed by the same one."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

from ..settings import TimingPolicy


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float
    runs: int


def summarize(samples_ms: list[float]) -> Timing:
    ordered = sorted(samples_ms)

    def quantile(q: float) -> float:
        pos = q * (len(ordered) - 1)
        low = int(pos)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)

    return Timing(statistics.median(ordered), quantile(0.2), quantile(0.8), len(ordered))


def time_cpu(fn: Callable[[], None], policy: TimingPolicy) -> Timing:
    """perf_counter around each run; runs until the budget or max_runs is spent."""
    for _ in range(policy.warmup):
        fn()
    samples: list[float] = []
    spent = 0.0
    while len(samples) < policy.max_runs:
        start = time.perf_counter()
        fn()
        elapsed = (time.perf_counter() - start) * 1e3
        samples.append(elapsed)
        spent += elapsed
        if len(samples) >= policy.min_runs and spent >= policy.budget_ms:
            break
    return summarize(samples)


class CudaTimer:
    """CUDA events around each run, with the L2 flushed (an L2-sized buffer zeroed) before
    every run so no candidate is timed on a warm cache; median of the runs."""

    def __init__(self, l2_bytes: int) -> None:
        import torch

        self.torch = torch
        size = max(2 * l2_bytes, 64 << 20)
        self.flush_buffer = torch.empty(size // 4, dtype=torch.int32, device="cuda")

    def __call__(self, fn: Callable[[], None], policy: TimingPolicy) -> Timing:
        torch = self.torch
        for _ in range(max(policy.warmup, 1)):
            fn()
        torch.cuda.synchronize()
        # Estimate the run time to size the number of runs to the budget.
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(3):
            fn()
        end.record()
        torch.cuda.synchronize()
        estimate = max(start.elapsed_time(end) / 3, 1e-3)
        runs = int(min(policy.max_runs, max(policy.min_runs, policy.budget_ms / estimate)))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
        for i in range(runs):
            if policy.flush_l2:
                self.flush_buffer.zero_()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return summarize([s.elapsed_time(e) for s, e in zip(starts, ends)])
