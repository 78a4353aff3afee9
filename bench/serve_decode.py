"""A real serving loop: a transformers Llama decoding with a static KV cache, compiled twelve ways.

The model: `LlamaForCausalLM` built from a config (random weights, no downloads) at
Llama-3-8B widths (hidden 4096, intermediate 14336, 32 heads, 8 KV heads, vocabulary 128256),
`--layers` layers, bf16, SDPA attention, a `StaticCache` of `--cache-len` positions. The
decode step `model(input_ids=tok, past_key_values=cache, cache_position=pos)` is compiled
with `fullgraph=True` at each `--batches` size, and the prompt's forward (prefill) at
`--prefill` tokens, by each of `--paths`:

  eager            the model as it is;
  reduce-overhead  torch.compile(mode="reduce-overhead"): Inductor with CUDA graphs;
  max-autotune     torch.compile(mode="max-autotune"): Inductor's own GEMM tuning;
  ours-cold        autotune_cli.compile(model) on an empty cache: its tuning is in its
                   compile seconds;
  ours             autotune_cli.compile(model) again, the cache filled (a warm compile);
  ours-cached      as ours, with torch's own compile caches on (its FX graph and AOTAutograd
                   caches, which the other paths leave off) and filled by a compile of the
                   same graph just before, its loaded code forgotten: the warm compile a
                   user's next process makes (less its imports);
  ours-coordesc    as ours, with options={"coordinate_descent_tuning": True}: Inductor also
                   tunes its own pointwise and reduction kernels, as max-autotune does (what
                   that adds to the step and costs in compile seconds);
  ours-apart       as ours, with group_linears=False: every linear by its own winner (what
                   the grouped GEMMs of q, k and v are worth, side by side with ours);
  ours-unfolded    as ours, with fold_gqa=False: attention over K and V repeated for the
                   query heads (repeat_kv's copies), as written (what the fold is worth);
  ours-split       as ours, with split_keys=True: every decode attention through our
                   split-key kernel (routing/decode_attention.py), where ours runs it only
                   where it won a timing at the compile (split_choice.py);
  ours-nosplit     as ours, with split_keys=False: never the kernel (what it is worth);
  ours-pdl         as ours, with options={"triton.enable_pdl": True}: Inductor's kernels and
                   our GEMVs as programmatic dependent launches (what overlapping the
                   kernel boundaries is worth);
  ours-pwfixed     as ours, with options={"triton.autotune_pointwise": False}: each of
                   Inductor's pointwise kernels takes its one default config instead of the
                   faster of two it times at the first call (what that timing is worth in
                   the step, and costs in compile seconds).

Per path and size: the compile seconds (the first call; Inductor's caches off but for
ours-cached), the step
time (ms per step: `--steps` greedy steps enqueued back to back, each feeding its argmax to
the next, between two CUDA events, as a serving loop runs), the kernel time per step from
the profiler (every GPU kernel of `--profile-steps` steps, summed) and the kernels per step,
the first step's logits against an fp32 copy of the model (relative Frobenius error), and
how many of the greedy tokens match reduce-overhead's (random weights make near-tie logits:
tokens flip between any two numerically different paths, so this is a report, not a check).
Per size, last: ours against the faster of reduce-overhead and max-autotune, and the
compile seconds against max-autotune's (`against_torch`).
`--kernels` also writes each path's per-kernel table to $OUT.

GPU:        PYTHONPATH=. python3 bench/serve_decode.py [--batches 1,8,32] [--prefill 2048]
CPU smoke:  PYTHONPATH=. python3 bench/serve_decode.py --smoke   (a tiny Llama through the
            interpreter; checks that every path runs, times nothing useful)
Writes $OUT/serve_decode.json (default ./bench_out); `--compile-profile` also each decode
compile's Python profile (compile_profile_PATH_BATCH.txt), to see where its seconds go.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import io
import json
import os
import pstats
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

LLAMA3_8B = dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                 vocab_size=128256, head_dim=128)
SMOKE = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=100, head_dim=16)
PATHS = ("eager", "reduce-overhead", "max-autotune", "ours-cold", "ours", "ours-cached", "ours-coordesc", "ours-apart",
         "ours-unfolded", "ours-split", "ours-nosplit", "ours-pdl", "ours-pwfixed")
PATH_OPTIONS = {"ours-coordesc": {"coordinate_descent_tuning": True}, "ours-pdl": {"triton.enable_pdl": True},
                "ours-pwfixed": {"triton.autotune_pointwise": False}}
# kernel names that are GEMMs: cuBLAS/CUTLASS's (split-K's reduction too), Inductor's
# templates, and ours (templates/); Inductor's fused pointwise and reduction kernels are not,
# whatever their names hold (a fused kernel beside our op has "gemm" in its name)
GEMM_KERNEL = re.compile(r"gemm|gemv|nvjet|cutlass|xmma|splitKreduce|^triton_tem_"
                         r"|^(mm|bmm|mm_swap_ab|splitk|persistent_tma)_")
NOT_GEMM = ("triton_poi_", "triton_red_", "triton_per_")


def is_gemm(name: str) -> bool:
    return not name.startswith(NOT_GEMM) and GEMM_KERNEL.search(name) is not None


def build(config: dict, layers: int, device: str, dtype):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**config, num_hidden_layers=layers, max_position_embeddings=8192,
                      attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(dtype).eval()
    return cfg, model


def new_cache(cfg, model, batch: int, length: int):
    from transformers import StaticCache

    param = next(model.parameters())
    return StaticCache(config=cfg, max_batch_size=batch, max_cache_len=length, device=param.device,
                       dtype=param.dtype)


class Loop:
    """One path's decode loop at one batch size: a cache filled by an eager prefill of
    `prompt` tokens, then greedy steps from there. The token and the position stay on the
    GPU from step to step, as a serving loop keeps them: a position made from a host value
    each step would be a pageable copy, which waits for the GPU to drain, and the step time
    would then add the host's work to the GPU's."""

    def __init__(self, cfg, model, step, batch: int, prompt: int, length: int, device: str) -> None:
        import torch

        self.torch, self.step, self.device = torch, step, device
        self.cache = new_cache(cfg, model, batch, length)
        g = torch.Generator().manual_seed(batch)
        ids = torch.randint(0, cfg.vocab_size, (batch, prompt), generator=g).to(device)
        with torch.no_grad():
            model(input_ids=ids, past_key_values=self.cache, cache_position=torch.arange(prompt, device=device),
                  use_cache=True)
        # the first token drawn, not the prefill's argmax: paths that differ in rounding would
        # otherwise start from different tokens and their logits could not be compared
        self.tok = torch.randint(0, cfg.vocab_size, (batch, 1), generator=g).to(device)
        self.pos = prompt
        self.position = torch.tensor([prompt], device=device)
        self.length = length

    def once(self):
        torch = self.torch
        if self.pos >= self.length:
            raise SystemExit("--cache-len is too short for the steps asked for")
        torch.compiler.cudagraph_mark_step_begin()
        with torch.no_grad():
            logits = self.step(input_ids=self.tok, past_key_values=self.cache, cache_position=self.position,
                               use_cache=True).logits
            self.tok = logits[:, -1:].argmax(-1)
            self.position = self.position + 1
        self.pos += 1
        return logits

    def steps(self, count: int) -> list[int]:
        tokens = []
        for _ in range(count):
            self.once()
            tokens.append(self.tok[0, 0])
        return [int(t) for t in tokens]


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def host_steps(loop: Loop, count: int, device: str) -> float:
    """ms of host time per step: `count` steps enqueued after the GPU drained, timed on the
    CPU without waiting for the GPU (the step time is the larger of this and the GPU's)."""
    sync(device)
    started = time.perf_counter()
    for _ in range(count):
        loop.once()
    host = (time.perf_counter() - started) * 1e3 / count
    sync(device)
    return host


def time_steps(loop: Loop, count: int, device: str) -> float:
    """ms per step, `count` steps enqueued back to back between two events."""
    import torch

    sync(device)
    if device != "cuda":
        started = time.perf_counter()
        loop.steps(count)
        return (time.perf_counter() - started) * 1e3 / count
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(count):
        loop.once()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / count


def profile_steps(fn, count: int, device: str) -> dict:
    """The GPU kernels of `count` calls of fn: per call, their summed time, count, the GEMMs'
    share, and the busy span; with the per-kernel table."""
    from torch.profiler import ProfilerActivity, profile

    sync(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(count):
            fn()
        sync(device)
    kernels = defaultdict(lambda: [0, 0.0])
    cpu_ops = defaultdict(int)
    for event in prof.events():
        kind = str(getattr(event, "device_type", ""))
        if kind.endswith("CUDA"):
            us = float(getattr(event, "device_time", 0.0) or getattr(event, "cuda_time", 0.0) or 0.0)
            kernels[event.name][0] += 1
            kernels[event.name][1] += us
        elif event.name.startswith(("autotune::", "cudaGraphLaunch", "cuLaunchKernel", "cudaLaunchKernel")):
            cpu_ops[event.name] += 1
    total = sum(us for _, us in kernels.values())
    gemm = sum(us for name, (_, us) in kernels.items() if is_gemm(name))
    rows = sorted(((name, n / count, us / count) for name, (n, us) in kernels.items()), key=lambda r: -r[2])
    return {"kernel_ms": total / count / 1e3, "gemm_ms": gemm / count / 1e3,
            "kernels": sum(n for n, _ in kernels.values()) / count,
            "cpu_per_step": {k: v / count for k, v in cpu_ops.items()},
            "table": [{"kernel": name[:110], "per_step": n, "us": round(us, 2)} for name, n, us in rows]}


def fp32_logits(cfg, model, batch: int, prompt: int, length: int, device: str):
    """The first decode step's logits from an fp32 copy of the model, from the same prompt."""
    import copy

    twin = copy.deepcopy(model).float()
    loop = Loop(cfg, twin, twin, batch, prompt, length, device)
    want = loop.once().double()
    del twin, loop
    return want


def rel_error(got, want) -> float:
    return ((got.double() - want).norm() / want.norm()).item()


SMOKE_SPACE = [{"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 2, "num_warps": 4}]


def compiler(path: str, model, cache_dir: Path, routes: list, smoke: bool):
    import torch

    import autotune_cli

    if path == "eager":
        return model
    if path in ("reduce-overhead", "max-autotune"):
        return torch.compile(model, mode=path, fullgraph=True, dynamic=False)
    tune = None  # the default: what the graph meets is tuned on the GPU
    if smoke:  # on the CPU: Triton's mm under the interpreter, one config
        from autotune_cli.settings import TuneSettings

        space = cache_dir / "smoke_space.json"
        space.parent.mkdir(parents=True, exist_ok=True)
        space.write_text(json.dumps(SMOKE_SPACE))
        tune = TuneSettings(device="cpu", cache_dir=cache_dir, templates=("triton::mm",), space_file=str(space),
                            workers=1)
    options = PATH_OPTIONS.get(path)  # ours-cached compiles as ours (its caches are prepare_decode's)
    return autotune_cli.compile(model, cache_dir=cache_dir, fullgraph=True, dynamic=False, routes=routes, tune=tune,
                                group_linears=False if path == "ours-apart" else None,
                                fold_gqa=path != "ours-unfolded",
                                split_keys={"ours-split": True, "ours-nosplit": False}.get(path),
                                options=options)


def sync_free(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def fresh_compiler_state() -> None:
    import torch

    from autotune_cli import api

    torch._dynamo.reset()
    api.reset()


@dataclass
class Prepared:
    """One path compiled at one size, ready to time: `tick` runs one timed round (ms per
    step), `step` one untimed call (for the profiler and the host time)."""

    row: dict
    tick: Callable[[], float]
    step: Callable[[], object]
    host: Callable[[], float] | None = None
    times: list = field(default_factory=list)


@contextlib.contextmanager
def torch_compile_caches(folder: Path):
    """Inductor's FX graph cache and AOTAutograd's cache on, in `folder`, for what runs inside."""
    import torch._functorch.config as functorch
    import torch._inductor.config as inductor

    saved = (inductor.fx_graph_cache, functorch.enable_autograd_cache, os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
    inductor.fx_graph_cache, functorch.enable_autograd_cache = True, True
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)
    try:
        yield
    finally:
        inductor.fx_graph_cache, functorch.enable_autograd_cache = saved[:2]
        if saved[2] is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = saved[2]


def filled_caches(path: str, first_call: Callable[[], object], device: str):
    """What a path compiles under: for ours-cached, torch's compile caches, filled first by
    `first_call` (a compile of the same graph and its first call), its loaded code then
    forgotten (the next compile loads the generated module again, as a new process would)."""
    if path != "ours-cached":
        return contextlib.nullcontext
    from torch._inductor.codecache import PyCodeCache

    caches = functools.partial(torch_compile_caches, Path(tempfile.mkdtemp(prefix="serve_decode_inductor_")))
    with caches():
        first_call()
        sync(device)
    PyCodeCache.cache_clear()
    return caches


def prepare_decode(path: str, cfg, model, batch: int, args, cache_dir: Path, reference, device: str,
                   tokens_ref: dict) -> Prepared:
    routes: list = []
    caches = filled_caches(path, lambda: Loop(cfg, model, compiler(path, model, cache_dir, [], args.smoke), batch,
                                              args.prompt, args.cache_len, device).once(), device)
    profiler = cProfile.Profile() if args.compile_profile else None
    if profiler:
        phases = phase_seconds()
        profiler.enable()
    with caches():
        started = time.perf_counter()
        step = compiler(path, model, cache_dir, routes, args.smoke)
        wrap_s = time.perf_counter() - started  # torch.compile imports Inductor as it wraps
        loop = Loop(cfg, model, step, batch, args.prompt, args.cache_len, device)
        started = time.perf_counter()
        logits = loop.once()
        sync(device)
        compile_s = wrap_s + time.perf_counter() - started
    if profiler:
        profiler.disable()
        write_compile_profile(profiler, f"{path}_{batch}", phase_seconds(), phases)
    err = rel_error(logits[:, -1:], reference[:, -1:])
    tokens = loop.steps(args.tokens)
    for _ in range(3):
        loop.once()
    row = {"path": path, "batch": batch, "compile_s": round(compile_s, 2), "error": err, "tokens": tokens,
           "routed": routed_lines(routes)}
    if path == "reduce-overhead":
        tokens_ref[batch] = tokens
    return Prepared(row, lambda: time_steps(loop, args.steps, device), loop.once,
                    lambda: host_steps(loop, min(args.steps, 8), device))


def phase_seconds() -> dict:
    """Seconds spent so far in each phase torch times as it compiles (Dynamo's tracing,
    AOT, Inductor's passes and code generation: torch._dynamo.utils), summed per phase."""
    from torch._dynamo.utils import compilation_time_metrics

    return {phase: sum(times) for phase, times in compilation_time_metrics.items()}


def write_compile_profile(profiler, name: str, after: dict, before: dict) -> None:
    """The compile's phases (`phase_seconds` after less before) and its Python profile (this
    process's, not Inductor's compile workers'), by cumulative and by own time, to
    $OUT/compile_profile_NAME.txt: where a compile's seconds go."""
    from bench.common import out_dir

    text = io.StringIO()
    spent = {phase: s - before.get(phase, 0.0) for phase, s in after.items()}
    for phase, seconds in sorted(spent.items(), key=lambda item: -item[1]):
        if seconds > 0:
            text.write(f"{seconds:9.3f} s  {phase}\n")
    text.write("\n")
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("cumulative").print_stats(COMPILE_PROFILE_LINES)
    stats.sort_stats("tottime").print_stats(COMPILE_PROFILE_LINES // 4)
    (out_dir() / f"compile_profile_{name}.txt").write_text(text.getvalue())


COMPILE_PROFILE_LINES = 400
PREFILL_BACK_TO_BACK = 4  # forwards per timed prefill round


def prepare_prefill(path: str, cfg, model, args, cache_dir: Path, device: str) -> Prepared:
    """One forward of `--prefill` tokens (batch 1), no KV cache: the prompt's GEMMs at M =
    `--prefill`. (A static cache reset between forwards is an input the compiled graph
    mutates: Inductor then skips its CUDA graphs, and torch 2.11 crashed there.)"""
    import torch

    routes: list = []
    ids = torch.randint(0, cfg.vocab_size, (1, args.prefill), generator=torch.Generator().manual_seed(7)).to(device)

    def first_call(fn):
        torch.compiler.cudagraph_mark_step_begin()
        with torch.no_grad():
            return fn(input_ids=ids, use_cache=False).logits

    caches = filled_caches(path, lambda: first_call(compiler(path, model, cache_dir, [], args.smoke)), device)
    with caches():
        started = time.perf_counter()
        fn = compiler(path, model, cache_dir, routes, args.smoke)
        wrap_s = time.perf_counter() - started
        started = time.perf_counter()
        first_call(fn)
        sync(device)
        compile_s = wrap_s + time.perf_counter() - started

    def call():
        return first_call(fn)

    def tick() -> float:
        """ms per forward of PREFILL_BACK_TO_BACK forwards enqueued between two events: the
        host runs ahead as a server's does, so one forward's launch latency (host noise of
        a millisecond or more) is not counted as GPU time."""
        sync(device)
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(PREFILL_BACK_TO_BACK):
                call()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / PREFILL_BACK_TO_BACK
        started = time.perf_counter()
        for _ in range(PREFILL_BACK_TO_BACK):
            call()
        return (time.perf_counter() - started) * 1e3 / PREFILL_BACK_TO_BACK

    for _ in range(2):
        call()
    row = {"path": path, "batch": f"prefill {args.prefill}", "compile_s": round(compile_s, 2),
           "routed": routed_lines(routes)}
    return Prepared(row, tick, call)


def measure(prepared: list[Prepared], args, device: str, tokens_ref: dict) -> list[dict]:
    """Time the paths of one size in interleaved rounds (a GPU's clocks drift between runs:
    each round sees every path once), then profile each; their rows."""
    for _ in range(args.rounds):
        for p in prepared:
            p.times.append(p.tick())
    rows = []
    for p in prepared:
        prof = profile_steps(p.step, args.profile_steps, device)
        row = {**p.row, "ms_per_step": round(statistics.median(p.times), 4),
               "rounds_ms": [round(t, 4) for t in p.times], "kernel_ms": round(prof["kernel_ms"], 4),
               "gemm_ms": round(prof["gemm_ms"], 4), "kernels": prof["kernels"],
               "cpu_per_step": prof["cpu_per_step"], "table": prof["table"]}
        if p.host is not None:
            row["host_ms"] = round(statistics.median(p.host() for _ in range(3)), 4)
        if "tokens" in row and row["batch"] in tokens_ref:
            row["tokens_same"] = sum(a == b for a, b in zip(row["tokens"], tokens_ref[row["batch"]]))
        rows.append(row)
    return rows


def routed_lines(routes: list) -> list[str]:
    """Each matmul the compile met: what it runs, or why it was left to Inductor."""
    return [f"{d.problem.describe() if d.problem else d.op} -> "
            f"{(d.uid + ' (' + d.reason.split(':')[0][:60] + ')') if d.fallback else d.uid}"
            f"{' [' + d.reason + ']' if d.reason and not d.fallback else ''}" for d in routes]


def table(rows: list[dict]) -> str:
    lines = [f"{'size':>12} {'path':<15} {'ms/step':>8} {'host ms':>7} {'kern ms':>7} {'gemm ms':>7} "
             f"{'kern':>4} {'compile s':>9} {'err':>7} {'tok':>3}"]
    for r in rows:
        err = f"{r['error']:.0e}" if "error" in r else ""
        same = str(r.get("tokens_same", ""))
        host = f"{r['host_ms']:.3f}" if "host_ms" in r else ""
        lines.append(f"{str(r['batch']):>12} {r['path']:<15} {r['ms_per_step']:>8.4f} {host:>7} {r['kernel_ms']:>7.3f} "
                     f"{r['gemm_ms']:>7.3f} {r['kernels']:>4.0f} {r['compile_s']:>9.1f} {err:>7} {same:>3}")
    return "\n".join(lines)


ANCHORS = ("reduce-overhead", "max-autotune")  # torch.compile's two modes: what ours is set against


def against_torch(rows: list[dict]) -> list[str]:
    """Per size, ours (warm) against the faster of ANCHORS' steps, and the compile seconds
    of ours (warm and cold) and of reduce-overhead (Inductor's own compile of the graph) as
    fractions of max-autotune's: the figures the serving loop's targets are read in."""
    lines = []
    for size in dict.fromkeys(r["batch"] for r in rows):
        by_path = {r["path"]: r for r in rows if r["batch"] == size}
        anchors = [by_path[a] for a in ANCHORS if a in by_path]
        if "ours" not in by_path or not anchors:
            continue
        best = min(anchors, key=lambda r: r["ms_per_step"])
        line = (f"{size}: ours {best['ms_per_step'] / by_path['ours']['ms_per_step']:.3f}x the faster of "
                + " and ".join(f"{r['path']} ({r['ms_per_step']:.3f})" for r in anchors))
        if "max-autotune" in by_path:
            full = by_path["max-autotune"]["compile_s"]
            parts = [f"{name} {by_path[path]['compile_s'] / full:.3f}"
                     for path, name in (("ours", "warm"), ("ours-cached", "warm with torch's caches"),
                                        ("ours-cold", "cold"), ("reduce-overhead", "reduce-overhead"))
                     if path in by_path]
            line += "; compile s against max-autotune's: " + ", ".join(parts)
        lines.append(line)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--prefill", type=int, default=2048, help="prompt tokens of the prefill row (0: none)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=32, help="tokens in the cache before decoding")
    parser.add_argument("--cache-len", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=50, help="decode steps per timed round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=16, help="greedy tokens compared with reduce-overhead's")
    parser.add_argument("--profile-steps", type=int, default=5)
    parser.add_argument("--kernels", action="store_true", help="write each row's kernel table to $OUT")
    parser.add_argument("--compile-profile", action="store_true",
                        help="write each decode compile's phases and Python profile to $OUT")
    parser.add_argument("--cache-dir", default=None, help="the winners' cache (default: a new empty one)")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()

    if args.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch
    import torch._functorch.config as functorch_config

    from bench.common import out_dir, write_json

    device = "cpu" if args.smoke else "cuda"
    config = SMOKE if args.smoke else LLAMA3_8B
    if args.smoke:
        args.steps, args.rounds, args.tokens, args.profile_steps = 2, 1, 2, 1
        args.prefill = min(args.prefill, 16)
        args.cache_len = min(args.cache_len, 64)
        args.prompt = min(args.prompt, 4)
    torch._inductor.config.fx_graph_cache = False  # compile seconds as a first compile's
    torch._inductor.config.autotune_local_cache = False
    functorch_config.enable_autograd_cache = False
    torch._dynamo.config.recompile_limit = 64  # one graph compiled by each path (a backend each)
    cache_dir = Path(args.cache_dir or tempfile.mkdtemp(prefix="serve_decode_cache_"))
    cfg, model = build(config, args.layers, device, torch.bfloat16)
    paths = [p for p in args.paths.split(",") if p]
    unknown = set(paths) - set(PATHS)
    if unknown:
        raise SystemExit(f"unknown paths: {sorted(unknown)}")
    rows: list[dict] = []
    tokens_ref: dict = {}
    order = sorted(paths, key=lambda p: p != "reduce-overhead")  # its tokens are the others' reference
    for batch in [int(b) for b in args.batches.split(",") if b]:
        reference = fp32_logits(cfg, model, batch, args.prompt, args.cache_len, device)
        fresh_compiler_state()
        prepared = [prepare_decode(path, cfg, model, batch, args, cache_dir, reference, device, tokens_ref)
                    for path in order]
        rows += measure(prepared, args, device, tokens_ref)
        print(table(rows[-len(prepared):]), flush=True)
        del prepared
        sync_free(device)
    if args.prefill:
        fresh_compiler_state()
        prepared = [prepare_prefill(path, cfg, model, args, cache_dir, device) for path in paths]
        rows += measure(prepared, args, device, tokens_ref)
        print(table(rows[-len(prepared):]), flush=True)
    out = out_dir()
    if args.kernels:
        for r in rows:
            name = f"kernels_{r['path']}_{str(r['batch']).replace(' ', '')}.txt"
            (out / name).write_text("\n".join(f"{k['us']:>9.2f} {k['per_step']:>5.1f}  {k['kernel']}"
                                              for k in r["table"]) + "\n")
    verdict = against_torch(rows)
    write_json("serve_decode.json", {"args": vars(args), "rows": [{k: v for k, v in r.items() if k != "table"}
                                                              for r in rows], "against_torch": verdict})
    print()
    print(table(rows))
    for line in verdict:
        print(line)
    for r in rows:
        if r["path"].startswith("ours"):
            kept = sum(" (" in line for line in r["routed"])
            print(f"{r['path']} {r['batch']}: routed {len(r['routed']) - kept} of {len(r['routed'])}; "
                  f"host calls per step {r.get('cpu_per_step', {})}")
            for line in sorted(set(r["routed"])):
                print(f"  {r['routed'].count(line)}x {line}")


if __name__ == "__main__":
    main()
