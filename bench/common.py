"""Shared helpers for the GPU benchmark scripts: side-by-side timing in one process, by
the same method the tuner uses for the problem (events with L2 flush, or a CUDA graph over
rotating operand copies for tiny problems)."""

from __future__ import annotations

import itertools
import json
import os
import re
import statistics
import time
from dataclasses import replace
from pathlib import Path

from autotune_cli.runner.timing import CudaTimer
from autotune_cli.runner.verify import check, make_operands, reference
from autotune_cli.hardware.device import probe_device
from autotune_cli.settings import MeasurePolicy, TimingPolicy
from autotune_cli.templates import get_template
from autotune_cli.templates.base import empty_out

# Where side-by-side runnables write their output (SideBySide.time_many's `output`).
OUTPUTS = ("shared", "rotated", "allocated")
POLICY = TimingPolicy(warmup=3, min_runs=50, max_runs=300, budget_ms=200.0)
# The tuner's policy with longer runs: the same choice of graph timing for tiny problems.
MEASURE = MeasurePolicy.for_device("cuda", timing=POLICY)


def out_dir() -> Path:
    path = Path(os.environ.get("OUT", "bench_out"))
    path.mkdir(parents=True, exist_ok=True)
    return path


class SideBySide:
    """Times torch.mm (the anchor) and chosen kernels with one timer in one process."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.device = probe_device("cuda")
        self.timer = CudaTimer(self.device.l2_bytes)
        self.placements = itertools.count()  # each round's own (time_many)

    def policy(self, problem) -> TimingPolicy:
        return MEASURE.timing_for(problem, "cuda")

    def anchor(self, problem):
        torch = self.torch
        torch.backends.cuda.matmul.allow_tf32 = problem.allow_tf32
        if problem.op == "scaled_mm":
            return scaled_mm_call(problem)
        if problem.op == "mm":
            return lambda ops: torch.mm(ops.a, ops.b, out=ops.out)
        if problem.op == "addmm":
            return lambda ops: torch.addmm(ops.bias, ops.a, ops.b, out=ops.out)
        return lambda ops: torch.bmm(ops.a, ops.b, out=ops.out)

    def runnable(self, problem, winner: dict, kernel_dir: str):
        return winner_kernel(problem, winner, kernel_dir)

    def time_many(self, problem, runs: list, seed: int = 1234, rounds: int = 6, output: str = "shared"):
        """Median over `rounds` interleaved passes of each runnable's median time, the order
        reversed every other pass (A, B, C, then C, B, A, ...), so slow drift of clocks and
        whatever the previous runnable leaves behind hit all alike. Also verifies each. Each
        runs into an output with its `out_pitch` (contiguous where it has none); a runnable
        that returns an output of its own (a compiled function's) is checked on that one.
        `output`, one of OUTPUTS, is where the runnables that write into an output write in
        graph timing: "shared", one output for every copy of the inputs (the tuner's way);
        "rotated", an output per copy (TimingPolicy.rotate_out); "allocated", a new one at
        each call (`allocating`), as a compiled function does."""
        if output not in OUTPUTS:
            raise ValueError(f"output {output!r}: one of {', '.join(OUTPUTS)}")
        ops = make_operands(problem, seed, "cuda")
        ref = reference(problem, ops)
        own = [replace(ops, out=empty_out(problem, getattr(run, "out_pitch", None), ops.out.dtype, "cuda"))
               for run in runs]
        verdicts, timed = [], []
        for run, run_ops in zip(runs, own):
            run_ops.out.fill_(float("nan"))
            result = run(run_ops)
            self.torch.cuda.synchronize()
            returned = isinstance(result, self.torch.Tensor) and result.data_ptr() != run_ops.out.data_ptr()
            verdicts.append(check(problem, result if returned else run_ops.out, ref))
            timed.append(allocating(problem, run) if output == "allocated" and not returned else run)
        runs = timed
        del ref
        policy = replace(self.policy(problem), rotate_out=output == "rotated")
        samples = [[] for _ in runs]
        for round_index in range(rounds):
            order = range(len(runs)) if round_index % 2 == 0 else reversed(range(len(runs)))
            moved = self.placed(problem, ops, runs)
            for i in order:
                samples[i].append(self.timer.measure(runs[i], moved[i], policy).median_ms)
            del moved
        return [statistics.median(s) for s in samples], verdicts

    def placed(self, problem, ops, runs) -> list:
        """Operands for one round at the next placement of this process (`placed`), the same
        for every runnable, each with its own output (its `out_pitch`)."""
        base = placed(ops, next(self.placements))
        return [replace(base, out=empty_out(problem, getattr(run, "out_pitch", None), ops.out.dtype, "cuda"))
                for run in runs]

    def time_winner(self, problem, winner: dict, kernel_dir: str, seed: int = 1234):
        """(ours ms, torch ms, verdict on ours)."""
        (ours, anchor), verdicts = self.time_many(
            problem, [self.runnable(problem, winner, kernel_dir), self.anchor(problem)], seed)
        return ours, anchor, verdicts[0]


def placed(ops, index: int):
    """A copy of `ops` at addresses of placement `index` + 1's own: A, B and the bias copied
    as the tuner places them (CandidateRunner.placed), the output left as it is. A cuBLAS
    call's time moves by up to 10% with where its operands lie (process_spread.py,
    "Placement"): rounds at one placement read one of them."""
    from autotune_cli.runner.candidate import CandidateRunner

    return CandidateRunner.placed(ops, index + 1, out=False)


def parse_tile(text: str) -> dict:
    """A Triton config written BMxBNxBK s<stages> w<warps> [k<split>] [f] (k: SPLIT_K; f: the
    FIXED_NK twin), GROUP_M 8, as the benchmarks' --cases take it."""
    match = re.fullmatch(r"(\d+)x(\d+)x(\d+)s(\d+)w(\d+)(?:k(\d+))?(f?)", text)
    if match is None:
        raise SystemExit(f"config {text!r} is not BMxBNxBK s<stages> w<warps> [k<split>] [f]")
    bm, bn, bk, stages, warps, split, fixed = match.groups()
    config = {"BLOCK_M": int(bm), "BLOCK_N": int(bn), "BLOCK_K": int(bk), "GROUP_M": 8,
              "num_stages": int(stages), "num_warps": int(warps)}
    if split:
        config["SPLIT_K"] = int(split)
    if fixed:
        config["FIXED_NK"] = 1
    return config


def tile_label(config: dict) -> str:
    """A Triton config as parse_tile reads it, spaced: BMxBNxBK s<stages> w<warps> [k<split>] [f]."""
    return (f"{config['BLOCK_M']}x{config['BLOCK_N']}x{config['BLOCK_K']} "
            f"s{config['num_stages']} w{config['num_warps']}"
            + (f" k{config['SPLIT_K']}" if "SPLIT_K" in config else "")
            + (" f" if config.get("FIXED_NK") else ""))


def winner_kernel(problem, winner: dict, kernel_dir: str):
    """The winner's kernel (a cache entry's `{"uid", "params"}`), carrying the output row
    pitch its template asks for (`out_pitch`), as the tuner timed it."""
    template = get_template(winner["uid"])
    run = template.build(problem, winner["params"], kernel_dir)
    run.out_pitch = template.out_pitch(problem, winner["params"])
    return run


def allocating(problem, run):
    """`run` writing into an output it allocates at each call (with the row pitch it asks
    for, `out_pitch`, where it has one), as a compiled function does: inside a timed CUDA
    graph, one address, warm in L2."""
    pitch = getattr(run, "out_pitch", None)
    return lambda o: run(replace(o, out=empty_out(problem, pitch, o.out.dtype, o.out.device)))


def scaled_mm_call(problem):
    """torch._scaled_mm (cuBLASLt) of a scaled_mm problem, into ops.out."""
    import torch

    out_dtype, fast = getattr(torch, problem.result_dtype), problem.fast_accum
    return lambda ops: torch._scaled_mm(ops.a, ops.b, scale_a=ops.scale_a, scale_b=ops.scale_b, bias=ops.bias,
                                        out_dtype=out_dtype, use_fast_accum=fast, out=ops.out)


def write_json(name: str, data) -> Path:
    path = out_dir() / name
    path.write_text(json.dumps(data, indent=1))
    return path


def now() -> float:
    return time.perf_counter()
