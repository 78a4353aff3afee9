"""Shared helpers for the GPU benchmark scripts: side-by-side timing in one process, by
the same method the tuner uses for the problem (events with L2 flush, or a CUDA graph over
rotating operand copies for tiny problems)."""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from autotune_cli.bench.timing import CudaTimer
from autotune_cli.bench.verify import check, make_operands, reference
from autotune_cli.fingerprint import probe_device
from autotune_cli.settings import TimingPolicy, TuneSettings
from autotune_cli.templates import get_template
from autotune_cli.templates.base import empty_out
from autotune_cli.tuner import timing_policy_for

POLICY = TimingPolicy(warmup=3, min_runs=50, max_runs=300, budget_ms=200.0)
LM_HEAD = (2048, 50257, 768)  # the suite's lm_head: M, N (GPT-2's vocabulary), K


def print_kernel_times(fn, timer: CudaTimer, calls: int = 20) -> None:
    """Each GPU kernel that `fn` runs, by torch.profiler over `calls` calls with the L2
    flushed before each (the flush's own kernel left out): its name (cut), calls and mean
    µs, one line each."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            timer.flush_buffer.zero_()
            fn()
        torch.cuda.synchronize()
    for event in prof.key_averages():
        total = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0)
        if total and "FillFunctor" not in event.key:
            print(f"  {event.key[:90]:90s} calls {event.count:3d} mean {total / max(event.count, 1):8.2f} us")


def time_and_profile_cases(cases: dict, timer: CudaTimer, width: int, rounds: int = 6) -> dict:
    """Zero-argument callables `cases` timed by `timer` (POLICY) in `rounds` passes, the order
    reversed every other pass; each one's median of its passes printed with the passes, then
    its kernels by the profiler (print_kernel_times), in order and once more in reverse.
    Returns each one's median ms."""
    samples = {name: [] for name in cases}
    names = list(cases)
    for index in range(rounds):
        for name in names if index % 2 == 0 else names[::-1]:
            samples[name].append(timer(cases[name], POLICY).median_ms)
    for name in names:
        print(f"{name:{width}s} {statistics.median(samples[name]):.4f} ms  (passes: "
              f"{', '.join(f'{s:.4f}' for s in samples[name])})", flush=True)
    for name in names + names[::-1]:
        print(f"== kernels of {name}")
        print_kernel_times(cases[name], timer)
    return {name: statistics.median(values) for name, values in samples.items()}


def fresh_compile_caches(prefix: str) -> str:
    """A new scratch folder, made Inductor's and Triton's cache folders for this process
    (call before torch is imported), so that Inductor autotunes and compiles afresh."""
    scratch = tempfile.mkdtemp(prefix=prefix)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(scratch, "inductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(scratch, "triton")
    return scratch


def lm_head_ours(kernel_dir: str):
    """The suite's lm_head (2048x50257x768 fp16: random A and B on the GPU) and our
    aten::mm_aligned ZERO_PAD=1 for it, into an output with the row pitch it asks for:
    (a, b, ops, run), `run(ops)` one call."""
    import torch

    from autotune_cli.problem import make_problem
    from autotune_cli.templates import aten_aligned
    from autotune_cli.templates.base import Operands

    m, n, k = LM_HEAD
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    problem = make_problem(m=m, n=n, k=k, dtype="float16", device="cuda")
    template = aten_aligned.AtenAlignedTemplate()
    params = template.full_params(problem, {"ZERO_PAD": 1})
    ops = Operands(a=a, b=b, out=empty_out(problem, template.out_pitch(problem, params), torch.float16, "cuda"))
    return a, b, ops, template.build(problem, params, kernel_dir)


def lm_head_beside_inductor(scratch: str):
    """What the lm_head scripts time side by side in one process (call after
    `fresh_compile_caches`): the tuner's timer, the suite's lm_head operands, our call (as
    `lm_head_ours`; `ours()` returns its output) and Inductor's max-autotune torch.mm, its
    caches off, compiled here once: (timer, a, b, ops, ours, inductor)."""
    import torch
    import torch._inductor.config as config

    config.force_disable_caches = True
    timer = CudaTimer(probe_device("cuda").l2_bytes)
    a, b, ops, run = lm_head_ours(scratch)
    compiled = torch.compile(lambda x, y: torch.mm(x, y), mode="max-autotune-no-cudagraphs", dynamic=False)
    compiled(a, b)

    def ours():
        run(ops)
        return ops.out

    return timer, a, b, ops, ours, lambda: compiled(a, b)


def relative_error(got, reference) -> float:
    """‖got − reference‖ / ‖reference‖, in float64."""
    return ((got.double() - reference).norm() / reference.norm()).item()


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
        self.settings = TuneSettings(device="cuda")

    def policy(self, problem) -> TimingPolicy:
        return timing_policy_for(problem, self.device, self.settings, base=POLICY)

    def anchor(self, problem):
        torch = self.torch
        torch.backends.cuda.matmul.allow_tf32 = problem.allow_tf32
        if problem.op == "mm":
            return lambda ops: torch.mm(ops.a, ops.b, out=ops.out)
        if problem.op == "addmm":
            return lambda ops: torch.addmm(ops.bias, ops.a, ops.b, out=ops.out)
        return lambda ops: torch.bmm(ops.a, ops.b, out=ops.out)

    def runnable(self, problem, winner: dict, kernel_dir: str):
        """The winner's kernel, carrying the output row pitch its template asks for
        (`out_pitch`), as the tuner timed it."""
        template = get_template(winner["uid"])
        run = template.build(problem, winner["params"], kernel_dir)
        run.out_pitch = template.out_pitch(problem, winner["params"])
        return run

    def time_many(self, problem, runs: list, seed: int = 1234, rounds: int = 6):
        """Median over `rounds` interleaved passes of each runnable's median time, the order
        reversed every other pass (A, B, C, then C, B, A, ...), so slow drift of clocks and
        whatever the previous runnable leaves behind hit all alike. (With three passes in one
        order, aten::addmm read 2.7% off torch.addmm, the same cuBLAS call.) Also verifies
        each. Each runs into an output with its `out_pitch` (contiguous where it has none)."""
        ops = make_operands(problem, seed, "cuda")
        ref = reference(problem, ops)
        own = [replace(ops, out=empty_out(problem, getattr(run, "out_pitch", None), ops.out.dtype, "cuda"))
               for run in runs]
        verdicts = []
        for run, run_ops in zip(runs, own):
            run_ops.out.fill_(float("nan"))
            run(run_ops)
            self.torch.cuda.synchronize()
            verdicts.append(check(problem, run_ops.out, ref))
        del ref
        policy = self.policy(problem)
        samples = [[] for _ in runs]
        for round_index in range(rounds):
            order = range(len(runs)) if round_index % 2 == 0 else reversed(range(len(runs)))
            for i in order:
                samples[i].append(self.timer.measure(runs[i], own[i], policy).median_ms)
        return [statistics.median(s) for s in samples], verdicts

    def time_winner(self, problem, winner: dict, kernel_dir: str, seed: int = 1234):
        """(ours ms, torch ms, verdict on ours)."""
        (ours, anchor), verdicts = self.time_many(
            problem, [self.runnable(problem, winner, kernel_dir), self.anchor(problem)], seed)
        return ours, anchor, verdicts[0]


def write_json(name: str, data) -> Path:
    path = out_dir() / name
    path.write_text(json.dumps(data, indent=1))
    return path


def now() -> float:
    return time.perf_counter()
