"""Where a cold tune's seconds go (issue 6): worker start-up by start method, compile
throughput by pool size and by threads, and whole cold tunes of one GEMM by variant, each
in a fresh child process with a fresh Triton cache (the parent of each has torch imported
and CUDA up, as Inductor's measurement in bench/inductor_mm.py does).

PYTHONPATH=. python3 bench/gpu_startup.py [--problems 4096,8x4096,odd] [--variants ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PROBLEMS = {
    "4096": dict(m=4096, n=4096, k=4096, dtype="bfloat16"),
    "8x4096": dict(m=8, n=4096, k=4096, dtype="bfloat16"),
    "odd": dict(m=1000, n=3000, k=777, dtype="float16"),
}


def child_tune(problem_name: str, method: str, compile_workers: int) -> dict:
    import torch

    from autotune_cli.problem import make_problem
    from autotune_cli.settings import TuneSettings
    from autotune_cli.tuner import Tuner

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    problem = make_problem(device="cuda", **PROBLEMS[problem_name])
    settings = TuneSettings(device="cuda", cache_dir=Path(tempfile.mkdtemp()), force=True,
                            start_method=method, compile_workers=compile_workers)
    started = time.perf_counter()
    with Tuner(settings) as tuner:
        outcome = tuner.tune(problem)
        wall = time.perf_counter() - started
        startups = list(tuner.executor.startups)
    entry = outcome.entry
    cands = entry["candidates"]
    first = [c["first_run_s"] for c in cands if c.get("first_run_s") is not None]
    comp = sorted(c["compile_s"] for c in cands if c.get("compile_s") is not None)
    timeline = entry.get("timeline", [])
    return {"wall_s": wall, "candidates": len(cands), "winner": entry["winner"]["uid"],
            "winner_ms": entry["winner"]["ms"],
            "measure_ready_s": [s for r, s in startups if r == "measure"],
            "compile_ready_s": sorted(s for r, s in startups if r == "compile"),
            "first_result_s": timeline[0][2] if timeline else None,
            "last_result_s": timeline[-1][2] if timeline else None,
            "sum_first_run_s": sum(first), "max_first_run_s": max(first) if first else None,
            "median_compile_s": comp[len(comp) // 2] if comp else None}


def child_threads(problem_name: str, threads: int, limit: int) -> dict:
    """Compile the default space's Triton choices in this one process with a thread pool."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from autotune_cli.bench.verify import empty_operands
    from autotune_cli.choices import get_choices
    from autotune_cli.fingerprint import probe_device
    from autotune_cli.problem import make_problem
    from autotune_cli.settings import TuneSettings

    torch.zeros(1, device="cuda")
    problem = make_problem(device="cuda", **PROBLEMS[problem_name])
    settings = TuneSettings(device="cuda", cache_dir=Path(tempfile.mkdtemp()))
    choices = [c for c in get_choices(problem, probe_device("cuda"), settings).choices
               if c.template.backend != "aten"][:limit]
    kernel_dir = str(settings.kernel_dir)

    def compile_one(choice):
        run = choice.template.build(problem, choice.template.full_params(problem, choice.config_dict), kernel_dir)
        run.warmup(empty_operands(problem, "cuda"))

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(compile_one, choices))
    wall = time.perf_counter() - started
    return {"threads": threads, "configs": len(choices), "wall_s": wall, "configs_per_s": len(choices) / wall}


def run_child(args: list[str]) -> dict:
    env = {**os.environ, "TRITON_CACHE_DIR": tempfile.mkdtemp(prefix="triton-cold-"),
           "PYTHONPATH": os.pathsep.join(sys.path)}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True,
                          env=env, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": proc.stderr[-1500:], "args": args}
    out = json.loads(lines[-1])
    out["process_s"] = time.perf_counter() - started
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, *rest = sys.argv[2:]
        if kind == "tune":
            print(json.dumps(child_tune(rest[0], rest[1], int(rest[2]))))
        else:
            print(json.dumps(child_threads(rest[0], int(rest[1]), int(rest[2]))))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", default="4096,8x4096,odd")
    parser.add_argument("--variants", default="spawn:8,forkserver:8,forkserver:4,forkserver:12")
    parser.add_argument("--threads", default="1:6,8:40")
    args = parser.parse_args()
    from bench.common import out_dir

    rows = []
    for spec in filter(None, args.threads.split(",")):
        threads, limit = spec.split(":")
        row = run_child(["threads", "4096", threads, limit])
        rows.append({"kind": "threads", **row})
        print(json.dumps(rows[-1]), flush=True)
    for name in args.problems.split(","):
        for variant in args.variants.split(","):
            method, workers = variant.split(":")
            row = run_child(["tune", name, method, workers])
            rows.append({"kind": "tune", "problem": name, "variant": variant, **row})
            print(json.dumps(rows[-1]), flush=True)
    (out_dir() / "gpu_startup.json").write_text(json.dumps(rows, indent=1))
    print()
    print(f"{'problem':8} {'variant':14} {'wall s':>7} {'cands':>5} {'timer rdy':>9} {'compilers rdy':>15}"
          f" {'1st res':>7} {'sum load':>8} {'med comp':>8}  winner")
    for r in rows:
        if r["kind"] == "threads":
            print(f"threads {r.get('threads')}: {r.get('configs')} configs in {r.get('wall_s', float('nan')):.1f} s"
                  f" = {r.get('configs_per_s', float('nan')):.2f}/s {r.get('error', '')[:300]}")
            continue
        if "error" in r:
            print(f"{r['problem']:8} {r['variant']:14} ERROR {r['error'][-300:]}")
            continue
        ready = r["compile_ready_s"]
        print(f"{r['problem']:8} {r['variant']:14} {r['wall_s']:7.1f} {r['candidates']:5d}"
              f" {max(r['measure_ready_s'] or [0]):9.2f} {(min(ready) if ready else 0):7.2f}-{(max(ready) if ready else 0):<7.2f}"
              f" {r['first_result_s'] or 0:7.2f} {r['sum_first_run_s']:8.2f} {r['median_compile_s'] or 0:8.2f}"
              f"  {r['winner']} {r['winner_ms']:.4f}")


if __name__ == "__main__":
    main()
