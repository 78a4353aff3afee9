"""Tuning time: the engine against Inductor's max-autotune, cold, same GPU.

Per problem: our default search cold (fresh Triton cache), Inductor max-autotune cold (in
its own process, caches off), both winners timed beside torch.mm; then an exhaustive
search of 4096^3 bf16 cold; then two further tunes per problem to see how often winners
differ by more than 2% (timed side by side in one process).

PYTHONPATH=. python3 bench/gpu_engine.py [--skip-inductor] [--skip-exhaustive]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import SideBySide, now, write_json  # noqa: E402
from autotune_cli.problem import make_problem  # noqa: E402
from autotune_cli.settings import TuneSettings  # noqa: E402
from autotune_cli.tune.tuner import Tuner  # noqa: E402

PROBLEMS = [
    ("4096^3 bf16", dict(m=4096, n=4096, k=4096, dtype="bfloat16")),
    ("8x4096x4096 bf16", dict(m=8, n=4096, k=4096, dtype="bfloat16")),
    ("1000x3000x777 fp16", dict(m=1000, n=3000, k=777, dtype="float16")),
]


def fresh_triton_cache() -> None:
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-cold-")


def phase_totals(entry) -> dict:
    """Seconds the timing process spent per step, over every candidate measured."""
    totals = {}
    for cand in entry["candidates"]:
        for name, seconds in (cand.get("phases") or {}).items():
            totals[name] = round(totals.get(name, 0.0) + seconds, 3)
    return totals


def tune(problem, search="default", budget=None):
    fresh_triton_cache()
    settings = TuneSettings(device="cuda", search=search, cache_dir=Path(tempfile.mkdtemp()),
                            force=True, budget_s=budget)
    started = now()
    with Tuner(settings) as tuner:
        outcome = tuner.tune(problem)
        wall = now() - started
        startups = list(getattr(tuner.executor, "startups", []))
    entry = outcome.entry.to_dict()
    timeline = entry.get("timeline", [])
    rounds = {}
    for _, name, _ in timeline:
        rounds[name] = rounds.get(name, 0) + 1
    counts = {}
    for cand in entry["candidates"]:
        counts[cand["status"]] = counts.get(cand["status"], 0) + 1
    loads = [c["first_run_s"] for c in entry["candidates"] if c.get("first_run_s") is not None]
    return {"wall_s": wall, "winner": entry["winner"], "counts": counts,
            "pruned": entry["pruned"], "considered": entry["considered"],
            "compiled": sum(1 for c in entry["candidates"] if c.get("compile_s") is not None),
            "max_first_run_s": max(loads) if loads else None,
            "median_first_run_s": sorted(loads)[len(loads) // 2] if loads else None,
            "timing_modes": sorted({c.get("timing", "") for c in entry["candidates"] if c.get("timing")}),
            "kernel_dir": str(settings.kernel_dir),
            "startups": startups, "rounds": rounds,
            "first_result_s": timeline[0][2] if timeline else None,
            "last_result_s": timeline[-1][2] if timeline else None,
            "sum_first_run_s": sum(loads), "timeline": timeline,
            "phase_totals": phase_totals(entry)}


def cli_cold(spec) -> dict:
    """The whole `autotune mm` command, cold (fresh cache and Triton cache): what a user
    waits for, interpreter start-up and imports included."""
    scratch = Path(tempfile.mkdtemp(prefix="cli-cold-"))
    cmd = [sys.executable, "-m", "autotune_cli", "mm", "--m", str(spec["m"]), "--n", str(spec["n"]),
           "--k", str(spec["k"]), "--dtype", spec["dtype"], "--device", "cuda", "--json"]
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": str(scratch / "cache"), "TRITON_CACHE_DIR": str(scratch / "triton"),
           "PYTHONPATH": os.pathsep.join(sys.path)}
    started = now()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    wall = now() - started
    if proc.returncode != 0:
        return {"error": proc.stderr[-800:]}
    doc = json.loads(proc.stdout)
    return {"process_s": wall, "tune_s": doc.get("tune_seconds"), "winner": doc.get("winner")}


def inductor(spec):
    cmd = [sys.executable, str(Path(__file__).with_name("inductor_mm.py")),
           str(spec["m"]), str(spec["n"]), str(spec["k"]), spec["dtype"]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": proc.stderr[-800:]}
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-inductor", action="store_true")
    parser.add_argument("--skip-exhaustive", action="store_true")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    side = SideBySide()
    rows = []
    for name, spec in PROBLEMS:
        problem = make_problem(device="cuda", **spec)
        ours = tune(problem)
        ours_ms, torch_ms, verdict = side.time_winner(problem, ours["winner"], ours["kernel_dir"])
        row = {"problem": name, "timing": side.policy(problem).mode, "ours": ours, "ours_ms": ours_ms,
               "torch_mm_ms": torch_ms, "verified": verdict.ok}
        if not args.skip_inductor:
            row["inductor"] = inductor(spec)
        row["cli"] = cli_cold(spec)
        # stability: more cold tunes, winners compared side by side
        winners = [ours["winner"]] + [tune(problem)["winner"] for _ in range(args.repeats)]
        distinct = {json.dumps([w["uid"], w["params"]], sort_keys=True): w for w in winners}
        if len(distinct) == 1:
            times, spread = [ours_ms], 0.0  # the same kernel every time
        else:
            runs = [side.runnable(problem, w, ours["kernel_dir"]) for w in distinct.values()]
            times, _ = side.time_many(problem, runs)
            spread = max(times) / min(times) - 1
        row["distinct_winners"] = [json.loads(k) for k in distinct]
        row["repeat_winner_ms"] = times
        row["repeat_spread"] = spread
        rows.append(row)
        print(f"  phases: workers ready {ours['startups']}, results {ours['rounds']}, first at"
              f" {ours['first_result_s']} s, last at {ours['last_result_s']} s, loads {ours['sum_first_run_s']:.2f} s,"
              f" timing process per step {ours['phase_totals']}",
              flush=True)
        print(f"done {name}: ours {ours_ms:.4f} ms (tune {ours['wall_s']:.1f} s) torch.mm {torch_ms:.4f}"
              f" inductor {row.get('inductor', {}).get('inductor_ms')} (tune {row.get('inductor', {}).get('tune_s')})"
              f" spread {100 * spread:.1f}%", flush=True)
    exhaustive = None
    if not args.skip_exhaustive:
        problem = make_problem(device="cuda", m=4096, n=4096, k=4096, dtype="bfloat16")
        ex = tune(problem, search="exhaustive")
        ex_ms, torch_ms, verdict = side.time_winner(problem, ex["winner"], ex["kernel_dir"])
        default_winner = rows[0]["ours"]["winner"]
        def_ms, _, _ = side.time_winner(problem, default_winner, rows[0]["ours"]["kernel_dir"])
        exhaustive = {"tune": ex, "winner_ms": ex_ms, "default_winner_ms": def_ms, "torch_mm_ms": torch_ms}
        print(f"exhaustive 4096^3 bf16: {ex['wall_s']:.1f} s, winner {ex['winner']['uid']} {ex_ms:.4f} ms,"
              f" default winner {def_ms:.4f} ms, torch.mm {torch_ms:.4f}; {ex['counts']} pruned {ex['pruned']}"
              f" compiled {ex['compiled']}", flush=True)
    write_json("gpu_engine.json", {"rows": rows, "exhaustive": exhaustive})
    print()
    print(f"{'problem':20} {'ours tune s':>11} {'ind. tune s':>11} {'ours ms':>8} {'ind. ms':>8} {'torch ms':>8}"
          f" {'compiled':>8} {'max load s':>10} {'spread':>7}  counts / timing")
    for r in rows:
        ind = r.get("inductor", {})
        o = r["ours"]
        print(f"{r['problem']:20} {o['wall_s']:11.1f} {ind.get('tune_s', float('nan')):11.1f} {r['ours_ms']:8.4f}"
              f" {ind.get('inductor_ms', float('nan')):8.4f} {r['torch_mm_ms']:8.4f} {o['compiled']:8d}"
              f" {o['max_first_run_s'] or 0:10.3f} {100 * r['repeat_spread']:6.1f}%  {o['counts']} {o['timing_modes']}")
    print(f"\nwhole process, cold (interpreter start to tuned kernel): {'problem':20} {'autotune mm s':>13}"
          f" {'inductor s':>10}")
    for r in rows:
        print(f"{'':58}{r['problem']:20} {r['cli'].get('process_s', float('nan')):13.1f}"
              f" {r.get('inductor', {}).get('process_s', float('nan')):10.1f} {r['cli'].get('error', '')[-200:]}")
    if exhaustive:
        ex = exhaustive
        print(f"exhaustive 4096^3 bf16: tune {ex['tune']['wall_s']:.1f} s; winner {ex['winner_ms']:.4f} ms vs default"
              f" {ex['default_winner_ms']:.4f} vs torch.mm {ex['torch_mm_ms']:.4f}; {ex['tune']['counts']};"
              f" pruned {ex['tune']['pruned']}")


if __name__ == "__main__":
    main()
