"""Where a cold tune's seconds go, and how good its pick is.

Modes (each with fresh autotune and Triton caches):

  list     the suite tuned in one `autotune mm --from shapes.json --json` process: the
           command's wall, each problem's tune seconds and phases (autotune_cli/store/phases.py),
           the phase totals.
  each     every problem of the suite as its own `autotune mm ... --json` process: the wall
           of each, and the phase totals.
  compare  `list` with another checkout (--before DIR, e.g. the previous main) and with this
           one, then both picks and torch.mm timed side by side in this process (bench/common
           SideBySide: one timer, interleaved passes): the walls and after/before per pick.
  quality  for a few shapes (--shapes), the default pick, the exhaustive search's pick, and
           the whole exhaustive space measured once through the tuner's executor (model
           order, under --limit seconds a shape: the slow truth); then the two picks, the
           truth's fastest few and torch.mm timed side by side, each pick's time over the
           best of them.

PYTHONPATH=. python3 bench/cold_tune.py --mode list [--only TEXT] [--extra "--search default"]
PYTHONPATH=. python3 bench/cold_tune.py --mode compare --before /path/to/old/checkout
PYTHONPATH=. python3 bench/cold_tune.py --mode quality --limit 60 --shapes 4096x4096x4096:bf16,...

The suite: the 12 shapes of bench/gpu_llm_suite.py, one more bmm and one more addmm.
Writes $OUT/cold_tune_<mode>.json (or bench_out/).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.gpu_llm_suite import SHAPES  # noqa: E402
from autotune_cli.store.results import params_str  # noqa: E402

# The suite as shapes-file entries (autotune_cli/model/shapes_file.py: the fields of mm's flags).
EXTRA = [
    ("bmm 16x1024x1024x64 fp16", dict(m=1024, n=1024, k=64, batch=16, dtype="float16")),
    ("addmm 4096x4096x1024 bf16", dict(m=4096, n=4096, k=1024, dtype="bfloat16", bias="n")),
]
DEVICE = "cuda"  # --device: cpu runs the list modes through the interpreter (a smoke test)
QUALITY = "4096x4096x4096:bfloat16:nn,1x4096x4096:bfloat16:nt,3000x1000x777:float16:nn"


def entry_of(spec: dict) -> dict:
    entry = {k: v for k, v in spec.items() if k != "bias"}
    if spec.get("bias"):
        entry["bias"] = True
        entry["bias_shape"] = spec["bias"]
    return entry


def suite(only: str | None) -> list[tuple[str, dict]]:
    rows = [(name, entry_of(spec)) for name, spec in SHAPES + EXTRA]
    if only:
        parts = [p.replace("_", " ") for p in only.split(",")]
        rows = [(n, e) for n, e in rows if any(p in n for p in parts)]
    return rows


def flags(entry: dict) -> list[str]:
    out = []
    for name in ("m", "n", "k", "batch", "dtype", "layout"):
        if name in entry:
            out += [f"--{name}", str(entry[name])]
    if entry.get("bias"):
        out += ["--bias", "--bias-shape", entry.get("bias_shape", "n")]
    if entry.get("allow_tf32"):
        out.append("--allow-tf32")
    return out


def fresh_env(tree: Path) -> dict:
    return {**os.environ, "AUTOTUNE_CACHE_DIR": tempfile.mkdtemp(prefix="autotune-cold-"),
            "TRITON_CACHE_DIR": tempfile.mkdtemp(prefix="triton-cold-"),
            "PYTHONPATH": os.pathsep.join([str(tree)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                         if p and Path(p).resolve() != ROOT])}


CHILD: subprocess.Popen | None = None  # the `autotune` process running now (SIGTERM stops it too)
TIMEOUT_S = 600.0


def _stop_child(signum, frame) -> None:
    if CHILD is not None and CHILD.poll() is None:
        os.killpg(CHILD.pid, signal.SIGTERM)
    raise SystemExit(128 + signum)


def command(tree: Path, args: list[str], timeout: float | None = None) -> tuple[float, dict | None, str]:
    """(wall seconds, the JSON document or None, stderr's tail) of one `autotune mm` process."""
    global CHILD
    timeout = timeout or TIMEOUT_S
    began = time.perf_counter()
    CHILD = subprocess.Popen([sys.executable, "-m", "autotune_cli", "mm", *args, "--device", DEVICE, "--json"],
                             env=fresh_env(tree), cwd=tempfile.gettempdir(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = CHILD.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(CHILD.pid, signal.SIGTERM)
        stdout, stderr = CHILD.communicate()
        return time.perf_counter() - began, None, f"timeout after {timeout:g} s: {stderr[-1200:]}"
    finally:
        CHILD = None
    wall = time.perf_counter() - began
    try:
        return wall, json.loads(stdout), stderr[-1500:]
    except ValueError:
        return wall, None, stderr[-1500:]


def add_phases(total: dict, row: dict) -> None:
    for group in ("phases", "worker_s"):
        for name, seconds in (row.get(group) or {}).items():
            key = f"{group}.{name}"
            total[key] = total.get(key, 0.0) + seconds
    pool = row.get("compile_pool_s")
    if pool:
        total["compile_pool.kernels"] = total.get("compile_pool.kernels", 0) + pool["kernels"]
        total["compile_pool.busy"] = total.get("compile_pool.busy", 0.0) + pool["busy"]


def detail(row: dict) -> str:
    """The timing process's steps, the compile pool, the worker starts, the rounds' counts."""
    steps = " ".join(f"{k}={v:.2f}" for k, v in (row.get("worker_s") or {}).items())
    pool = row.get("compile_pool_s") or {}
    starts = " ".join(f"{r}={s:.2f}" for r, s in row.get("startups") or [])
    text = (f"worker: {steps}; pool: {pool.get('kernels', 0)} kernels {pool.get('busy', 0):.2f} s busy "
            f"over {pool.get('span', 0):.2f} s; starts: {starts}")
    if row.get("rounds"):
        text += f"; rounds {row['rounds']}"
    candidates = row.get("candidates")
    if candidates:
        counts: dict = {}
        for cand in candidates:
            counts[cand["status"]] = counts.get(cand["status"], 0) + 1
        text += f"; candidates {counts}"
    return text


def print_totals(total: dict) -> None:
    print("phase totals (s): " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                                           for k, v in total.items()))


def run_list(tree: Path, shapes: list[tuple[str, dict]], extra: list[str], label: str) -> dict:
    path = Path(tempfile.mkdtemp()) / "shapes.json"
    path.write_text(json.dumps([e for _, e in shapes]))
    wall, doc, tail = command(tree, ["--from", str(path), *extra])
    if doc is None:
        print(f"[{label}] failed after {wall:.1f} s: {tail}")
        return {"wall_s": wall, "error": tail}
    total: dict = {}
    print(f"[{label}] one process, {len(shapes)} problems: {wall:.1f} s wall; command stages {doc.get('stages_s')}")
    print(f"{'problem':34} {'tune s':>7} {'winner':28} {'ms':>8}  phases")
    for (name, _), row in zip(shapes, doc["problems"]):
        add_phases(total, row)
        winner = row.get("winner") or {}
        phases = " ".join(f"{k}={v:.2f}" for k, v in (row.get("phases") or {}).items())
        print(f"{name:34} {row.get('tune_seconds') or 0:7.2f} {winner.get('uid', '-'):28} "
              f"{winner.get('ms') or float('nan'):8.4f}  {phases}")
        print(f"{'':34} {detail(row)}")
    print_totals(total)
    return {"wall_s": wall, "document": doc, "totals": total}


def run_each(tree: Path, shapes: list[tuple[str, dict]], extra: list[str], label: str) -> dict:
    rows, total = [], {}
    print(f"[{label}] one process per problem")
    print(f"{'problem':34} {'wall s':>7} {'tune s':>7} {'age s':>6} {'winner':28}  phases")
    for name, entry in shapes:
        wall, doc, tail = command(tree, flags(entry) + extra)
        if doc is None:
            print(f"{name:34} {wall:7.2f} failed: {tail[-300:]}")
            rows.append({"shape": name, "wall_s": wall, "error": tail})
            continue
        add_phases(total, doc)
        winner = doc.get("winner") or {}
        phases = " ".join(f"{k}={v:.2f}" for k, v in (doc.get("phases") or {}).items())
        age = (doc.get("command_s") or {}).get("process_age") or 0.0
        print(f"{name:34} {wall:7.2f} {doc.get('tune_seconds') or 0:7.2f} {age:6.2f} "
              f"{winner.get('uid', '-'):28}  {phases}", flush=True)
        print(f"{'':34} {detail(doc)}; command {doc.get('command_s')}", flush=True)
        rows.append({"shape": name, "wall_s": wall, "winner": winner, "phases": doc.get("phases"),
                     "worker_s": doc.get("worker_s"), "command_s": doc.get("command_s"),
                     "startups": doc.get("startups"), "compile_pool_s": doc.get("compile_pool_s"),
                     "candidates": doc.get("candidates")})
    walls = [r["wall_s"] for r in rows]
    print(f"[{label}] sum of walls {sum(walls):.1f} s, max {max(walls):.1f} s, "
          f"{sum(1 for w in walls if w > 8.0)} of {len(walls)} over 8 s")
    print_totals(total)
    return {"rows": rows, "totals": total}


def problem_of(entry: dict):
    from autotune_cli.model.shapes_file import problem_from_entry

    return problem_from_entry(entry, DEVICE)


SIDE = None  # one SideBySide (one timer, one CUDA context) for every comparison


def side_by_side(problem, winners: list[dict]) -> tuple[list[float], float, list]:
    """Each winner's kernel time and torch.mm's, timed together in interleaved passes."""
    global SIDE
    from bench.common import SideBySide

    if SIDE is None:
        SIDE = SideBySide()
    kernel_dir = tempfile.mkdtemp(prefix="kernels-")
    runs = [SIDE.runnable(problem, w, kernel_dir) for w in winners] + [SIDE.anchor(problem)]
    times, verdicts = SIDE.time_many(problem, runs, rounds=4)
    return times[:-1], times[-1], verdicts[:-1]


def run_compare(before: Path, shapes, extra) -> dict:
    old = run_list(before, shapes, extra, "before")
    new = run_list(ROOT, shapes, extra, "after")
    rows = []
    if "document" not in old or "document" not in new:
        return {"before": old, "after": new}
    print()
    print(f"{'problem':34} {'before':28} {'after':28} {'b ms':>8} {'a ms':>8} {'a/b':>6} {'torch':>8}")
    for (name, entry), b, a in zip(shapes, old["document"]["problems"], new["document"]["problems"]):
        if not b.get("winner") or not a.get("winner"):
            print(f"{name:34} no winner")
            continue
        problem = problem_of(entry)
        same = (b["winner"]["uid"], b["winner"]["params"]) == (a["winner"]["uid"], a["winner"]["params"])
        if same:  # one kernel: nothing to time against itself
            rows.append({"shape": name, "before": b["winner"], "after": a["winner"], "same": True, "ratio": 1.0})
            print(f"{name:34} {b['winner']['uid']:28} {'(the same pick)':28} {'':8} {'':8} {1.0:6.3f}", flush=True)
            continue
        (tb, ta), torch_ms, verdicts = side_by_side(problem, [b["winner"], a["winner"]])
        rows.append({"shape": name, "before": b["winner"], "after": a["winner"], "before_ms": tb,
                     "after_ms": ta, "torch_ms": torch_ms, "ratio": ta / tb,
                     "verified": [v.ok for v in verdicts]})
        print(f"{name:34} {b['winner']['uid']:28} {a['winner']['uid']:28} {tb:8.4f} {ta:8.4f} "
              f"{ta / tb:6.3f} {torch_ms:8.4f}  {params_str(b['winner']['params'])} -> "
              f"{params_str(a['winner']['params'])}", flush=True)
    worst = max((r["ratio"] for r in rows), default=float("nan"))
    print(f"walls: before {old['wall_s']:.1f} s, after {new['wall_s']:.1f} s; worst after/before kernel {worst:.3f}; "
          f"{sum(1 for r in rows if r.get('same'))} of {len(rows)} picks the same kernel")
    return {"before": old, "after": new, "picks": rows}


def truth(problem, limit_s: float, executor=None) -> tuple[list[dict], int]:
    """Every config of the exhaustive space (after the static prune) measured once with the
    tuner's own timing policy, in the exhaustive search's model order (templates the model
    does not describe first), until `limit_s` runs out: ([{uid, params, ms}] of those timed,
    fastest first; the size of the space)."""
    from autotune_cli.candidates.choices import get_choices
    from autotune_cli.hardware.device import probe_device
    from autotune_cli.runner.executor import LocalExecutor
    from autotune_cli.search.exhaustive import _modelled, rank_by_model
    from autotune_cli.settings import TuneSettings

    settings = TuneSettings(device=DEVICE, search="exhaustive", cache_dir=Path(tempfile.mkdtemp()))
    device = probe_device(DEVICE)
    choice_set = get_choices(problem, device, settings)
    modelled = [c for c in choice_set.choices if _modelled(c)]
    ordered = [c for c in choice_set.choices if not _modelled(c)] + rank_by_model(problem, modelled, device.sm_count)
    policy = settings.measure.timing_for(problem, device.device_type)
    if executor is not None:  # warm already (the default tune's)
        results = executor.run(ordered, policy=policy, deadline=time.monotonic() + limit_s)
    else:
        with LocalExecutor(device, settings) as executor:
            executor.start()
            results = executor.run(ordered, policy=policy, deadline=time.monotonic() + limit_s)
    timed = [r for r in results if r.ok]
    gave_up = sum(1 for r in results if r.status == "skipped" and r.error.startswith("given up"))
    print(f"  truth: {len(timed)} of {len(ordered)} configs timed fully in {limit_s:g} s, {gave_up} more given up "
          f"after their first runs (over {settings.measure.give_up_over:g}x the best so far); "
          f"{len(choice_set.pruned)} pruned statically")
    return [{"uid": r.uid, "params": r.params, "ms": r.ms} for r in sorted(timed, key=lambda r: r.ms)], len(ordered)


def tuned(problem, search: str, keep: bool = False):
    """(the pick, tune seconds), and with `keep` the tuner, still open (its workers warm)."""
    from autotune_cli.settings import TuneSettings
    from autotune_cli.tune.tuner import Tuner

    settings = TuneSettings(device=DEVICE, search=search, cache_dir=Path(tempfile.mkdtemp()), force=True)
    began = time.perf_counter()
    tuner = Tuner(settings)
    try:
        outcome = tuner.tune(problem)
    finally:
        if not keep:
            tuner.close()
    seconds = time.perf_counter() - began
    winner = outcome.winner.to_dict() if outcome.winner else None
    return (winner, seconds, tuner) if keep else (winner, seconds)


def parse_shape(text: str) -> dict:
    size, dtype, layout = (text.split(":") + ["float16", "nn"])[:3]
    m, n, k = (int(v) for v in size.split("x"))
    return {"m": m, "n": n, "k": k, "dtype": dtype, "layout": layout}


def run_quality(shapes_text: str, limit_s: float, top: int = 3, with_exhaustive: bool = True) -> list[dict]:
    rows = []
    for text in shapes_text.split(","):
        entry = parse_shape(text)
        problem = problem_of(entry)
        print(f"== {problem.describe()}", flush=True)
        default, default_s, tuner = tuned(problem, "default", keep=True)
        try:
            exhaustive, exhaustive_s = tuned(problem, "exhaustive") if with_exhaustive else (default, float("nan"))
            found, space = truth(problem, limit_s, tuner.started_executor)
        finally:
            tuner.close()
        picks = [default, exhaustive] + found[:top]
        times, torch_ms, verdicts = side_by_side(problem, picks)
        best = min(t for t, v in zip(times, verdicts) if v.ok)
        row = {"problem": problem.describe(), "default": default, "default_ms": times[0],
               "default_tune_s": default_s, "exhaustive": exhaustive, "exhaustive_ms": times[1],
               "exhaustive_tune_s": exhaustive_s, "truth_timed": len(found), "truth_space": space,
               "truth_best": found[:top], "truth_best_ms": times[2:], "best_ms": best,
               "torch_ms": torch_ms, "default_over_best": times[0] / best,
               "exhaustive_over_best": times[1] / best}
        rows.append(row)
        for label, pick, ms in [("default", default, times[0]), ("exhaustive", exhaustive, times[1])] + [
                (f"truth #{i + 1}", f, t) for i, (f, t) in enumerate(zip(found[:top], times[2:]))]:
            print(f"    {label:11} {pick['uid']:28} {params_str(pick['params']):40} {ms:.4f} ms")
        print(f"  default {default['uid']} {times[0]:.4f} ms ({default_s:.1f} s), exhaustive "
              f"{exhaustive['uid']} {times[1]:.4f} ms ({exhaustive_s:.1f} s), truth's best "
              f"{found[0]['uid'] if found else '-'} {min(times[2:], default=float('nan')):.4f} ms, "
              f"torch.mm {torch_ms:.4f}; default/best {times[0] / best:.3f}, exhaustive/best {times[1] / best:.3f}",
              flush=True)
    print()
    print(f"{'problem':30} {'default/best':>12} {'exhaust/best':>12} {'timed':>11}")
    for r in rows:
        print(f"{r['problem'][:30]:30} {r['default_over_best']:12.3f} {r['exhaustive_over_best']:12.3f} "
              f"{r['truth_timed']:5d}/{r['truth_space']:<5d}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("list", "each", "compare", "quality"), default="list")
    parser.add_argument("--only", default=None, help="comma-separated substrings of shape names (_ for a space)")
    parser.add_argument("--extra", default="", help="more flags for each `autotune mm`")
    parser.add_argument("--before", type=Path, default=None, help="compare: the other checkout")
    parser.add_argument("--shapes", default=QUALITY, help="quality: MxNxK:dtype:layout, comma-separated")
    parser.add_argument("--limit", type=float, default=60.0, help="quality: seconds for the truth, a shape")
    parser.add_argument("--skip-exhaustive", action="store_true",
                        help="quality: the default pick against the truth only (the exhaustive row repeats it)")
    parser.add_argument("--device", default="cuda", help="list, each: cpu for a smoke test through the interpreter")
    parser.add_argument("--entries", type=Path, default=None,
                        help="list, each, compare: a shapes file instead of the suite")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds an `autotune` process may take")
    args = parser.parse_args()
    global DEVICE, TIMEOUT_S
    DEVICE, TIMEOUT_S = args.device, args.timeout
    signal.signal(signal.SIGTERM, _stop_child)
    shapes = suite(args.only)
    if args.entries is not None:
        shapes = [(f"entry {i}", e) for i, e in enumerate(json.loads(args.entries.read_text()), 1)]
    extra = shlex.split(args.extra)
    if args.mode == "list":
        result = run_list(ROOT, shapes, extra, "list")
    elif args.mode == "each":
        result = run_each(ROOT, shapes, extra, "each")
    elif args.mode == "compare":
        if args.before is None:
            raise SystemExit("--mode compare needs --before DIR")
        result = run_compare(args.before.resolve(), shapes, extra)
    else:
        result = run_quality(args.shapes, args.limit, with_exhaustive=not args.skip_exhaustive)
    out = Path(os.environ.get("OUT") or ROOT / "bench_out")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"cold_tune_{args.mode}.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
