"""End to end: a GPT-2-sized block, tuned by `autotune model`, run six ways.

The model: LayerNorm, qkv Linear (768 -> 2304, bias), causal attention (SDPA, not a GEMM),
proj Linear (768 -> 768, bias), LayerNorm, fc1 (768 -> 3072, bias), GELU, fc2 (3072 -> 768,
bias), LayerNorm, and a 50257-wide head without bias; bf16, batch 1, at 2048 and at 8
tokens. Per token count: torch.export -> `autotune model` (its wall time is the tune time),
then the forward time of

  (a) eager       the model as it is;
  (b) winners     eager, each Linear through autotune_cli.linear (the cached winners);
  (c) inductor    torch.compile(mode="max-autotune"): Inductor's own GEMM tuning;
  (d) ours        autotune_cli.compile(model): the winners in Inductor's graph, no GEMM
                  tuning of Inductor's, replayed as CUDA graphs (its default mode), as (c) is;
  (e) ours, no graphs  autotune_cli.compile(model, mode="default"): (d) without CUDA graphs,
                  every kernel launched from the CPU (GPU only; an error there is recorded,
                  not fatal);
  (f) reduce-overhead  torch.compile(mode="reduce-overhead"): (d)'s compile without our
                  routing (Inductor's ATen GEMMs, CUDA graphs; GPU only);

with the compile time of (c) to (f) (the first call, Inductor's caches off). One method for
every path: per forward, the L2 flushed (256 MB zeroed), a device sync, CUDA events around
the one call, so that what the CPU spends launching counts as it does in eager code, and the
host's time until the call returns (its share of that: guards, the CUDA-graph tree, launches);
the paths in turn, each round in another order; the medians of `--reps`. Each path's output
is checked against the model in float64 (relative Frobenius error within the verifier's bf16
norm tolerance). The profiler's top kernels per path say what each one ran.

GPU:        PYTHONPATH=. python3 bench/model_e2e.py [--tokens 2048,8]
CPU smoke:  PYTHONPATH=. python3 bench/model_e2e.py --smoke   (tiny sizes, the interpreter,
            one Triton config; checks that every path runs and is right, times nothing useful)
Writes $OUT/model_e2e.json (default ./bench_out).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
REPO = Path(__file__).resolve().parent.parent

GPT2 = dict(width=768, heads=12, hidden=3072, vocab=50257)
SMOKE = dict(width=32, heads=2, hidden=64, vocab=50)  # 50: rows not 16-byte aligned, as 50257
SMOKE_SPACE = [{"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 2, "num_warps": 4}]


def make_block(width: int, heads: int, hidden: int, vocab: int):
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2, self.ln_f = nn.LayerNorm(width), nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)
            self.fc1 = nn.Linear(width, hidden)
            self.fc2 = nn.Linear(hidden, width)
            self.head = nn.Linear(width, vocab, bias=False)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
            x = x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))
            return self.head(self.ln_f(x))

    torch.manual_seed(0)
    model = Block()
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


def with_winners(model):
    """A copy of `model` whose Linear layers call autotune_cli.linear."""
    import torch

    import autotune_cli

    twin = copy.deepcopy(model)
    for module in twin.modules():
        if isinstance(module, torch.nn.Linear):
            module.forward = types.MethodType(lambda self, x: autotune_cli.linear(x, self.weight, self.bias), module)
    return twin


def tune(model, x, cache_dir: Path, work: Path, smoke: bool, device: str) -> tuple[float, dict]:
    """torch.export the model, `autotune model` it; (wall seconds, the command's JSON)."""
    import torch

    program = torch.export.export(model, (x,))
    path = work / f"block_{x.shape[1]}.pt2"
    torch.export.save(program, path)
    cmd = [sys.executable, "-m", "autotune_cli", "model", str(path), "--json", "--cache-dir", str(cache_dir),
           "--device", device]
    if smoke:
        space = work / "space.json"
        space.write_text(json.dumps(SMOKE_SPACE))
        # Triton and the padded copies only: the paths through our ops, not aten's
        cmd += ["--space", str(space), "--workers", "1", "--templates", "triton::mm,aten::mm_aligned"]
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO,
                          env={**os.environ,
                               "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])})
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"autotune model failed ({done.returncode}):\n{done.stderr[-3000:]}")
    sys.stderr.write(done.stderr[-2000:])
    return wall, json.loads(done.stdout)


class Timer:
    """Per call: L2 flushed, a sync, CUDA events around the call (perf_counter on the CPU), and
    the host's time until the call returns (what it spends before the GPU can start); the
    paths taken in turn, each round in another order, so that a drift of the host's speed
    falls on every path alike."""

    def __init__(self, device: str) -> None:
        import torch

        self.torch, self.device = torch, device
        self.flush = torch.empty(256 * 2**20, dtype=torch.int8, device=device) if device == "cuda" else None

    def once(self, fn, x) -> tuple[float, float]:
        """(ms of the call, ms until it returned) of one call."""
        torch = self.torch
        if self.device != "cuda":
            started = time.perf_counter()
            fn(x)
            ms = (time.perf_counter() - started) * 1e3
            return ms, ms
        self.flush.zero_()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        started = time.perf_counter()
        fn(x)
        host = (time.perf_counter() - started) * 1e3
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end), host

    def __call__(self, fns: dict, x, reps: int, warmup: int = 3) -> dict[str, tuple[float, float]]:
        """{name: (median ms per call, median host ms per call)} of `fns`, interleaved."""
        names = list(fns)
        for name in names:
            for _ in range(warmup):
                fns[name](x)
        times: dict[str, list] = {name: [] for name in names}
        for rep in range(reps):
            shift = rep % len(names)
            for name in names[shift:] + names[:shift]:
                times[name].append(self.once(fns[name], x))
        return {name: (statistics.median(t for t, _ in got), statistics.median(h for _, h in got))
                for name, got in times.items()}


def first_call(fn, x, device: str) -> tuple[float, object]:
    import torch

    started = time.perf_counter()
    out = fn(x)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started, out.clone()


def error(out, want) -> float:
    return ((out.double() - want).norm() / want.norm()).item()


def top_kernels(fn, x, count: int = 8) -> list[tuple[str, float]]:
    """The profiler's CUDA kernels of one call: (name, us), the longest first."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(x)
        torch.cuda.synchronize()
    rows = []
    for event in prof.key_averages():
        us = getattr(event, "self_device_time_total", None)
        if us is None:
            us = getattr(event, "self_cuda_time_total", 0.0)
        if us:
            rows.append((event.key[:90], float(us)))
    rows.sort(key=lambda r: -r[1])
    return rows[:count]


def run_tokens(tokens: int, sizes: dict, args, cache_dir: Path, work: Path, device: str) -> dict:
    import torch

    import autotune_cli
    from autotune_cli import api
    from autotune_cli.runner.verify import NORM_TOLERANCE

    dtype = torch.bfloat16
    model = make_block(**sizes).to(device=device, dtype=dtype)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, tokens, sizes["width"], generator=g).to(device=device, dtype=dtype)
    tune_s, tuned = tune(model, x, cache_dir, work, args.smoke, device)
    api.reset()  # re-read the cache the subprocess wrote

    with torch.no_grad():
        want = copy.deepcopy(model).double()(x.double())
        eager = model
        winners = with_winners(model)
        paths: dict[str, dict] = {}
        timer = Timer(device)
        graphs = device == "cuda"

        torch._dynamo.reset()
        inductor = torch.compile(copy.deepcopy(model), mode="max-autotune" if graphs else "max-autotune-no-cudagraphs")
        compile_c, out_c = first_call(inductor, x, device)
        routes: list = []
        torch._dynamo.reset()
        ours = autotune_cli.compile(copy.deepcopy(model), routes=routes)
        compile_d, out_d = first_call(ours, x, device)

        outputs = {"a_eager": eager(x), "b_winners": winners(x), "c_inductor": out_c, "d_ours": out_d}
        fns = {"a_eager": eager, "b_winners": winners, "c_inductor": inductor, "d_ours": ours}
        compiles = {"c_inductor": compile_c, "d_ours": compile_d}
        if graphs:
            try:
                torch._dynamo.reset()
                launched = autotune_cli.compile(copy.deepcopy(model), mode="default")
                compiles["e_ours_no_graphs"], outputs["e_ours_no_graphs"] = first_call(launched, x, device)
                fns["e_ours_no_graphs"] = launched
            except Exception as exc:  # noqa: BLE001 - recorded: the other paths' figures stand
                paths["e_ours_no_graphs"] = {"failed": f"{type(exc).__name__}: {str(exc)[:300]}",
                                             "forward_ms": float("nan"), "error": float("nan")}
            torch._dynamo.reset()
            plain = torch.compile(copy.deepcopy(model), mode="reduce-overhead")
            compiles["f_reduce_overhead"], outputs["f_reduce_overhead"] = first_call(plain, x, device)
            fns["f_reduce_overhead"] = plain
        for name, (forward, host) in timer(fns, x, args.reps).items():
            paths[name] = {"forward_ms": forward, "host_ms": host, "error": error(outputs[name], want)}
        for name, seconds in compiles.items():
            paths[name]["compile_s"] = seconds
        if device == "cuda":
            for name, fn in fns.items():
                paths[name]["kernels_us"] = top_kernels(fn, x)
    tolerance = NORM_TOLERANCE["bfloat16"]
    for row in paths.values():
        row["ok"] = row["error"] <= tolerance or "failed" in row
    b_routes = []
    a2 = x.reshape(tokens, sizes["width"])
    for name in ("qkv", "proj", "fc1", "fc2", "head"):
        lin = getattr(model, name)
        k = lin.in_features
        a = a2 if k == sizes["width"] else torch.empty(tokens, k, device=device, dtype=dtype)
        info = autotune_cli.dispatch_info(a, lin.weight.t(), bias=lin.bias)
        b_routes.append(f"{name}: {info.uid}")
    winners_tuned = sorted({(e.get("problem", {}).get("m"), e.get("problem", {}).get("n"),
                              e.get("problem", {}).get("k"), (e.get("winner") or {}).get("uid"))
                             for e in _entries(tuned)}, key=str)
    return {"tokens": tokens, "tune_s": tune_s, "tolerance": tolerance, "paths": paths,
            "b_winners_run": b_routes,
            "d_routes": [f"{r.op} {r.problem.m}x{r.problem.n}x{r.problem.k}: {r.uid}" for r in routes],
            "tuned": winners_tuned}


def _entries(doc) -> list[dict]:
    """The problem/winner records of `autotune model --json` (whatever its nesting)."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            if "problem" in node and "winner" in node:
                found.append(node)
                return
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(doc)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default=None, help="comma-separated token counts (default 2048,8; smoke 16,4)")
    parser.add_argument("--reps", type=int, default=None, help="timed forwards per path (default 50; smoke 3)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU under the interpreter")
    args = parser.parse_args()
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    work = Path(tempfile.mkdtemp(prefix="autotune-e2e-"))
    cache_dir = work / "cache"
    os.environ["AUTOTUNE_CACHE_DIR"] = str(cache_dir)  # the API's cache, before its first plan
    import torch

    torch._inductor.config.force_disable_caches = True  # cold compile times for (c) and (d)
    device = "cpu" if args.smoke else "cuda"
    sizes = SMOKE if args.smoke else GPT2
    tokens = [int(t) for t in (args.tokens or ("16,4" if args.smoke else "2048,8")).split(",")]
    args.reps = args.reps or (3 if args.smoke else 50)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu (smoke)"
    results = []
    for t in tokens:
        row = run_tokens(t, sizes, args, cache_dir, work, device)
        results.append(row)
        print(f"\n{t} tokens on {name}, torch {torch.__version__}; tune {row['tune_s']:.1f} s "
              f"(autotune model); error tolerance {row['tolerance']}")
        print(f"  {'path':16} {'forward ms':>10} {'host ms':>8} {'compile s':>9} {'rel error':>9}  ok")
        for path, r in row["paths"].items():
            comp = f"{r['compile_s']:9.1f}" if "compile_s" in r else " " * 9
            host = f"{r['host_ms']:8.4f}" if "host_ms" in r else " " * 8
            print(f"  {path:16} {r['forward_ms']:10.4f} {host} {comp} {r['error']:9.2e}  {r['ok']}"
                  + (f"  FAILED {r['failed']}" if "failed" in r else ""))
        print("  (b) ran: " + "; ".join(row["b_winners_run"]))
        print("  (d) routed: " + ("; ".join(row["d_routes"]) or "nothing"))
        for path, r in row["paths"].items():
            if "kernels_us" in r:
                print(f"  {path} kernels: " + "; ".join(f"{k} {us:.0f}us" for k, us in r["kernels_us"][:6]))
    out = Path(os.environ.get("OUT", "bench_out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "model_e2e.json").write_text(json.dumps({
        "device": name, "torch": torch.__version__, "sizes": sizes, "results": results,
        "method": "per forward: L2 flushed (256 MB zeroed), device sync, CUDA events around one call, the "
                  "host's time until the call returns; the paths in turn; medians",
        "command": " ".join([sys.executable, *sys.argv]),
    }, indent=1, default=str))
    if not all(r["ok"] for row in results for r in row["paths"].values() if "failed" not in r):
        raise SystemExit("some path's output is outside the tolerance")


if __name__ == "__main__":
    main()
