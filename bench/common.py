"""Shared helpers for the GPU benchmark scripts: side-by-side timing in one process."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from autotune_cli.bench.timing import CudaTimer
from autotune_cli.bench.verify import check, make_operands, reference
from autotune_cli.fingerprint import probe_device
from autotune_cli.settings import TimingPolicy
from autotune_cli.templates import get_template

POLICY = TimingPolicy(warmup=3, min_runs=50, max_runs=300, budget_ms=200.0)


def out_dir() -> Path:
    path = Path(os.environ.get("OUT", "bench_out"))
    path.mkdir(parents=True, exist_ok=True)
    return path


class SideBySide:
    """Times torch.mm (the anchor) and a chosen kernel with one timer in one process."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.device = probe_device("cuda")
        self.timer = CudaTimer(self.device.l2_bytes)

    def anchor(self, problem, ops):
        torch = self.torch
        torch.backends.cuda.matmul.allow_tf32 = problem.allow_tf32
        if problem.op == "mm":
            return lambda: torch.mm(ops.a, ops.b, out=ops.out)
        if problem.op == "addmm":
            return lambda: torch.addmm(ops.bias, ops.a, ops.b, out=ops.out)
        return lambda: torch.bmm(ops.a, ops.b, out=ops.out)

    def time_winner(self, problem, winner: dict, kernel_dir: str, seed: int = 1234):
        """(ours ms, torch ms, rel error of ours), interleaved A/B/A/B to share drift."""
        template = get_template(winner["uid"])
        run = template.build(problem, winner["params"], kernel_dir)
        ops = make_operands(problem, seed, "cuda")
        ref = reference(problem, ops)
        run(ops)
        self.torch.cuda.synchronize()
        verdict = check(problem, ops.out, ref)
        del ref
        ours_fn = lambda: run(ops)  # noqa: E731
        anchor_fn = self.anchor(problem, ops)
        ours, anchor = [], []
        for _ in range(3):
            ours.append(self.timer(ours_fn, POLICY).median_ms)
            anchor.append(self.timer(anchor_fn, POLICY).median_ms)
        return sorted(ours)[1], sorted(anchor)[1], verdict


def write_json(name: str, data) -> Path:
    path = out_dir() / name
    path.write_text(json.dumps(data, indent=1))
    return path


def now() -> float:
    return time.perf_counter()
