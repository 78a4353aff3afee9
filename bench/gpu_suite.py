"""Three problems: tune three problems cold and compare each winner with torch.mm
measured in the same process by the same timer (CUDA events, L2 flushed, median).

Run on a GPU machine:  PYTHONPATH=. python3 bench/gpu_suite.py [--search exhaustive]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import SideBySide, now, write_json  # noqa: E402
from autotune_cli.problem import make_problem  # noqa: E402
from autotune_cli.settings import TuneSettings  # noqa: E402
from autotune_cli.tune.tuner import Tuner  # noqa: E402

PROBLEMS = [
    ("4096x4096x4096 bf16", dict(m=4096, n=4096, k=4096, dtype="bfloat16")),
    ("8x4096x4096 bf16", dict(m=8, n=4096, k=4096, dtype="bfloat16")),
    ("1000x3000x777 fp16", dict(m=1000, n=3000, k=777, dtype="float16")),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--search", default="default")
    parser.add_argument("--only", default=None, help="substring of a problem name")
    args = parser.parse_args()
    cache_dir = Path(tempfile.mkdtemp(prefix="autotune-bench-"))
    settings = TuneSettings(device="cuda", search=args.search, cache_dir=cache_dir, force=True)
    side = SideBySide()
    rows = []
    with Tuner(settings) as tuner:
        for name, spec in PROBLEMS:
            if args.only and args.only not in name:
                continue
            problem = make_problem(device="cuda", **spec)
            started = now()
            outcome = tuner.tune(problem)
            tune_s = now() - started
            entry = outcome.entry.to_dict()
            statuses = {}
            for cand in entry["candidates"]:
                statuses[cand["status"]] = statuses.get(cand["status"], 0) + 1
            winner = entry["winner"]
            ours, anchor, verdict = side.time_winner(problem, winner, str(settings.kernel_dir))
            best_triton = min((c["ms"] for c in entry["candidates"]
                               if c["status"] == "ok" and c["uid"].startswith("triton")), default=None)
            aten = min((c["ms"] for c in entry["candidates"]
                        if c["status"] == "ok" and c["uid"].startswith("aten")), default=None)
            rows.append({
                "problem": name, "winner": winner["uid"], "params": winner["params"],
                "tuner_ms": winner["ms"], "ours_ms": ours, "torch_mm_ms": anchor,
                "speedup_vs_torch": anchor / ours, "winner_rel_error": verdict.rel_error,
                "winner_verified": verdict.ok, "tuner_aten_ms": aten, "tuner_best_triton_ms": best_triton,
                "tune_s": tune_s, "statuses": statuses, "pruned": entry["pruned"],
            })
            print(f"done {name}: {winner['uid']} {ours:.4f} ms vs torch.mm {anchor:.4f} ms "
                  f"(tune {tune_s:.1f} s, {statuses})", flush=True)
    write_json(f"gpu_suite_{args.search}.json", rows)
    print()
    print(f"{'problem':22} {'winner':12} {'ours ms':>9} {'torch.mm':>9} {'torch/ours':>10} "
          f"{'best triton':>11} {'tune s':>7}  statuses")
    for r in rows:
        bt = f"{r['tuner_best_triton_ms']:.4f}" if r["tuner_best_triton_ms"] else "-"
        print(f"{r['problem']:22} {r['winner']:12} {r['ours_ms']:9.4f} {r['torch_mm_ms']:9.4f} "
              f"{r['speedup_vs_torch']:10.3f} {bt:>11} {r['tune_s']:7.1f}  {r['statuses']}")


if __name__ == "__main__":
    main()
