"""Decode GEMMs (M <= 16, bfloat16) against the HBM floor, torch.mm and Inductor.

1. Tune the list with `autotune mm --from`, --chunk problems per process, fresh cache:
   triton::gemv alone (its default configs, what the heuristic offers), and with --every
   every template too.
2. In this process, with the tuner's timer (bench/common.py: a CUDA graph of launches over
   rotating operand copies larger than the L2, order alternated over rounds): the gemv
   winner, torch.mm (cuBLAS), Inductor's pick (torch.compile max-autotune-no-cudagraphs of
   torch.mm, compiled here; --no-inductor leaves it out) and, with --every, autotune's
   winner over every template; each verified against float64. "x floor" divides by
   bytes / 4.3 TB/s (the H200's HBM).
3. Eager wall time per call from Python (a loop of calls, then a sync): autotune_cli's
   dispatcher on the gemv cache, torch.mm, the compiled function.

PYTHONPATH=. python3 bench/gemv_decode.py [--shapes 1x4096x4096,8x4096x4096] [--nn-shapes ...]
    [--every] [--no-inductor] [--inductor-budget 150]

Shapes are MxNxK; layout nt is the weight stored [n, k], as nn.Linear keeps it.
Writes $OUT/gemv_decode.json (or bench_out/).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotune_cli.hardware.roofline import hbm_seconds  # noqa: E402

SHAPES = "1x4096x4096,8x4096x4096,16x14336x4096,1x4096x14336,1x14336x4096,4x4096x4096,8x14336x4096"
NN_SHAPES = "1x4096x4096,8x4096x4096"


def tune(entries: list[dict], cache: str, extra: list[str]) -> list[dict]:
    shapes_file = Path(tempfile.mkdtemp()) / "shapes.json"
    shapes_file.write_text(json.dumps(entries))
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
    began = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "autotune_cli", "mm", "--from", str(shapes_file),
                           "--device", "cuda", "--json", *extra], env=env, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(proc.stderr[-2000:])
    print(f"tuned {len(entries)} problems ({' '.join(extra)}) in {time.perf_counter() - began:.1f} s", flush=True)
    return json.loads(proc.stdout)["problems"]


def inductor_runnable(problem):
    """Inductor's pick for torch.mm on this problem, compiled now, as (runnable into a new
    output, seconds the compile took)."""
    import torch

    fn = torch.compile(lambda x, y: torch.mm(x, y), mode="max-autotune-no-cudagraphs", dynamic=False)
    from autotune_cli.runner.verify import make_operands

    ops = make_operands(problem, 7, "cuda")
    began = time.perf_counter()
    fn(ops.a, ops.b)
    torch.cuda.synchronize()
    return (lambda o: fn(o.a, o.b)), fn, time.perf_counter() - began


def eager_wall_us(fn, a, b, calls: int = 200, rounds: int = 7) -> float:
    """Wall time per call of a loop of `calls` calls and the sync after it; median round."""
    import torch

    for _ in range(20):
        fn(a, b)
    torch.cuda.synchronize()
    walls = []
    for _ in range(rounds):
        began = time.perf_counter()
        for _ in range(calls):
            fn(a, b)
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - began) / calls * 1e6)
    return statistics.median(walls)


def _cell(row: dict, label: str, key: str = "kernel_us") -> str:
    value = row[key].get(label)
    if value is None:
        return "-"
    bad = key == "kernel_us" and not row["verified"].get(label, True)
    return f"{value:.2f}" + (" (wrong)" if bad else "")


def table_header(every: bool) -> str:
    return ("| problem | floor us | gemv us | x floor | torch.mm us | Inductor us | gemv / Inductor"
            + (" | autotune us | autotune winner" if every else "")
            + " | eager us: autotune_cli.mm / torch.mm / Inductor | gemv config |\n"
            + "|---|---|---|---|---|---|---" + ("|---|---" if every else "") + "|---|---|")


def table_row(row: dict) -> str:
    gemv_us, ind_us = row["kernel_us"].get("gemv"), row["kernel_us"].get("inductor")
    ratio = f"{gemv_us / ind_us:.2f}" if gemv_us and ind_us else "-"
    x_floor = f"{gemv_us / row['floor_us']:.2f}" if gemv_us else "-"
    params = row["gemv"]["params"] if row["gemv"] else {}
    config = "-"
    if params:
        form = "dot " if params.get("DOT") else "each " if params.get("REDUCE_EACH") else "fma "
        keys = ("BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps", "num_stages")
        config = form + " ".join(f"{k}={params[k]}" for k in keys if k in params) \
            + (" fused" if params.get("FUSED_REDUCE") else "")
    extra = ""
    if row.get("every"):
        extra = f" | {_cell(row, 'autotune')} | {row['autotune']['uid'] if row['autotune'] else '-'}"
    return (f"| {row['problem']} | {row['floor_us']:.2f} | {_cell(row, 'gemv')} | {x_floor} | "
            f"{_cell(row, 'torch.mm')} | {_cell(row, 'inductor')} | {ratio}{extra} | "
            f"{_cell(row, 'autotune_cli.mm', 'eager_wall_us')} / {_cell(row, 'torch.mm', 'eager_wall_us')} / "
            f"{_cell(row, 'inductor', 'eager_wall_us')} | {config} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default=SHAPES, help="MxNxK, comma-separated, for layout nt")
    parser.add_argument("--nn-shapes", default=NN_SHAPES, help="the same for layout nn (B stored [k, n])")
    parser.add_argument("--every", action="store_true", help="also tune every template and time autotune's winner")
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--inductor-budget", type=float, default=150.0,
                        help="seconds of Inductor compiles, after which its column is left empty")
    parser.add_argument("--chunk", type=int, default=3, help="problems tuned per `autotune mm --from`")
    parser.add_argument("--compile-workers", type=int, default=None)
    parser.add_argument("--inductor-shapes", default=None,
                        help="MxNxK[:layout], comma-separated: the problems Inductor compiles (default: all)")
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="gemv-decode-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(scratch, "inductor")

    entries = []
    for layout, shapes in (("nt", args.shapes), ("nn", args.nn_shapes)):
        for text in filter(None, shapes.split(",")):
            m, n, k = (int(part) for part in text.split("x"))
            entries.append({"m": m, "n": n, "k": k, "dtype": "bfloat16", "layout": layout})
    gemv_cache = os.path.join(scratch, "gemv-cache")
    workers = ["--compile-workers", str(args.compile_workers)] if args.compile_workers else []

    def tuned():
        """(entry, gemv's outcome, every template's or None), tuned --chunk problems at a time:
        what was timed before a time limit stops the run is printed."""
        for first in range(0, len(entries), args.chunk):
            part = entries[first:first + args.chunk]
            mine = tune(part, gemv_cache, ["--templates", "triton::gemv", *workers])
            every = tune(part, os.path.join(scratch, "every-cache"), workers) if args.every else [None] * len(part)
            yield from zip(part, mine, every)

    import torch
    import torch._inductor.config as inductor_config

    from autotune_cli.api import Dispatcher
    from autotune_cli.problem import make_problem
    from autotune_cli.runner.verify import check, make_operands, reference
    from bench.common import SideBySide, out_dir

    inductor_config.force_disable_caches = True
    torch._dynamo.config.cache_size_limit = 64
    bench = SideBySide()
    kernel_dir = tempfile.mkdtemp(prefix="gemv-decode-kernels-")
    inductor_spent = 0.0
    rows = []
    header = table_header(args.every)
    print(header, flush=True)
    for entry, ours, best in tuned():
        problem = make_problem(**entry, device="cuda")
        floor_us = hbm_seconds(problem.min_bytes) * 1e6
        labels, runs = ["torch.mm"], [bench.anchor(problem)]
        if ours and ours.get("winner"):
            labels.append("gemv")
            runs.append(bench.runnable(problem, ours["winner"], kernel_dir))
        if best and best.get("winner"):
            labels.append("autotune")
            runs.append(bench.runnable(problem, best["winner"], kernel_dir))
        compiled = None
        inductor_note = ""
        wanted = args.inductor_shapes is None or any(
            want in (f"{problem.m}x{problem.n}x{problem.k}", f"{problem.m}x{problem.n}x{problem.k}:{problem.layout}")
            for want in args.inductor_shapes.split(","))
        if not args.no_inductor and wanted and inductor_spent < args.inductor_budget:
            try:
                run, compiled, spent = inductor_runnable(problem)
                inductor_spent += spent
                labels.append("inductor")
                runs.append(run)
            except Exception as exc:  # noqa: BLE001 - reported, the rest is still timed
                inductor_note = f"inductor failed: {type(exc).__name__}: {str(exc)[:120]}"
        elif not args.no_inductor and wanted:
            inductor_note = "inductor left out (budget spent)"
        try:
            times, verdicts = bench.time_many(problem, runs, rounds=5)
        except Exception as exc:  # noqa: BLE001 - Inductor's function captured badly: time the rest
            if compiled is None:
                raise
            inductor_note = f"inductor not timed: {type(exc).__name__}: {str(exc)[:120]}"
            compiled = None
            labels, runs = labels[:-1], runs[:-1]
            times, verdicts = bench.time_many(problem, runs, rounds=5)
        us = {label: ms * 1e3 for label, ms in zip(labels, times)}
        ok = {label: verdict.ok for label, verdict in zip(labels, verdicts)}
        if compiled is not None:  # it writes a new tensor, not ops.out: checked on its own
            ops = make_operands(problem, 11, "cuda")
            ok["inductor"] = check(problem, compiled(ops.a, ops.b), reference(problem, ops)).ok
        ops = make_operands(problem, 3, "cuda")
        eager = {"torch.mm": eager_wall_us(torch.mm, ops.a, ops.b)}
        if "gemv" in us:  # a dispatcher on the cache as it is now (the later chunks are not in it)
            eager["autotune_cli.mm"] = eager_wall_us(Dispatcher(gemv_cache).mm, ops.a, ops.b)
        if compiled is not None:
            eager["inductor"] = eager_wall_us(compiled, ops.a, ops.b)
        row = {"problem": problem.describe(), "floor_us": floor_us, "kernel_us": us, "verified": ok,
               "eager_wall_us": eager, "gemv": ours["winner"] if ours else None,
               "autotune": best["winner"] if best else None, "every": args.every, "note": inductor_note}
        rows.append(row)
        print(table_row(row) + (f"  ({inductor_note})" if inductor_note else ""), flush=True)
        print("  json: " + json.dumps(row), flush=True)

    print()
    print(header)
    for row in rows:
        print(table_row(row))
    (out_dir() / "gemv_decode.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
