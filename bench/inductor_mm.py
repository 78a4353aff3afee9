"""Inductor max-autotune on one mm, cold, in its own process: prints one JSON line with
its tune wall time, and its kernel's time beside torch.mm's (same timer as ours). With
OURS (a winner as the cache holds it, `{"uid": ..., "params": {...}}`), that kernel is
verified and timed in the same interleaved passes too: the three side by side in one
process, where the suite's other ratios are taken across two. The compiled function
allocates its output at each call (inside the timed graph: one address, warm in L2), so
torch.mm and ours do too in these passes, rather than writing into rotated copies.

PYTHONPATH=. python3 bench/inductor_mm.py M N K DTYPE [MODE] [OP] [BATCH] [LAYOUT] [TF32] [OURS]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def process_age_s() -> float:
    """Seconds since this process started (Linux), interpreter start-up included."""
    ticks = os.sysconf("SC_CLK_TCK")
    with open("/proc/self/stat") as handle:
        start_ticks = int(handle.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as handle:
        uptime = float(handle.read().split()[0])
    return uptime - start_ticks / ticks


def main() -> None:
    m, n, k = (int(x) for x in sys.argv[1:4])
    dtype_name = sys.argv[4]
    mode = sys.argv[5] if len(sys.argv) > 5 else "max-autotune-no-cudagraphs"
    op = sys.argv[6] if len(sys.argv) > 6 else "mm"
    batch = int(sys.argv[7]) if len(sys.argv) > 7 else 1
    layout = sys.argv[8] if len(sys.argv) > 8 else "nn"
    tf32 = len(sys.argv) > 9 and sys.argv[9] == "1"
    ours_winner = json.loads(sys.argv[10]) if len(sys.argv) > 10 else None
    scratch = tempfile.mkdtemp(prefix="inductor-bench-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(scratch, "inductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(scratch, "triton")
    import torch
    import torch._inductor.config as config

    from autotune_cli.runner.timing import CudaTimer
    from autotune_cli.hardware.device import probe_device
    from autotune_cli.problem import make_problem
    from bench.common import MEASURE, allocating, placed

    config.force_disable_caches = True
    torch.backends.cuda.matmul.allow_tf32 = tf32
    problem = make_problem(m=m, n=n, k=k, dtype=dtype_name, device="cuda", layout=layout,
                           batch=batch if op == "bmm" else None, bias="n" if op == "addmm" else None,
                           allow_tf32=tf32)
    from autotune_cli.runner.verify import check, make_operands, reference

    ops = make_operands(problem, 7, "cuda")
    if op == "mm":
        fn = torch.compile(lambda x, y: torch.mm(x, y), mode=mode, dynamic=False)
        call = lambda o: fn(o.a, o.b)  # noqa: E731
        anchor = lambda o: torch.mm(o.a, o.b)  # noqa: E731
    elif op == "addmm":
        fn = torch.compile(lambda c, x, y: torch.addmm(c, x, y), mode=mode, dynamic=False)
        call = lambda o: fn(o.bias, o.a, o.b)  # noqa: E731
        anchor = lambda o: torch.addmm(o.bias, o.a, o.b)  # noqa: E731
    else:
        fn = torch.compile(lambda x, y: torch.bmm(x, y), mode=mode, dynamic=False)
        call = lambda o: fn(o.a, o.b)  # noqa: E731
        anchor = lambda o: torch.bmm(o.a, o.b)  # noqa: E731
    torch.cuda.synchronize()
    started = time.perf_counter()
    from torch._inductor.utils import run_and_get_code

    out, sources = run_and_get_code(call, ops)
    torch.cuda.synchronize()
    tune_s = time.perf_counter() - started
    process_s = process_age_s()  # from the interpreter's start to the tuned kernel
    rel = check(problem, out, reference(problem, ops)).rel_error
    device = probe_device("cuda")
    timer = CudaTimer(device.l2_bytes)
    policy = MEASURE.timing_for(problem, "cuda")
    try:
        timer.measure(call, ops, policy)
    except Exception as exc:  # noqa: BLE001 - the compiled function's capture failed: time both by events
        print(f"graph timing failed ({type(exc).__name__}: {exc}); using events", file=sys.stderr)
        from dataclasses import replace

        policy = replace(policy, mode="events")
    inductor_ms, torch_ms, ours_ms = [], [], []
    runs = [(inductor_ms, call, ops), (torch_ms, anchor, ops)]
    ours = {}
    if ours_winner is not None:
        try:
            run, own = our_kernel(problem, ours_winner, ops, scratch)
            run = allocating(problem, run)
        except Exception as exc:  # noqa: BLE001 - Inductor's numbers still count
            ours["ours_error"] = f"{type(exc).__name__}: {exc}"[:300]
        else:
            ours["ours_ok"] = check(problem, own.out, reference(problem, ops)).ok
            runs.append((ours_ms, run, own))
    for round_index in range(6):  # as bench/common.py's time_many: the order reversed every other
        # pass, each pass's operands at addresses of its own (common.placed); every runnable
        # here makes its own output
        moved = placed(ops, round_index)
        for samples, runnable, _ in (runs if round_index % 2 == 0 else runs[::-1]):
            samples.append(timer.measure(runnable, moved, policy).median_ms)
        del moved
    if ours_ms:
        ours["ours_ms"] = statistics.median(ours_ms)
    print(json.dumps({"m": m, "n": n, "k": k, "dtype": dtype_name, "mode": mode, "op": op,
                      "tune_s": tune_s, "process_s": process_s, "inductor_ms": statistics.median(inductor_ms),
                      "torch_mm_ms": statistics.median(torch_ms), "rel_error": rel, "out_stride": list(out.stride()),
                      "timing": policy.mode, "pick": describe_pick("\n".join(sources), tuned_kernels()), **ours}))


def our_kernel(problem, winner: dict, ops, scratch: str):
    """The winner's kernel built here, with operands of its own (the output with the row
    pitch its template asks for, as the tune timed it), run once for the check."""
    from dataclasses import replace

    import torch

    from autotune_cli.templates.base import empty_out
    from bench.common import winner_kernel

    run = winner_kernel(problem, winner, os.path.join(scratch, "kernels"))
    own = replace(ops, out=empty_out(problem, run.out_pitch, ops.out.dtype, ops.out.device))
    own.out.fill_(float("nan"))
    run(own)
    torch.cuda.synchronize()
    return run, own


def tuned_kernels() -> list[str]:
    """Each of Inductor's Triton kernels in this process that runs one config (after its
    autotuning or coordinate descent), with that config: what a matmul Inductor lowered
    to a reduction (M = 1) runs."""
    import gc
    import warnings

    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    kernels = []
    tuners = []
    with warnings.catch_warnings():  # isinstance on a deprecated module attribute warns
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            try:
                if isinstance(obj, CachingAutotuner):
                    tuners.append(obj)
            except ReferenceError:  # a weak proxy whose object is gone
                continue
    for obj in tuners:
        if len(obj.launchers) == 1:
            config = obj.launchers[0].config
            name = getattr(obj.fn, "__name__", "kernel")
            kernels.append(f"{name} {config.kwargs} warps {config.num_warps} stages {config.num_stages}")
    return sorted(kernels)


def describe_pick(source: str, kernels: list[str] = ()) -> str:
    """What Inductor's generated code runs for the matmul: an extern call (cuBLAS), a
    template kernel with its block sizes, stages and warps, or else its own kernels with
    the configs they were tuned to (`kernels`, tuned_kernels)."""
    import re

    if re.search(r"extern_kernels\.(mm|addmm|bmm)\b", source):
        return "extern " + ",".join(sorted(set(re.findall(r"extern_kernels\.(\w+)", source))))
    names = sorted(set(re.findall(r"def (triton_tem_\w+)\(", source)))
    if not names and kernels:
        return "; ".join(kernels)
    blocks = dict(re.findall(r"\b(BLOCK_[MNK]|GROUP_M|NUM_SMS|EVEN_K)\s*:\s*tl\.constexpr\s*=\s*(\w+)", source))
    launch = dict(re.findall(r"\b(num_stages|num_warps)=(\d+)", source))
    return f"{','.join(names) or 'no template'} {blocks} {launch}"


if __name__ == "__main__":
    main()
