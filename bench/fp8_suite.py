"""The FP8 suite: float8 (e4m3) GEMMs from LLM prefill and decode, rowwise and tensorwise
scales (blockwise, 1x128 x 128x128, with --scales block), output bf16. Per case: our tuned
winner, torch._scaled_mm and Inductor max-autotune of the same torch._scaled_mm call, all
timed in this process by one method, a CUDA graph of calls over rotating operand copies
larger than the L2 (the tuner times its candidates the same way here), in interleaved
passes whose order is reversed every other pass. Each output is
verified against the float64 product of the dequantized operands.

PYTHONPATH=. python3 bench/fp8_suite.py [--shapes 2048x4096x4096,8192x8192x8192] [--scales row,tensor,block]
                                        [--fast-accum] [--skip-inductor] [--search exhaustive] [--rounds 6]

--fast-accum tunes and times the use_fast_accum=True call instead (torch's default is False).

Targets: geomean >= 1.10x torch._scaled_mm; no case slower than the better of
torch._scaled_mm and Inductor beyond 2%; 8192^3 rowwise >= 1300 TFLOP/s.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import POLICY, scaled_mm_call, write_json  # noqa: E402
from autotune_cli.runner.timing import CudaTimer  # noqa: E402
from autotune_cli.runner.verify import check, make_operands, reference  # noqa: E402
from autotune_cli.hardware.device import probe_device  # noqa: E402
from autotune_cli.problem import make_problem, parse_mnk  # noqa: E402
from autotune_cli.settings import MeasurePolicy, TuneSettings  # noqa: E402
from autotune_cli.templates import get_template  # noqa: E402
from autotune_cli.tune.tuner import Tuner  # noqa: E402

SHAPES = [  # (name, m, n, k)
    ("prefill qkv", 2048, 4096, 4096),
    ("prefill up", 2048, 14336, 4096),
    ("prefill down", 2048, 4096, 14336),
    ("decode", 8, 4096, 4096),
    ("decode up", 16, 14336, 4096),
    ("square", 8192, 8192, 8192),
]
SCALES = ("row", "tensor")
GRAPH = replace(POLICY, mode="graph")
ROUNDS = 6


def inductor_call(problem):
    """Inductor max-autotune of torch._scaled_mm for this problem's shapes (compiled anew:
    Dynamo's caches are reset so that no shape falls back to eager after too many recompiles)."""
    import torch
    import torch._inductor.config as config

    config.force_disable_caches = True
    torch._dynamo.reset()
    out_dtype = getattr(torch, problem.result_dtype)

    fast = problem.fast_accum

    def scaled(a, b, scale_a, scale_b, bias):
        return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, bias=bias, out_dtype=out_dtype,
                                use_fast_accum=fast)

    fn = torch.compile(scaled, mode="max-autotune-no-cudagraphs", dynamic=False)
    return lambda ops: fn(ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias)


def time_side_by_side(timer, problem, runs: dict, seed: int = 1234, rounds: int = ROUNDS) -> tuple[dict, dict]:
    """{name: median ms over ROUNDS passes}, {name: the check of its output}."""
    import torch

    ops = make_operands(problem, seed, "cuda")
    ref = reference(problem, ops)
    verdicts = {}
    for name, run in runs.items():
        ops.out.fill_(float("nan"))
        got = run(ops)
        torch.cuda.synchronize()
        verdicts[name] = check(problem, got if got is not None else ops.out, ref)
    del ref
    samples = {name: [] for name in runs}
    names = list(runs)
    for index in range(rounds):
        for name in list(names if index % 2 == 0 else names[::-1]):
            try:
                samples[name].append(timer.measure(runs[name], ops, GRAPH).median_ms)
            except Exception as exc:  # noqa: BLE001 - e.g. a call a graph cannot capture: said, not timed
                print(f"  {name}: not timed ({type(exc).__name__}: {str(exc)[:200]})", file=sys.stderr)
                names.remove(name)
                samples.pop(name)
    return {name: statistics.median(s) for name, s in samples.items()}, verdicts


def finite_or_none(value):
    """A float JSON can hold: None for a NaN or an infinity (a NaN output's error)."""
    return value if value is not None and math.isfinite(value) else None


def geomean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def chosen_shapes(text: str | None):
    if not text:
        return SHAPES
    wanted = [parse_mnk(part) for part in text.split(",") if part.strip()]
    known = {(m, n, k): name for name, m, n, k in SHAPES}
    return [(known.get(mnk, "shape"), *mnk) for mnk in wanted]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=None, help="comma-separated MxNxK (default: the suite's six)")
    parser.add_argument("--scales", default=",".join(SCALES), help="comma-separated: row, tensor, block")
    parser.add_argument("--fast-accum", action="store_true", help="use_fast_accum=True for every call")
    parser.add_argument("--skip-inductor", action="store_true")
    parser.add_argument("--search", default="default", choices=("default", "exhaustive"))
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved timing passes per case")
    args = parser.parse_args()
    scales = [s.strip() for s in args.scales.split(",") if s.strip()]
    output = "fp8_suite_fast.json" if args.fast_accum else "fp8_suite.json"
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton-fp8-suite-"))
    import torch

    device = probe_device("cuda")
    timer = CudaTimer(device.l2_bytes)
    # every candidate timed by the graph method, as the side-by-side below
    settings = TuneSettings(device="cuda", cache_dir=Path(tempfile.mkdtemp()), force=True, search=args.search,
                            measure=MeasurePolicy.for_device("cuda", graph_below_us=1e12))
    rows = []
    with Tuner(settings) as tuner:
        for name, m, n, k in chosen_shapes(args.shapes):
            for scale in scales:
                if scale == "block" and args.fast_accum:
                    print(f"skipped {name} {m}x{n}x{k} block: blockwise scales take no fast accumulation", flush=True)
                    continue
                problem = make_problem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale=scale, device="cuda",
                                       fast_accum=args.fast_accum)
                label = f"{name} {m}x{n}x{k} {scale}" + (" fast" if args.fast_accum else "")
                started = time.perf_counter()
                outcome = tuner.tune(problem)
                tune_s = time.perf_counter() - started
                entry = outcome.entry.to_dict()
                winner = entry["winner"]
                runs = {"torch": scaled_mm_call(problem)}
                if winner is not None:
                    runs["ours"] = get_template(winner["uid"]).build(problem, winner["params"],
                                                                     str(settings.kernel_dir))
                inductor_s = None
                if not args.skip_inductor:
                    started = time.perf_counter()
                    runs["inductor"] = inductor_call(problem)
                    ops = make_operands(problem, 1, "cuda")
                    runs["inductor"](ops)  # compiles and tunes
                    torch.cuda.synchronize()
                    inductor_s = time.perf_counter() - started
                    del ops
                times, verdicts = time_side_by_side(timer, problem, runs, rounds=args.rounds)
                row = {"case": label, "m": m, "n": n, "k": k, "scale": scale,
                       "winner": winner and winner["uid"], "params": winner and winner["params"],
                       "ms": times, "tflops": {key: problem.tflops(ms) for key, ms in times.items()},
                       "verified": {key: v.ok for key, v in verdicts.items()},
                       "errors": {key: v.reason for key, v in verdicts.items() if not v.ok},
                       # how near each came to the check's limits: the relative error, and the
                       # largest element error over its allowance (runner/verify.py)
                       "accuracy": {key: {"rel_error": finite_or_none(v.rel_error),
                                          "worst_of_allowed": finite_or_none(v.worst_of_allowed)}
                                    for key, v in verdicts.items()},
                       "tune_s": tune_s, "inductor_tune_s": inductor_s,
                       "best_by_template": {}}
                for cand in entry["candidates"]:
                    if cand["status"] == "ok":
                        best = row["best_by_template"].get(cand["uid"], math.inf)
                        row["best_by_template"][cand["uid"]] = min(best, cand["ms"])
                row["fast_accum"] = args.fast_accum
                rows.append(row)
                ours = times.get("ours")
                print(f"done {label}: {row['winner']} {ours or float('nan'):.4f} ms, torch "
                      f"{times['torch']:.4f} ms, inductor {times.get('inductor', float('nan')):.4f} ms; "
                      f"tune {tune_s:.1f} s, inductor tune {inductor_s or float('nan'):.1f} s; verified "
                      f"{','.join(k for k, v in row['verified'].items() if v)}", flush=True)
                write_json(output, rows)
    print()
    print(f"{'case':36} {'winner':34} {'ours TF/s':>9} {'torch TF/s':>10} {'ind. TF/s':>9}"
          f" {'vs torch':>8} {'vs ind.':>7} {'vs best':>7} ok")
    for r in rows:
        t = r["ms"]
        ours = t.get("ours", math.nan)
        best_other = min(t["torch"], t.get("inductor", math.inf))
        r["speedup"] = t["torch"] / ours
        r["vs_best"] = best_other / ours
        ok = "yes" if all(r["verified"].values()) else "NO " + ",".join(k for k, v in r["verified"].items() if not v)
        print(f"{r['case']:36} {str(r['winner']):34} {r['tflops'].get('ours', math.nan):9.1f}"
              f" {r['tflops']['torch']:10.1f} {r['tflops'].get('inductor', math.nan):9.1f}"
              f" {r['speedup']:8.3f} {t.get('inductor', math.nan) / ours:7.3f} {r['vs_best']:7.3f} {ok}")
    speedups = [r["speedup"] for r in rows]
    slow = [r["case"] for r in rows if r["vs_best"] < 0.98]
    square = [r for r in rows if (r["m"], r["n"], r["k"], r["scale"]) == (8192, 8192, 8192, "row")]
    print(f"geomean vs torch._scaled_mm: ours {geomean(speedups):.3f} (target >= 1.10), inductor "
          f"{geomean([r['ms']['torch'] / r['ms']['inductor'] for r in rows if 'inductor' in r['ms']]):.3f}")
    print(f"cases more than 2% behind the better of torch and inductor: {len(slow)} {slow}")
    if square:
        print(f"8192^3 rowwise: {square[0]['tflops'].get('ours', math.nan):.0f} TFLOP/s (target >= 1300)")
    write_json(output, rows)


if __name__ == "__main__":
    main()
