"""The kernel suite: LLM prefill and decode shapes, odd sizes, square sizes, fp16/bf16/fp32,
bmm and addmm. Per shape: torch.mm, Inductor max-autotune's pick and ours, each timed by the
same method (events + L2 flush, or CUDA graph over rotating copies for tiny problems).
Ours and torch.mm are timed side by side in this process; Inductor's pick beside its own
torch.mm and our winner in a child process (caches off); ratios are taken to the anchor of
each run, and "1-proc" is ours against the faster of the other two in the child's passes.

PYTHONPATH=. python3 bench/gpu_llm_suite.py [--suite llm,odd,small_m] [--skip-inductor]
    [--only TEXT] [--inductor-only TEXT]

--suite odd: output widths off 16 elements (vocabularies of 50257 and 32001) and a wide one
(151936) at M from 1 to 2048, weights stored [N, K] as an nn.Linear keeps them; small_m:
64-256-row prefill chunks.
Each row also gives the best time of each template in our tune (plain, padded, swap-AB, ...).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import SideBySide, now, write_json  # noqa: E402
from autotune_cli.problem import make_problem  # noqa: E402
from autotune_cli.hardware.roofline import hbm_seconds  # noqa: E402
from autotune_cli.settings import TuneSettings  # noqa: E402
from autotune_cli.tune.tuner import Tuner  # noqa: E402

SHAPES = [
    ("prefill qkv 2048x4096x4096 bf16 nt", dict(m=2048, n=4096, k=4096, dtype="bfloat16", layout="nt")),
    ("prefill up 2048x14336x4096 bf16", dict(m=2048, n=14336, k=4096, dtype="bfloat16")),
    ("prefill down 2048x4096x14336 bf16", dict(m=2048, n=4096, k=14336, dtype="bfloat16")),
    ("decode 16x4096x4096 bf16", dict(m=16, n=4096, k=4096, dtype="bfloat16")),
    ("decode 8x14336x4096 bf16", dict(m=8, n=14336, k=4096, dtype="bfloat16")),
    ("decode 16x4096x14336 bf16", dict(m=16, n=4096, k=14336, dtype="bfloat16")),
    ("odd 1000x3000x777 fp16", dict(m=1000, n=3000, k=777, dtype="float16")),
    # GPT-2's output projection: a vocabulary of 50257 leaves B's and the output's rows misaligned
    ("lm_head 2048x50257x768 fp16", dict(m=2048, n=50257, k=768, dtype="float16")),
    ("bmm 32x512x512x128 bf16", dict(m=512, n=512, k=128, batch=32, dtype="bfloat16")),
    ("addmm 4096x4096x4096 bf16", dict(m=4096, n=4096, k=4096, dtype="bfloat16", bias="n")),
    ("square 4096^3 fp16", dict(m=4096, n=4096, k=4096, dtype="float16")),
    ("tf32 2048^3 fp32", dict(m=2048, n=2048, k=2048, dtype="float32", allow_tf32=True)),
]

# nn.Linear heads with odd vocabularies (GPT-2; a Llama-2 vocabulary with one added token)
# and a wide one (Qwen's 151936, a multiple of 16), the weight stored [N, K]: where N is
# odd only the output's rows are misaligned.
ODD_SHAPES = [(f"odd {m}x{n}x{k} bf16 nt", dict(m=m, n=n, k=k, dtype="bfloat16", layout="nt"))
              for n, k in ((50257, 768), (32001, 4096), (151936, 4096)) for m in (1, 64, 256, 2048)]
SMALL_M_SHAPES = [(f"chunk {m}x{n}x{k} bf16 nt", dict(m=m, n=n, k=k, dtype="bfloat16", layout="nt"))
                  for m, n, k in ((64, 4096, 4096), (128, 4096, 4096), (256, 4096, 4096),
                                  (128, 14336, 4096), (128, 4096, 14336))]
SUITES = {"llm": SHAPES, "odd": ODD_SHAPES, "small_m": SMALL_M_SHAPES}


def matches(name: str, filters: str | None) -> bool:
    """Whether a shape's name holds one of the comma-separated substrings (_ for a space)."""
    return filters is None or any(part in name or part.replace("_", " ") in name for part in filters.split(","))


def inductor(problem, winner: dict) -> dict:
    """Inductor's pick timed in a child process beside torch.mm and our `winner` (inductor_mm.py)."""
    op = problem.op
    cmd = [sys.executable, str(Path(__file__).with_name("inductor_mm.py")), str(problem.m),
           str(problem.n), str(problem.k), problem.dtype, "max-autotune-no-cudagraphs", op,
           str(problem.b), problem.layout, "1" if problem.allow_tf32 else "0",
           json.dumps({"uid": winner["uid"], "params": winner["params"]})]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    except subprocess.TimeoutExpired:
        return {"error": "timeout"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": proc.stderr[-400:]}
    return json.loads(lines[-1])


def geomean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-inductor", action="store_true")
    parser.add_argument("--only", default=None, help="comma-separated substrings of shape names (_ for a space)")
    parser.add_argument("--suite", default="llm", help=f"comma-separated, of {', '.join(SUITES)}")
    parser.add_argument("--inductor-only", default=None,
                        help="time Inductor's pick only for shapes whose names hold one of these substrings")
    args = parser.parse_args()
    shapes = [shape for suite in args.suite.split(",") for shape in SUITES[suite]]
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-suite-")
    side = SideBySide()
    settings = TuneSettings(device="cuda", cache_dir=Path(tempfile.mkdtemp()), force=True)
    rows = []
    with Tuner(settings) as tuner:
        for name, spec in shapes:
            if not matches(name, args.only):
                continue
            problem = make_problem(device="cuda", **spec)
            started = now()
            outcome = tuner.tune(problem)
            tune_s = now() - started
            entry = outcome.entry.to_dict()
            winner = entry["winner"]
            # torch.mm twice: the two readings' gap is this run's noise floor
            (ours, torch_ms, torch_again), verdicts = side.time_many(
                problem, [side.runnable(problem, winner, str(settings.kernel_dir)),
                          side.anchor(problem), side.anchor(problem)])
            verdict = verdicts[0]
            row = {"shape": name, "winner": winner["uid"], "params": winner["params"], "ours_ms": ours,
                   "torch_ms": torch_ms, "speedup": torch_ms / ours, "verified": verdict.ok,
                   "noise": abs(torch_again / torch_ms - 1),
                   "tune_s": tune_s, "timing": side.policy(problem).mode,
                   "floor_ms": hbm_seconds(problem.min_bytes) * 1e3}
            by_uid, margins = {}, {}
            for cand in entry["candidates"]:
                if cand["status"] == "ok":
                    by_uid[cand["uid"]] = min(by_uid.get(cand["uid"], 1e9), cand["ms"])
                    if cand.get("worst_of_allowed") is not None:
                        margins[cand["uid"]] = max(margins.get(cand["uid"], 0.0), cand["worst_of_allowed"])
            row["best_by_template"] = by_uid
            row["precision"], row["worst_of_allowed"] = problem.precision, margins
            if not args.skip_inductor and matches(name, args.inductor_only):
                ind = inductor(problem, winner)
                row["inductor"] = ind
                if "inductor_ms" in ind:
                    row["inductor_speedup"] = ind["torch_mm_ms"] / ind["inductor_ms"]
                if "ours_ms" in ind and ind.get("ours_ok"):  # the three in one process's passes
                    row["one_process"] = min(ind["inductor_ms"], ind["torch_mm_ms"]) / ind["ours_ms"]
            rows.append(row)
            print(f"done {name}: {row['winner']} x{row['speedup']:.3f} vs torch.mm"
                  f" (inductor x{row.get('inductor_speedup', float('nan')):.3f}); tune {tune_s:.1f} s", flush=True)
            write_json(f"gpu_llm_suite_{args.suite.replace(',', '_')}.json", rows)
    print()
    print(f"{'shape':36} {'winner':26} {'ours ms':>8} {'torch ms':>8} {'ours x':>7} {'ind. x':>7}"
          f" {'ours/best':>9} {'1-proc':>7} {'floor x':>7}")
    for r in rows:
        best_other = max(1.0, r.get("inductor_speedup") or 1.0)
        print(f"{r['shape']:36} {r['winner']:26} {r['ours_ms']:8.4f} {r['torch_ms']:8.4f} {r['speedup']:7.3f}"
              f" {r.get('inductor_speedup', float('nan')):7.3f} {r['speedup'] / best_other:9.3f}"
              f" {r.get('one_process', float('nan')):7.3f} {r['ours_ms'] / r['floor_ms']:7.2f}")
    print("1-proc: ours against the faster of torch.mm and Inductor's pick, the three timed in the"
          " same passes of Inductor's process")
    print()
    uids = sorted({uid for r in rows for uid in r["best_by_template"]})
    short = [uid[:14] for uid in uids]
    print("best ms of each template in the tune:")
    print(f"{'shape':30} " + " ".join(f"{s:>14}" for s in short))
    for r in rows:
        best = r["best_by_template"]
        print(f"{r['shape']:30} " + " ".join(f"{best[u]:14.4f}" if u in best else f"{'-':>14}" for u in uids))
    picks = [(r["shape"], r["inductor"]["pick"]) for r in rows if "pick" in r.get("inductor", {})]
    if picks:
        print("\nInductor's picks:")
        for shape, pick in picks:
            print(f"{shape:30} {pick}")
    # how close the passing kernels came to the output check's slack (runner/verify.check):
    # what a tighter tolerance for the precision would have to leave room for
    print("\ncheck margins (largest entry error over its slack, OK candidates; 1 is the limit):")
    for precision in sorted({r["precision"] for r in rows}):
        worst: dict[str, float] = {}
        for r in rows:
            if r["precision"] == precision:
                for uid, margin in r["worst_of_allowed"].items():
                    worst[uid] = max(worst.get(uid, 0.0), margin)
        print(f"{precision:10} " + ", ".join(f"{uid} {m:.3f}" for uid, m in sorted(worst.items())))
    print(f"noise floor (torch.mm against itself, same passes): median "
          f"{100 * statistics.median(r['noise'] for r in rows):.2f}%, max {100 * max(r['noise'] for r in rows):.2f}%")
    print(f"geomean speed-up vs torch.mm: ours {geomean([r['speedup'] for r in rows]):.3f}, inductor "
          f"{geomean([r.get('inductor_speedup') for r in rows]):.3f}")


if __name__ == "__main__":
    main()
