"""Dispatch overhead of `autotune_cli.mm` against `torch.mm` itself.

A tiny problem (64x64x64 by default) is tuned with aten alone into a temporary cache, so
the cached winner is torch.mm and both sides launch the same kernel: the difference per
call is what the API adds (building the key from the tensors, one dict lookup, a call).
Each side runs a loop of calls, synchronised once at the end; rounds alternate A/B/A/B and
the median round counts.

Run on a GPU machine:  PYTHONPATH=. python3 bench/api_overhead.py
Quick check on a CPU:  PYTHONPATH=. python3 bench/api_overhead.py --device cpu --calls 2000
Writes $OUT/api_overhead.json (default ./bench_out) besides printing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def per_call_us(fn, a, b, calls: int, sync) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn(a, b)
    sync()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None)
    parser.add_argument("--m", type=int, default=64)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--k", type=int, default=64)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--calls", type=int, default=20000, help="calls per round")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cache_dir = Path(tempfile.mkdtemp(prefix="autotune-api-overhead-"))
    os.environ["AUTOTUNE_CACHE_DIR"] = str(cache_dir)  # before the API's first plan

    import autotune_cli
    from autotune_cli.problem import make_problem
    from autotune_cli.settings import TuneSettings
    from autotune_cli.tuner import Tuner

    problem = make_problem(m=args.m, n=args.n, k=args.k, dtype=args.dtype, device=device)
    settings = TuneSettings(device=device, templates=("aten",), cache_dir=cache_dir, workers=1)
    with Tuner(settings) as tuner:
        outcome = tuner.tune(problem)
    assert outcome.winner and outcome.winner["uid"] == "aten::mm", outcome.winner

    dtype = getattr(torch, problem.dtype)
    a = torch.randn(args.m, args.k, device=device).to(dtype)
    b = torch.randn(args.k, args.n, device=device).to(dtype)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    started = time.perf_counter()
    first = autotune_cli.mm(a, b)  # plans: reads the cache, fingerprints, remembers
    sync()
    first_call_ms = (time.perf_counter() - started) * 1e3
    info = autotune_cli.dispatch_info(a, b)
    assert info.uid == "aten::mm" and not info.fallback, info
    assert torch.equal(first, torch.mm(a, b))

    ours, theirs = autotune_cli.mm, torch.mm
    warm = max(args.calls // 10, 100)
    per_call_us(ours, a, b, warm, sync)
    per_call_us(theirs, a, b, warm, sync)
    rounds = {"autotune_cli.mm": [], "torch.mm": []}
    for _ in range(args.rounds):
        rounds["autotune_cli.mm"].append(per_call_us(ours, a, b, args.calls, sync))
        rounds["torch.mm"].append(per_call_us(theirs, a, b, args.calls, sync))
    ours_us = statistics.median(rounds["autotune_cli.mm"])
    torch_us = statistics.median(rounds["torch.mm"])

    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    print(f"{problem.describe()} on {name} ({args.calls} calls x {args.rounds} rounds, median round)")
    print(f"  torch.mm         {torch_us:8.3f} us/call")
    print(f"  autotune_cli.mm  {ours_us:8.3f} us/call")
    print(f"  ratio {ours_us / torch_us:.3f}, overhead {ours_us - torch_us:+.3f} us/call; "
          f"first call (planning) {first_call_ms:.1f} ms")

    out_dir = Path(os.environ.get("OUT", "bench_out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "api_overhead.json").write_text(json.dumps({
        "problem": problem.to_dict(), "device": name, "torch": torch.__version__,
        "calls": args.calls, "rounds": rounds, "torch_us": torch_us, "autotune_us": ours_us,
        "ratio": ours_us / torch_us, "first_call_ms": first_call_ms,
        "command": " ".join([sys.executable, *sys.argv]),
    }, indent=1))


if __name__ == "__main__":
    main()
