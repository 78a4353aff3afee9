"""How long a cached `autotune mm` and `autotune cache show` take, beside Python's own start
(with and without typer imported), each a fresh process, median of --runs.

PYTHONPATH=. python3 bench/cache_hit.py [--device cpu|cuda] [--runs 10]

The cache is a fresh folder: one problem (1x4096x4096 bf16 nt, aten only) is tuned first,
so every timed `mm` is a hit; the GPUs' facts are then remembered there too (gpu_memo.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(argv: list[str], env: dict, runs: int) -> tuple[float, float]:
    seconds = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seconds.append(time.perf_counter() - began)
    return statistics.median(seconds), min(seconds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    cache = tempfile.mkdtemp(prefix="autotune-hit-")
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
    mm = [sys.executable, "-m", "autotune_cli", "mm", "--m", "1", "--n", "4096", "--k", "4096",
          "--dtype", "bfloat16", "--layout", "nt", "--templates", "aten", "--device", args.device]
    subprocess.run(mm, env=env, check=True, stdout=subprocess.DEVNULL)  # the miss: tunes
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -c 'import typer, rich'": [sys.executable, "-c", "import typer, rich.console"],
        "autotune --help": [sys.executable, "-m", "autotune_cli", "--help"],
        "autotune mm (hit)": mm,
        "autotune mm --json (hit)": mm + ["--json"],
        "autotune cache show": [sys.executable, "-m", "autotune_cli", "cache", "show"],
    }
    print(f"{'command':32} {'median s':>9} {'min s':>7}   ({args.runs} runs, {args.device})")
    for name, argv in cases.items():
        median, best = timed(argv, env, args.runs)
        print(f"{name:32} {median:9.3f} {best:7.3f}")


if __name__ == "__main__":
    main()
