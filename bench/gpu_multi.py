"""Two GPUs: `autotune model` on one GPU against two GPUs of the same host.

A model of linear layers of distinct shapes (eight distinct problems by default;
--problems N for a larger model; bf16) is saved with torch.export and tuned cold twice,
each time with a fresh cache: `--gpus 1`, then `--gpus 2`. Reported: the wall time of
each run (the whole command: start-up, extraction, tuning), the speed-up, which GPU tuned
which problem, and whether the two runs picked the same winners (and how far apart their
times are where they did not).

Run on a host with two GPUs:
    PYTHONPATH=. python3 bench/gpu_multi.py [--m 256] [--problems 8] [--budget 120] [--triton-cache warm]
Writes $OUT/gpu_multi_<cold|warm>.json (or bench_out/).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune_cli.store.results import Candidate  # noqa: E402
from autotune_cli.settings import Switches  # noqa: E402
from bench.common import write_json  # noqa: E402

OUT_FEATURES = (1024, 2048, 3072, 4096, 5120, 6144, 8192, 14336)  # eight distinct problems
IN_FEATURES = 4096


def out_features(problems: int) -> tuple[int, ...]:
    """The layers' widths: the eight above, then further multiples of 1024 (distinct) for a
    larger model."""
    extra = [n for n in range(1024, 1024 * (problems + 8), 1024) if n not in OUT_FEATURES]
    return (OUT_FEATURES + tuple(extra))[:problems]


def save_model(folder: Path, m: int, problems: int = len(OUT_FEATURES)) -> Path:
    import torch
    import torch.nn as nn

    class Linears(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(IN_FEATURES, n, bias=False) for n in out_features(problems))

        def forward(self, x):
            return tuple(layer(x) for layer in self.layers)

    model = Linears().to(torch.bfloat16).eval()
    example = (torch.randn(m, IN_FEATURES, dtype=torch.bfloat16),)
    path = folder / f"linears_{problems}.pt2"
    torch.export.save(torch.export.export(model, example), str(path))
    return path


def tune(path: Path, gpus: int, cache_dir: Path, extra: list[str]) -> tuple[float, dict, str]:
    command = [sys.executable, "-m", "autotune_cli", "model", str(path), "--device", "cuda",
               "--gpus", str(gpus), "--json", *extra]
    # Both runs start cold: their own autotune cache and their own Triton cache.
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": str(cache_dir), "TRITON_CACHE_DIR": str(cache_dir / "triton")}
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return wall, json.loads(proc.stdout), proc.stderr


def compile_pipeline(cache_dir: Path) -> list[dict]:
    """Per tuned problem, from the cache: when its results came (s after its tune began),
    and its compile pool's work (kernels built, when the first and last were done, the
    seconds spent compiling in all): whether the GPU waited on compiles or on timing."""
    doc = json.loads((cache_dir / "autotune-cache.json").read_text())
    lines = []
    for entry in doc.get("entries", {}).values():
        timeline = entry.get("timeline") or []
        compiles = entry.get("compiles") or []
        phases: dict[str, float] = {}
        for candidate in entry.get("candidates", []):
            for name, seconds in (candidate.get("phases") or {}).items():
                phases[name] = round(phases.get(name, 0.0) + seconds, 3)
        gaps = sorted(((round(b[2] - a[2], 3), b[0], b[1]) for a, b in zip(timeline, timeline[1:])), reverse=True)[:3]
        lines.append({"problem": entry.get("problem", {}).get("n"), "tune_s": entry.get("tune_seconds"),
                      "phases": phases, "longest_gaps": gaps,
                      "statuses": sorted({c["status"] for c in entry.get("candidates", [])}),
                      "timing_modes": sorted({c.get("timing") or "" for c in entry.get("candidates", [])}),
                      "results": len(timeline),
                      "measured_by_another_gpu": sum(1 for c in entry.get("candidates", [])
                                                     if c.get("measured_on") is not None),
                      "first_result_s": timeline[0][2] if timeline else None,
                      "first_triton_s": next((t[2] for t in timeline if not t[0].startswith("aten")), None),
                      "last_result_s": timeline[-1][2] if timeline else None,
                      "compiled": len(compiles),
                      "first_compiled_s": min((c[1] for c in compiles), default=None),
                      "last_compiled_s": max((c[1] for c in compiles), default=None),
                      "compile_s_sum": round(sum(c[2] for c in compiles), 2),
                      "compile_s_max": max((c[2] for c in compiles), default=None),
                      "compile_pool": entry.get("compile_pool")})
    return lines


def first_problem_detail(cache_dir: Path) -> list[dict]:
    """For each problem whose tune compiled kernels (the first on each device): the first
    Triton candidate's phases (the timing process's first Triton launch in its life), the
    median phases of its other Triton candidates, and the pace of its results once every
    kernel was compiled (s per candidate: what the timing process takes when it never
    waits for a compile)."""
    doc = json.loads((cache_dir / "autotune-cache.json").read_text())
    lines = []
    for entry in doc.get("entries", {}).values():
        compiles = entry.get("compiles") or []
        if not compiles:
            continue
        by_label = {Candidate.from_dict(c).label(): c.get("phases") or {} for c in entry.get("candidates", [])}
        timeline = [t for t in entry.get("timeline") or [] if not t[0].startswith("aten")]
        triton = [c.get("phases") or {} for c in entry.get("candidates", []) if not c["uid"].startswith("aten")]
        last_compiled = max(c[1] for c in compiles)
        after = [t[2] for t in timeline if t[2] >= last_compiled]
        medians = {name: round(statistics.median(p.get(name, 0.0) for p in triton[1:]), 4)
                   for name in ("build", "inputs", "first_run", "check", "timing")} if len(triton) > 1 else {}
        lines.append({"problem": entry.get("problem", {}).get("n"),
                      "first_triton_label": timeline[0][0] if timeline else None,
                      "first_triton_at_s": timeline[0][2] if timeline else None,
                      "median_phases_other_triton": medians,
                      "results_after_last_compile": len(after),
                      "s_per_result_after_last_compile": round((after[-1] - after[0]) / max(len(after) - 1, 1), 4)
                      if len(after) > 1 else None,
                      "first_triton_phases": by_label.get(timeline[0][0]) if timeline else None})
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=256, help="tokens: M of every problem")
    parser.add_argument("--problems", type=int, default=len(OUT_FEATURES),
                        help="distinct problems in the model (default 8; more: a larger model)")
    parser.add_argument("--budget", type=float, default=None, help="--budget per problem (s)")
    parser.add_argument("--templates", default=None, help="--templates for both runs")
    parser.add_argument("--triton-cache", choices=("cold", "warm"), default="cold",
                        help="cold: each run compiles every kernel; warm: each run starts from a copy "
                             "of one Triton cache filled by an unmeasured run first (kernels compiled "
                             "before, as after a first model), the autotune cache still empty")
    parser.add_argument("--one-gpu-compile-workers", type=int, default=None,
                        help="--compile-workers for the one-GPU run only (a control: the two-GPU run's "
                             "default pool is one device's pool per GPU)")
    parser.add_argument("--label", default="", help="appended to the JSON file's name")
    args = parser.parse_args()

    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible < 2:
        raise SystemExit(f"needs two GPUs; {visible} visible")
    names = [torch.cuda.get_device_name(i) for i in range(2)]
    extra = []
    if args.budget:
        extra += ["--budget", str(args.budget)]
    if args.templates:
        extra += ["--templates", args.templates]

    work = Path(tempfile.mkdtemp(prefix="autotune-multi-"))
    path = save_model(work, args.m, args.problems)
    runs = {}
    if args.triton_cache == "warm":
        wall, _, _ = tune(path, 1, work / "prewarm", extra)
        print(f"unmeasured run to fill the Triton cache: {wall:.1f} s", flush=True)
    for gpus in (1, 2):
        if args.triton_cache == "warm":
            shutil.copytree(work / "prewarm" / "triton", work / f"cache-{gpus}" / "triton")
        own = (["--compile-workers", str(args.one_gpu_compile_workers)]
               if gpus == 1 and args.one_gpu_compile_workers is not None else [])
        wall, doc, stderr = tune(path, gpus, work / f"cache-{gpus}", extra + own)
        rows = doc["problems"]
        runs[gpus] = {"wall_s": wall, "rows": rows, "failed": [r["describe"] for r in rows if not r["winner"]],
                      "per_slot": {str(s): sum(1 for r in rows if r.get("slot") == s)
                                   for s in sorted({r.get("slot") for r in rows if r.get("slot") is not None})},
                      "tune_s_per_slot": {str(s): round(sum(r.get("tune_seconds") or 0 for r in rows
                                                            if r.get("slot") == s), 2)
                                          for s in sorted({r.get("slot") for r in rows if r.get("slot") is not None})},
                      "tune_s": [r.get("tune_seconds") for r in rows],
                      "stages_s": doc.get("stages_s"),
                      "spans_s": [[r.get("slot"), *(r.get("span_s") or [])] for r in rows]}
        print(f"--gpus {gpus}: {wall:.1f} s wall, {len(rows)} problems, per GPU {runs[gpus]['per_slot']}, "
              f"tune s per GPU {runs[gpus]['tune_s_per_slot']}, per problem {runs[gpus]['tune_s']}, "
              f"failed {runs[gpus]['failed'] or 'none'}", flush=True)
        pipeline = compile_pipeline(work / f"cache-{gpus}")
        runs[gpus]["pipeline"] = pipeline
        for line in pipeline:
            print(f"  pipeline {line}", flush=True)
        detail = first_problem_detail(work / f"cache-{gpus}")
        runs[gpus]["first_problem_detail"] = detail
        for line in detail:
            print(f"  first problem {line}", flush=True)
        print(f"  stages (s since the command began) {runs[gpus]['stages_s']}; problem spans [slot, begin, end] "
              f"{runs[gpus]['spans_s']}", flush=True)

    # The command's fixed cost: the one-GPU run again on its own cache, every problem in it
    # (start-up, reading the model, the cache's answers, exit; no worker starts).
    cached_wall, cached_doc, _ = tune(path, 1, work / "cache-1", extra)
    print(f"--gpus 1 again, every problem cached: {cached_wall:.2f} s wall, stages {cached_doc.get('stages_s')}",
          flush=True)
    one, two = ({r["describe"]: r for r in runs[g]["rows"]} for g in (1, 2))
    comparison = []
    for describe, a in one.items():
        b = two.get(describe) or {}
        wa, wb = a.get("winner") or {}, b.get("winner") or {}
        same = bool(wa) and wa.get("uid") == wb.get("uid") and wa.get("params") == wb.get("params")
        ratio = wb["ms"] / wa["ms"] if wa.get("ms") and wb.get("ms") else None
        comparison.append({"problem": describe, "same_winner": same,
                           "one_gpu": {"uid": wa.get("uid"), "params": wa.get("params"), "ms": wa.get("ms")},
                           "two_gpus": {"uid": wb.get("uid"), "params": wb.get("params"), "ms": wb.get("ms"),
                                        "slot": b.get("slot"), "device": b.get("device")},
                           "ms_ratio_two_over_one": ratio})
        print(f"  {describe:40s} 1 GPU {wa.get('uid')} {wa.get('ms')} ms | 2 GPUs (slot {b.get('slot')}) "
              f"{wb.get('uid')} {wb.get('ms')} ms | same winner: {same}"
              + (f", time ratio {ratio:.3f}" if ratio else ""))
    speedup = runs[1]["wall_s"] / runs[2]["wall_s"]
    label = f" {args.label}" if args.label else ""
    print(f"[{args.problems} problems, triton cache {args.triton_cache}{label}] speed-up with two GPUs: "
          f"{speedup:.2f}x, two over one {1 / speedup:.2f} ({runs[1]['wall_s']:.1f} s -> {runs[2]['wall_s']:.1f} s); "
          f"same winners {sum(c['same_winner'] for c in comparison)}/{len(comparison)}")
    write_json(f"gpu_multi_{args.triton_cache}{'_' + args.label if args.label else ''}.json", {
        "gpus": names, "m": args.m, "problems": args.problems, "extra": extra, "triton_cache": args.triton_cache,
        "one_gpu_compile_workers": args.one_gpu_compile_workers,
        "offline_compile": Switches.from_environment().offline_compile,
        "wall_s": {"1": runs[1]["wall_s"], "2": runs[2]["wall_s"]}, "speedup": speedup,
        "per_slot_two_gpus": runs[2]["per_slot"],
        "tune_s": {"1": runs[1]["tune_s"], "2": runs[2]["tune_s"]}, "comparison": comparison,
        "failed": {"1": runs[1]["failed"], "2": runs[2]["failed"]},
        "stages_s": {"1": runs[1]["stages_s"], "2": runs[2]["stages_s"]},
        "spans_s": {"1": runs[1]["spans_s"], "2": runs[2]["spans_s"]},
        "pipeline": {"1": runs[1]["pipeline"], "2": runs[2]["pipeline"]},
        "first_problem_detail": {"1": runs[1]["first_problem_detail"], "2": runs[2]["first_problem_detail"]},
        "warm_triton": Switches.from_environment().warm_triton != "0",
        "cached_rerun": {"wall_s": cached_wall, "stages_s": cached_doc.get("stages_s")},
    })


if __name__ == "__main__":
    main()
