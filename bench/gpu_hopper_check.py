"""Issue 7's GPU check: every config of the two new templates (triton::mm_persistent_tma,
triton::mm_splitk), built directly, verified against a float64 reference and timed against
torch.mm with the same timer (CUDA events, L2 flushed), one process, no tuner.

For each problem, the configs are the ones the tuner would benchmark: the template's
heuristic, then the prune pipeline (hardware, shared memory, registers) of `get_choices` on
this device. Split-K configs are also tried with ATOMIC_ADD=1, to see whether the
deterministic workspace reduction costs anything measurable; the table shows split-K's best
per reduction (ws: two launches, atomic, fused: one launch, FUSED_REDUCE=1). A config that fails to compile,
crashes or computes a wrong result is recorded and skipped; a CUDA error that leaves the
context unusable ends the run with what was measured so far. A time budget (default 170 s)
keeps the whole run near three minutes: configs past it are recorded as skipped.

Run on the H200:  PYTHONPATH=. python3 bench/gpu_hopper_check.py [--budget-s 170] [--only 4096]
                                                                [--baseline]  (adds triton::mm)
Writes $OUT/gpu_hopper_check.json (or bench_out/) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune_cli.bench.timing import CudaTimer  # noqa: E402
from autotune_cli.bench.verify import check, make_operands, poison, reference  # noqa: E402
from autotune_cli.choices import get_choices  # noqa: E402
from autotune_cli.fingerprint import probe_device  # noqa: E402
from autotune_cli.problem import make_problem  # noqa: E402
from autotune_cli.results import params_str  # noqa: E402
from autotune_cli.settings import TimingPolicy, TuneSettings  # noqa: E402
from autotune_cli.templates import get_template  # noqa: E402

TMA = "triton::mm_persistent_tma"
SPLITK = "triton::mm_splitk"
PROBLEMS = [
    ("mm 4096^3 bf16", dict(m=4096, n=4096, k=4096, dtype="bfloat16")),
    ("mm 16x4096x14336 bf16", dict(m=16, n=4096, k=14336, dtype="bfloat16")),
    ("mm 64x8192x8192 fp16", dict(m=64, n=8192, k=8192, dtype="float16")),
    ("mm 1000x3000x777 fp16", dict(m=1000, n=3000, k=777, dtype="float16")),
    ("addmm 2048x8192x4096 bf16 bias[n]", dict(m=2048, n=8192, k=4096, dtype="bfloat16", bias="n")),
    ("mm 4096^3 bf16 nt", dict(m=4096, n=4096, k=4096, dtype="bfloat16", layout="nt")),
]
POLICY = TimingPolicy(warmup=2, min_runs=10, max_runs=60, budget_ms=25.0)
ATOMIC_VARIANTS = 4  # split-K: the first few configs are also tried with ATOMIC_ADD=1


class DeadContext(RuntimeError):
    """The CUDA context failed; nothing more can run in this process."""


def short(exc: BaseException) -> str:
    lines = [line for line in f"{type(exc).__name__}: {exc}".splitlines() if line.strip()]
    return " | ".join(lines[-3:])[:300]


class Check:
    def __init__(self, budget_s: float) -> None:
        import torch

        self.torch = torch
        self.device = probe_device("cuda")
        self.timer = CudaTimer(self.device.l2_bytes)
        self.kernel_dir = tempfile.mkdtemp(prefix="autotune-hopper-")
        self.started = time.perf_counter()
        self.deadline = self.started + budget_s

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def sync(self) -> None:
        try:
            self.torch.cuda.synchronize()
        except Exception as exc:  # a sticky CUDA error: the context is gone
            raise DeadContext(short(exc)) from exc

    def time(self, run, ops) -> float:
        if hasattr(self.timer, "measure"):
            return self.timer.measure(run, ops, POLICY).median_ms
        return self.timer(lambda: run(ops), POLICY).median_ms

    def candidates(self, problem, uid):
        """(configs to try, note): the heuristic's configs after the prune pipeline."""
        template = get_template(uid)
        reason = template.unavailable_reason(problem, self.device)
        if reason:
            return [], f"unavailable: {reason}"
        result = get_choices(problem, self.device, TuneSettings(device="cuda"), templates=[template])
        configs = [choice.config_dict for choice in result.choices]
        if uid == SPLITK:
            two_launch = [c for c in configs if not c.get("FUSED_REDUCE")]  # atomic + fused: refused
            configs += [{**c, "ATOMIC_ADD": 1} for c in two_launch[:ATOMIC_VARIANTS]]
        pruned = ", ".join(f"{n} by {stage}" for stage, n in result.pruned_counts().items())
        if not configs:
            why = pruned or ("split-K needs M*N <= 2^21 and K >= 1024" if uid == SPLITK
                             else "the heuristic yields nothing here")
            return [], f"not offered ({why})"
        return configs, f"pruned {pruned}" if pruned else ""

    def one(self, problem, uid, config, ops, ref, deadline: float) -> dict:
        template = get_template(uid)
        row = {"uid": uid, "config": config}
        if time.perf_counter() > deadline:
            return {**row, "status": "skipped", "error": "time budget spent"}
        started = time.perf_counter()
        try:
            params = template.full_params(problem, config)
            row["params"] = params
            run = template.build(problem, params, self.kernel_dir)
            poison(ops)
            run(ops)  # compiles
        except Exception as exc:
            self.sync()  # raises DeadContext if the failure killed the context
            return {**row, "status": "error", "error": short(exc)}
        self.sync()
        row["compile_s"] = round(time.perf_counter() - started, 2)
        verdict = check(problem, ops.out, ref)
        row["rel_error"] = verdict.rel_error
        if not verdict.ok:
            return {**row, "status": "wrong", "error": verdict.reason}
        try:
            row["ms"] = self.time(run, ops)
        except Exception as exc:
            self.sync()
            return {**row, "status": "error", "error": "timing: " + short(exc)}
        return {**row, "status": "ok"}

    def problem(self, name, spec, uids, problems_left: int) -> dict:
        """Every config of every template for one problem, round-robin over the templates,
        within this problem's share of the remaining budget."""
        torch = self.torch
        now = time.perf_counter()
        deadline = now + max(0.0, self.deadline - now) / max(problems_left, 1)
        problem = make_problem(device="cuda", **spec)
        ops = make_operands(problem, 1234, "cuda")
        ref = reference(problem, ops)
        torch.backends.cuda.matmul.allow_tf32 = problem.allow_tf32
        if problem.op == "addmm":
            anchor = lambda o: torch.addmm(o.bias, o.a, o.b, out=o.out)  # noqa: E731
        else:
            anchor = lambda o: torch.mm(o.a, o.b, out=o.out)  # noqa: E731
        torch_ms = self.time(anchor, ops)
        entry = {"problem": name, "key": problem.key(), "torch_mm_ms": torch_ms, "templates": {}}
        queues = {}
        for uid in uids:
            configs, note = self.candidates(problem, uid)
            queues[uid] = list(configs)
            entry["templates"][uid] = {"note": note, "rows": []}
        while any(queues.values()):
            for uid, queue in queues.items():
                if not queue:
                    continue
                config = queue.pop(0)
                row = self.one(problem, uid, config, ops, ref, deadline)
                entry["templates"][uid]["rows"].append(row)
                if row["status"] == "ok":
                    print(f"  {uid} {params_str(row['params']):42} {row['ms']:.4f} ms "
                          f"(compile {row['compile_s']:.1f} s)", flush=True)
                elif row["status"] != "skipped":
                    print(f"  {uid} {params_str(config):42} {row['status']}: {row['error']}", flush=True)
        skipped = sum(r["status"] == "skipped" for t in entry["templates"].values() for r in t["rows"])
        if skipped:
            print(f"  ({skipped} configs skipped: this problem's share of the budget is spent)", flush=True)
        del ref
        return entry


def reduction(config) -> str:
    """Split-K's reduction: "atomic", "fused" (one launch) or "ws" (two launches)."""
    if config.get("ATOMIC_ADD"):
        return "atomic"
    return "fused" if config.get("FUSED_REDUCE") else "ws"


def best(rows, mode=None):
    ok = [r for r in rows if r["status"] == "ok" and (mode is None or reduction(r["config"]) == mode)]
    return min(ok, key=lambda r: r["ms"]) if ok else None


def summary(entries) -> None:
    print()
    print(f"{'problem':36} {'template':30} {'best ms':>9} {'torch.mm':>9} {'torch/ours':>10}  "
          f"{'ok/tried':>8}  best config / note")
    for entry in entries:
        torch_ms = entry["torch_mm_ms"]
        for uid, result in entry["templates"].items():
            rows = result["rows"]
            variants = [(uid, None)]
            if uid == SPLITK and rows:
                variants = [(f"{uid} ({mode})", mode) for mode in ("ws", "fused", "atomic")]
            for label, mode in variants:
                top = best(rows, mode)
                tried = [r for r in rows if r["status"] != "skipped"
                         and (mode is None or reduction(r["config"]) == mode)]
                ok = [r for r in tried if r["status"] == "ok"]
                counts = f"{len(ok)}/{len(tried)}"
                if top is None:
                    print(f"{entry['problem']:36} {label:30} {'-':>9} {torch_ms:9.4f} {'-':>10}  "
                          f"{counts:>8}  {result['note'] or 'nothing ran'}")
                    continue
                print(f"{entry['problem']:36} {label:30} {top['ms']:9.4f} {torch_ms:9.4f} "
                      f"{torch_ms / top['ms']:10.3f}  {counts:>8}  {params_str(top['params'])}"
                      + (f"  [{result['note']}]" if result["note"] else ""))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget-s", type=float, default=170.0, help="stop starting configs after this")
    parser.add_argument("--only", default=None, help="substring of a problem name")
    parser.add_argument("--baseline", action="store_true", help="also run triton::mm's configs")
    args = parser.parse_args()
    import triton
    import torch

    uids = [TMA, SPLITK] + (["triton::mm"] if args.baseline else [])
    run = Check(args.budget_s)
    print(f"{run.device.name} cc{run.device.capability} {run.device.sm_count} SMs, "
          f"torch {torch.__version__}, triton {triton.__version__}", flush=True)
    entries = []
    chosen = [(name, spec) for name, spec in PROBLEMS if not args.only or args.only in name]
    try:
        for index, (name, spec) in enumerate(chosen):
            print(f"== {name} ({run.elapsed():.0f} s)", flush=True)
            entries.append(run.problem(name, spec, uids, problems_left=len(chosen) - index))
    except DeadContext as exc:
        print(f"!! the CUDA context failed ({exc}); stopping with what was measured", flush=True)
    except Exception:
        traceback.print_exc()
        print("!! stopping with what was measured", flush=True)
    summary(entries)
    out = Path(os.environ.get("OUT", "bench_out"))
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gpu_hopper_check.json"
    path.write_text(json.dumps({"device": run.device.name, "triton": triton.__version__,
                                "torch": torch.__version__, "entries": entries,
                                "wall_s": run.elapsed()}, indent=1, default=str))
    print(f"\nwall {run.elapsed():.0f} s; wrote {path}")


if __name__ == "__main__":
    main()
