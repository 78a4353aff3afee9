"""odd (1000x3000x777 fp16): where our aten::mm_aligned's time goes against Inductor's padded
path. In the suite (2026-11-30) Inductor's pick read 0.0166 ms in two runs (its pad of K,
then cuBLAS) and 0.032 in another (a Triton template on the unpadded operands); ours
(aten::mm_aligned ZERO_PAD=1: A and B copied into K-padded buffers, then cuBLAS) 0.0197.
In one process: ours at ZERO_PAD 1 and 0, Inductor's compiled torch.mm with its shape
padding forced on, and cuBLAS alone on operands padded beforehand; each one's kernels by
torch.profiler (the L2 flushed before each call) and its whole call by the tuner's timer
(events, and the graph mode the suite used for this shape).

PYTHONPATH=. python3 bench/odd_kernels.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import fresh_compile_caches  # noqa: E402

M, N, K = 1000, 3000, 777


def main() -> None:
    scratch = fresh_compile_caches("odd-kernels-")
    import torch
    import torch._inductor.config as config

    from autotune_cli.bench.timing import CudaTimer
    from autotune_cli.fingerprint import probe_device
    from autotune_cli.problem import make_problem
    from autotune_cli.settings import TimingPolicy
    from autotune_cli.templates import aten_aligned
    from autotune_cli.templates.base import Operands, empty_out
    from bench.common import POLICY, print_kernel_times

    config.force_disable_caches = True
    try:
        config.force_shape_pad = True
    except AttributeError:
        print("this torch has no force_shape_pad: Inductor pads as it decides")
    timer = CudaTimer(probe_device("cuda").l2_bytes)
    problem = make_problem(m=M, n=N, k=K, dtype="float16", device="cuda")
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    template = aten_aligned.AtenAlignedTemplate()
    cases = {}
    for zero_pad in (1, 0):
        params = template.full_params(problem, {"ZERO_PAD": zero_pad})
        ops = Operands(a=a, b=b, out=empty_out(problem, template.out_pitch(problem, params), torch.float16, "cuda"))
        run = template.build(problem, params, scratch)
        cases[f"ours ZERO_PAD={zero_pad}"] = (run, ops)
    compiled = torch.compile(lambda x, y: torch.mm(x, y), mode="max-autotune-no-cudagraphs", dynamic=False)
    compiled(a, b)
    cases["inductor (shape padding forced)"] = (lambda ops: compiled(ops.a, ops.b), Operands(a=a, b=b, out=None))
    a_pad = torch.zeros(M, 784, device="cuda", dtype=torch.float16)
    b_pad = torch.zeros(784, N, device="cuda", dtype=torch.float16)
    a_pad[:, :K] = a
    b_pad[:K] = b
    out = torch.empty(M, N, device="cuda", dtype=torch.float16)
    cases["cuBLAS alone on padded A, B (K 784)"] = (lambda ops: torch.mm(a_pad, b_pad, out=out), Operands(a=a, b=b, out=out))
    b_wide = torch.zeros(784, 3008, device="cuda", dtype=torch.float16)
    b_wide[:K, :N] = b
    cases["cuBLAS alone, B's rows 3008 apart (128 B)"] = (
        lambda ops: torch.mm(a_pad, b_wide[:, :N], out=out), Operands(a=a, b=b, out=out))
    cases["cuBLAS on A padded, B as it lies (K 777)"] = (
        lambda ops: torch.mm(a_pad[:, :K], b, out=out), Operands(a=a, b=b, out=out))
    from autotune_cli.templates import row_copy

    b_dst = torch.zeros(784, N, device="cuda", dtype=torch.float16)
    blocks = -(-N // row_copy.BLOCK)
    copies = {  # B's copy alone, three ways (profiler times below)
        "B copy by row (_copy_rows)": lambda: row_copy._copy_rows[(K * blocks,)](
            b, b_dst, N, N, 1, N, 1, blocks, BLOCK=row_copy.BLOCK, num_warps=4),
        "B copy as one run (_copy_run)": lambda: row_copy.copy_rows(b_dst[:K], b),
        "B copy by torch copy_": lambda: b_dst[:K].copy_(b),
    }
    try:  # whether the loads and stores are 16-byte ones, by the PTX
        for label, kernel in (("_copy_run", row_copy._copy_run.warmup(b, b_dst, K * N, BLOCK=row_copy.RUN_BLOCK,
                                                                       grid=(1,))),
                              ("_copy_rows", row_copy._copy_rows.warmup(b, b_dst, N, N, 1, N, 1, blocks,
                                                                        BLOCK=row_copy.BLOCK, grid=(1,)))):
            ptx = kernel.asm["ptx"]
            print(f"{label} PTX: ld.global.v4 {ptx.count('ld.global.v4')}, st.global.v4 {ptx.count('st.global.v4')},"
                  f" ld.global.b16 {ptx.count('ld.global.b16')}, st.global.b16 {ptx.count('st.global.b16')}")
    except Exception as exc:  # noqa: BLE001
        print(f"PTX not read: {type(exc).__name__}: {exc}")
    for name, fn in copies.items():
        b_dst.zero_()
        fn()
        torch.cuda.synchronize()
        print(f"{name}: exact {bool(torch.equal(b_dst[:K], b))}")
        print_kernel_times(fn, timer)
    reference = a.double() @ b.double()
    for name, (run, ops) in cases.items():
        got = run(ops)
        got = ops.out if got is None else got
        torch.cuda.synchronize()
        print(f"{name}: relative error {((got.double() - reference).norm() / reference.norm()).item():.2e}")
    graph = TimingPolicy(warmup=3, min_runs=50, max_runs=300, budget_ms=200.0, mode="graph")
    names = list(cases)
    events = {n: [] for n in names}
    graphs = {n: [] for n in names}
    for index in range(4):
        for name in names if index % 2 == 0 else names[::-1]:
            run, ops = cases[name]
            events[name].append(timer(lambda: run(ops), POLICY).median_ms)
            if not name.startswith("inductor"):
                graphs[name].append(timer.measure(run, ops, graph).median_ms)
    for name in names:
        g = f"{statistics.median(graphs[name]):.4f}" if graphs[name] else "-"
        print(f"{name:44s} events {statistics.median(events[name]):.4f} ms  graph {g} ms", flush=True)
    for name in names:
        run, ops = cases[name]
        print(f"== kernels of {name}")
        print_kernel_times(lambda: run(ops), timer)


if __name__ == "__main__":
    main()
