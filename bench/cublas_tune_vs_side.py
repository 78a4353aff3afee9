"""Why does the tune read cuBLAS slower than the side-by-side does?

In bench/focus_call16.sh's suite (2026-11-30) the tune read aten::mm on square 4096^3 fp16 at
0.2107 ms and on prefill up 2048x14336x4096 bf16 at 0.3467, while the side-by-side read
torch.mm at 0.1917 and 0.3299 (10% and 5% apart); triton::mm_persistent_tma read alike in
both (0.3%, 0.6%), so the tune picked it, 2% slower than cuBLAS side by side. Here, per
shape, twice: a tune of aten::mm and triton::mm_persistent_tma alone (its worker, the
tuner's policy, the re-time passes), then in this process the TMA winner and torch.mm side by
side, once with the bench's policy (POLICY: 50-300 runs in 200 ms) and once with the tuner's
(10-100 runs in 40 ms). If the tune's cuBLAS reads slow and this process's do not under the
tuner's policy too, the worker process is the difference; if this process's read slow under
the tuner's policy, the run count is.

PYTHONPATH=. python3 bench/cublas_tune_vs_side.py [--label alone]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune_cli.problem import make_problem  # noqa: E402
from autotune_cli.settings import TuneSettings  # noqa: E402
from autotune_cli.tuner import Tuner  # noqa: E402
from bench.common import SideBySide, write_json  # noqa: E402

SHAPES = {"square 4096^3 fp16": dict(m=4096, n=4096, k=4096, dtype="float16"),
          "prefill up 2048x14336x4096 bf16": dict(m=2048, n=14336, k=4096, dtype="bfloat16")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", default="")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    side = SideBySide()
    settings = TuneSettings(device="cuda", cache_dir=Path(tempfile.mkdtemp()), force=True,
                            templates=("aten::mm", "triton::mm_persistent_tma"))
    rows = []
    with Tuner(settings) as tuner:
        for name, spec in SHAPES.items():
            problem = make_problem(device="cuda", **spec)
            for rep in range(args.reps):
                entry = tuner.tune(problem).entry
                best = {}
                for cand in entry["candidates"]:
                    if cand["status"] == "ok" and cand["ms"] < best.get(cand["uid"], (1e9, None))[0]:
                        best[cand["uid"]] = (cand["ms"], cand["params"])
                tma_ms, tma_params = best["triton::mm_persistent_tma"]
                tma = side.runnable(problem, {"uid": "triton::mm_persistent_tma", "params": tma_params},
                                    str(settings.kernel_dir))
                anchor = side.anchor(problem)
                (bench_tma, bench_mm), _ = side.time_many(problem, [tma, anchor])
                saved = side.policy
                side.policy = lambda p: settings.timing_policy  # the tuner's own run counts
                try:
                    (tuner_tma, tuner_mm), _ = side.time_many(problem, [tma, anchor])
                finally:
                    side.policy = saved
                row = {"shape": name, "rep": rep, "winner": entry["winner"]["uid"],
                       "tune_aten_ms": best["aten::mm"][0], "tune_tma_ms": tma_ms,
                       "side_bench_policy": {"tma": bench_tma, "torch.mm": bench_mm},
                       "side_tuner_policy": {"tma": tuner_tma, "torch.mm": tuner_mm}}
                rows.append(row)
                print(f"{name} rep {rep}: winner {row['winner']}; tune aten::mm {row['tune_aten_ms']:.4f} "
                      f"tma {tma_ms:.4f} | here, bench policy: torch.mm {bench_mm:.4f} tma {bench_tma:.4f} "
                      f"| here, tuner's policy: torch.mm {tuner_mm:.4f} tma {tuner_tma:.4f}", flush=True)
    write_json(f"cublas_tune_vs_side{'_' + args.label if args.label else ''}.json", rows)


if __name__ == "__main__":
    main()
