"""What an eager call of `autotune_cli.mm` costs beside `torch.mm`, for each kind of winner.

Each kind is a problem tuned with one template selection into a cache folder of its own
(a `Dispatcher` on it, which is what `autotune_cli.mm` is on the default cache), so that
its winner is of that kind: aten (the winner is torch.mm itself: the difference is the
API's dispatch), one Triton kernel (triton::mm), split-K (triton::mm_splitk: two launches),
padded copies + cuBLAS (aten::mm_aligned), padded copies + a Triton kernel
(triton::mm_padded); `odd` (3000x1000x777 fp16) and `odd2049` (2049^3 bf16) are problems
where a padded winner's kernels take ~17 and ~37 us on an H200 and torch.mm is slower, to see
whether the winner beats torch.mm in eager too.

B is a weight, an nn.Parameter (as a Linear's): a padded winner copies it once and then
skips the copy while it is unchanged. `plain B` is the same call with B a plain tensor,
copied on every call (an activation).

Two figures per side, each the median of rounds that alternate the sides:
  cpu_us   a loop of `--calls` calls timed without a sync (CPU time per call: the loop
           is short enough that the GPU keeps up and the launch queue never fills);
  wall_us  the same loop plus the sync after it, per call (what eager code sees).

Run on a GPU machine:  PYTHONPATH=. python3 bench/api_overhead.py
  (`--cache-dir DIR`: the kinds' caches are DIR/<kind>, tuned there by `autotune mm
  --cache-dir DIR/<kind> --templates ...` first, or by this script where nothing is cached)
Quick check on a CPU:  PYTHONPATH=. python3 bench/api_overhead.py --device cpu --kinds aten,aligned --calls 200
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

# kind -> (problem fields, template selection, the winner uids it may give)
KINDS = {
    "aten": (dict(m=64, n=64, k=64, dtype="bfloat16"), ("aten",), ("aten::mm",)),
    "triton": (dict(m=64, n=64, k=64, dtype="bfloat16"), ("triton::mm",), ("triton::mm",)),
    "splitk": (dict(m=16, n=64, k=4096, dtype="bfloat16"), ("triton::mm_splitk",), ("triton::mm_splitk",)),
    "aligned": (dict(m=64, n=1001, k=777, dtype="float16"), ("aten::mm_aligned",), ("aten::mm_aligned",)),
    "padded": (dict(m=64, n=1001, k=777, dtype="float16"), ("triton::mm_padded",), ("triton::mm_padded",)),
    "odd": (dict(m=3000, n=1000, k=777, dtype="float16"), ("aten::mm_aligned", "triton::mm_padded"),
            ("aten::mm_aligned", "triton::mm_padded")),
    "odd2049": (dict(m=2049, n=2049, k=2049, dtype="bfloat16"), ("aten::mm_aligned", "triton::mm_padded"),
                ("aten::mm_aligned", "triton::mm_padded")),
    "gemv": (dict(m=8, n=4096, k=4096, dtype="bfloat16", layout="nt"), ("triton::gemv",), ("triton::gemv",)),
}


def loop(fn, a, b, calls: int, sync) -> tuple[float, float]:
    """(CPU us per call without a sync, wall us per call with the sync after the loop)."""
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn(a, b)
    issued = time.perf_counter()
    sync()
    done = time.perf_counter()
    return (issued - start) / calls * 1e6, (done - start) / calls * 1e6


def measure(kind: str, device: str, cache_dir: Path, calls: int, rounds: int, space: Path | None = None,
            parts: bool = False) -> dict:
    """Tune `kind`'s problem into a cache of its own (kinds that share a problem would
    otherwise see each other's winners), unless it is cached there, and time the sides."""
    import torch

    from autotune_cli.api import Dispatcher
    from autotune_cli.problem import make_problem
    from autotune_cli.settings import TuneSettings
    from autotune_cli.tune.tuner import Tuner

    fields, templates, uids = KINDS[kind]
    cache_dir = cache_dir / kind
    api = Dispatcher(cache_dir)
    problem = make_problem(**fields, device=device)
    settings = TuneSettings(device=device, templates=templates, cache_dir=cache_dir, workers=1,
                            space_file=str(space) if space and kind != "splitk" else None)
    tuned = time.perf_counter()
    with Tuner(settings) as tuner:
        outcome = tuner.tune(problem)
    tune_s = time.perf_counter() - tuned
    winner = outcome.winner.to_dict() if outcome.winner else None
    if not winner or winner["uid"] not in uids:
        return {"kind": kind, "problem": problem.describe(), "skipped": f"winner {winner}"}

    dtype = getattr(torch, problem.dtype)
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(problem.m, problem.k, generator=g).to(device=device, dtype=dtype)
    if problem.b_transposed:  # a Linear's weight [n, k], read as B = weight.t()
        stored = torch.randn(problem.n, problem.k, generator=g).to(device=device, dtype=dtype)
        plain = stored.t()
        weight = torch.nn.Parameter(stored.clone(), requires_grad=False).t()
    else:
        plain = torch.randn(problem.k, problem.n, generator=g).to(device=device, dtype=dtype)
        weight = torch.nn.Parameter(plain.clone(), requires_grad=False)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    started = time.perf_counter()
    first = api.mm(a, weight)  # plans: reads the cache, fingerprints, builds
    sync()
    first_ms = (time.perf_counter() - started) * 1e3
    info = api.dispatch_info(a, weight)
    assert info.uid == outcome.winner.uid and not info.fallback, info
    want = a.double() @ plain.double()
    errors = []
    for b in (weight, plain, weight):  # the first bound call, then both kinds of B
        out = api.mm(a, b)
        errors.append(((out.double() - want).abs().max() / want.abs().max()).item())
    errors.append(((first.double() - want).abs().max() / want.abs().max()).item())

    sides = {"autotune_cli.mm": (api.mm, weight), "plain B": (api.mm, plain), "torch.mm": (torch.mm, plain)}
    for fn, b in sides.values():
        loop(fn, a, b, max(calls // 5, 10), sync)  # warm: allocator, launch paths
    results: dict[str, dict[str, list[float]]] = {name: {"cpu_us": [], "wall_us": []} for name in sides}
    for r in range(rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for name in order:
            fn, b = sides[name]
            cpu, wall = loop(fn, a, b, calls, sync)
            results[name]["cpu_us"].append(cpu)
            results[name]["wall_us"].append(wall)
    med = {name: {k: statistics.median(v) for k, v in figures.items()} for name, figures in results.items()}
    row = {"kind": kind, "problem": problem.describe(), "winner": winner["uid"],
           "params": winner.get("params"), "winner_kernel_ms": winner.get("ms"),
           "tune_s": tune_s, "first_call_ms": first_ms, "max_rel_error": max(errors),
           "median": med, "rounds": results}
    if parts and winner["uid"] == "aten::mm_aligned":
        row["parts_cpu_us"] = aligned_parts(problem, winner.get("params") or {}, a, weight, calls, rounds, sync, api)
    return row


def aligned_parts(problem, params, a, b, calls: int, rounds: int, sync, api) -> dict[str, float]:
    """Where an aten::mm_aligned call's CPU time goes: each piece it runs, timed alone as the
    whole call is (median CPU us per call of alternating rounds), beside torch.mm; and the
    API's layers: the whole call, the plan's lookup, the kernel's bound call alone (into an
    output made beforehand, as the API's)."""
    import torch

    from autotune_cli.api.problems import call_key
    from autotune_cli.templates.aten_aligned import padded_sizes
    from autotune_cli.templates.base import Operands, bound, operand_copier

    lead = padded_sizes(problem, int(params.get("PAD_BYTES", 16)))
    used = lead if params.get("ZERO_PAD") else {"m": problem.m, "n": problem.n, "k": problem.k}
    a_pad = torch.zeros(used["m"], lead["k"], dtype=a.dtype, device=a.device)[:, :used["k"]]
    b_pad = torch.zeros(used["k"], lead["n"], dtype=a.dtype, device=a.device)[:, :used["n"]]
    pitch = lead["n"]
    out = torch.empty(problem.m, pitch, dtype=a.dtype, device=a.device)[:, :problem.n]
    # where cuBLAS's product lands: the output's padded rows, or a buffer of its size
    wide = (out.as_strided((used["m"], used["n"]), (pitch, 1)) if used["m"] == problem.m
            else torch.empty(used["m"], used["n"], dtype=a.dtype, device=a.device))
    fill_a = operand_copier(a.device.type)(a_pad[:problem.m, :problem.k]).fixed(a)
    shape, strides = (problem.m, problem.n), (pitch, 1)
    capturing = torch._C._cuda_isCurrentStreamCapturing if a.is_cuda else (lambda: False)
    mm, empty = torch.mm, torch.empty_strided
    t = api._torch()
    plans = api._mm
    built = next(iter(api._built.values())).kernel
    own_out = out  # whole padded rows: what the plan allocates where the kernel writes them
    go = bound(built, Operands(a, b, own_out, None), reuse_b=True)
    go(a, b, own_out, None)  # B copied once: later calls skip it, as the API's do
    pieces = {
        "torch.mm": lambda: mm(a, b),
        "the API's whole call": lambda: api.mm(a, b),
        "the API's plan lookup (key, dict)": lambda: plans.get(call_key(t.float32, t.allow_tf32, a, b)),
        "the bound call (no allocation)": lambda: go(a, b, own_out, None),
        "empty_strided (the output)": lambda: empty(shape, strides, dtype=a.dtype, device=a.device),
        "copy of A (bound launch)": lambda: fill_a(a),
        "mm(out=) on the padded views": lambda: mm(a_pad, b_pad, out=wide),
        "mm() on the padded views": lambda: mm(a_pad, b_pad),
        "copy of A (torch copy_)": lambda: a_pad[:problem.m, :problem.k].copy_(a),
        "version check of B": lambda: (b._base, b.data_ptr(), b._version),
        "stream capture check": lambda: capturing(),
    }
    figures: dict[str, list[float]] = {name: [] for name in pieces}
    for r in range(rounds):
        for name in (list(pieces) if r % 2 == 0 else list(reversed(pieces))):
            fn = pieces[name]
            sync()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            figures[name].append((time.perf_counter() - start) / calls * 1e6)
            sync()
    return {name: statistics.median(v) for name, v in figures.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None)
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    parser.add_argument("--calls", type=int, default=200, help="calls per round")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--parts", action="store_true",
                        help="aten::mm_aligned winners: also time each piece of the call alone")
    parser.add_argument("--space", type=Path, default=None,
                        help="a space file for the Triton kinds' tunes (not split-K's), as autotune mm --space")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="the kinds' caches are DIR/<kind> (default: a new temporary folder)")
    args = parser.parse_args()

    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        parser.error(f"unknown kinds {unknown}; known: {', '.join(KINDS)}")
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cache_dir = args.cache_dir or Path(tempfile.mkdtemp(prefix="autotune-api-overhead-"))

    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    print(f"on {name}, torch {torch.__version__}: {args.calls} calls x {args.rounds} rounds, median round; "
          "B a weight (nn.Parameter), 'plain' a plain tensor")
    print(f"{'kind':8} {'problem':34} {'winner':18} {'cpu ours':>8} {'plain':>6} {'torch':>6} {'+us':>5} "
          f"{'wall ours':>9} {'plain':>6} {'torch':>6} {'err':>7}  (us per call)")
    rows = []
    for kind in kinds:
        row = measure(kind, device, cache_dir, args.calls, args.rounds, args.space, args.parts)
        rows.append(row)
        if "skipped" in row:
            print(f"{kind:8} {row['problem']:34} skipped: {row['skipped']}")
            continue
        ours, plain, theirs = (row["median"][side] for side in ("autotune_cli.mm", "plain B", "torch.mm"))
        print(f"{kind:8} {row['problem']:34} {row['winner']:18} {ours['cpu_us']:8.2f} {plain['cpu_us']:6.2f} "
              f"{theirs['cpu_us']:6.2f} {ours['cpu_us'] - theirs['cpu_us']:5.1f} {ours['wall_us']:9.2f} "
              f"{plain['wall_us']:6.2f} {theirs['wall_us']:6.2f} {row['max_rel_error']:7.1e}")
        for piece, us in row.get("parts_cpu_us", {}).items():
            print(f"{'':8}   {piece:40} {us:6.2f} us")
    out_dir = Path(os.environ.get("OUT", "bench_out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "api_overhead.json").write_text(json.dumps({
        "device": name, "torch": torch.__version__, "calls": args.calls, "rounds": args.rounds,
        "kinds": rows, "command": " ".join([sys.executable, *sys.argv]),
    }, indent=1))


if __name__ == "__main__":
    main()
