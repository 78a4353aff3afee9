"""A training step: a transformers Llama's forward and backward, compiled several ways.

The model: `LlamaForCausalLM` built from a config (random weights, no downloads) at
Llama-3-8B widths (hidden 4096, intermediate 14336, 32 heads, 8 KV heads; the vocabulary
`--vocab`, 128256 by default), `--layers` layers, bf16 parameters, SDPA attention. One step
is `model(input_ids, labels=labels).loss.backward()` over `--batch` sequences of `--seq`
tokens, the gradients set to None before it (no optimizer: its kernels are not matmuls).
Compiled by each of `--paths`:

  eager            the model as it is;
  reduce-overhead  torch.compile(mode="reduce-overhead"): Inductor with CUDA graphs;
  max-autotune     torch.compile(mode="max-autotune"): Inductor's own GEMM tuning, forward
                   and backward;
  ours-cold        autotune_cli.compile(model) on an empty cache: the forward's and the
                   backward's problems tuned as they compile (in its compile seconds);
  ours             autotune_cli.compile(model) again, the cache filled.

Per path: the compile seconds (the first step: the forward's compile, then the backward's at
its first run), ms per step (the median of `--rounds` interleaved rounds of `--steps` steps
between two CUDA events), the matmuls routed (forward and backward graphs), and the loss
and the gradients against eager's (relative Frobenius over all parameters: bf16 paths, so
a report of agreement, not a check).

PYTHONPATH=. python3 bench/train_step.py [--layers 2] [--batch 1] [--seq 1024] [--paths ...]
PYTHONPATH=. python3 bench/train_step.py --smoke   # on a CPU: every path runs, tuning included
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

LLAMA3_8B = dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                 head_dim=128)
SMOKE = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
PATHS = ("eager", "reduce-overhead", "max-autotune", "ours-cold", "ours")
SMOKE_SPACE = [{"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 2, "num_warps": 4}]


def build(config: dict, vocab: int, layers: int, device: str, dtype):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**config, vocab_size=vocab, num_hidden_layers=layers, max_position_embeddings=8192,
                      attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(device):
        return LlamaForCausalLM(cfg).to(dtype).train()


def compiler(path: str, model, cache_dir: Path, routes: list, smoke: bool):
    import torch

    import autotune_cli

    mode = None if smoke else "reduce-overhead"  # CUDA graphs on a GPU, as our default compiles
    if path == "eager":
        return model
    if path in ("reduce-overhead", "max-autotune"):
        return torch.compile(model, mode="default" if smoke else path, dynamic=False)
    tune = None  # the default: what the graphs meet is tuned on the GPU
    if smoke:  # on the CPU: Triton's mm under the interpreter, one config
        from autotune_cli.settings import TuneSettings

        space = cache_dir / "smoke_space.json"
        space.parent.mkdir(parents=True, exist_ok=True)
        space.write_text(json.dumps(SMOKE_SPACE))
        tune = TuneSettings(device="cpu", cache_dir=cache_dir, templates=("triton::mm", "triton::bmm"),
                            space_file=str(space), workers=1)
    return autotune_cli.compile(model, cache_dir=cache_dir, dynamic=False, routes=routes, tune=tune,
                                mode="default" if smoke else mode)


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


class Step:
    """One path's training step on fixed tokens: the loss, then every gradient."""

    def __init__(self, fn, model, ids, labels) -> None:
        self.fn, self.model, self.ids, self.labels = fn, model, ids, labels

    def __call__(self):
        import torch

        torch.compiler.cudagraph_mark_step_begin()  # a new step: the graphs' last outputs are done with
        for p in self.model.parameters():
            p.grad = None
        loss = self.fn(input_ids=self.ids, labels=self.labels).loss
        loss.backward()
        return loss.detach()


def grads_of(model):
    import torch

    return torch.cat([p.grad.double().flatten() for p in model.parameters() if p.grad is not None])


def time_round(step: Step, count: int, device: str) -> float:
    import torch

    sync(device)
    if device != "cuda":
        started = time.perf_counter()
        for _ in range(count):
            step()
        return (time.perf_counter() - started) * 1e3 / count
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(count):
        step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--steps", type=int, default=10, help="steps per timed round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cache-dir", default=None, help="the winners' cache (default: a new empty one)")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        import os

        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

    import copy

    import torch

    from autotune_cli import api

    smoke = args.smoke
    device = "cpu" if smoke else "cuda"
    paths = [p for p in args.paths.split(",") if p]
    unknown = sorted(set(paths) - set(PATHS))
    if unknown:
        parser.error(f"unknown paths: {', '.join(unknown)} (of {', '.join(PATHS)})")
    if smoke:
        args.layers, args.batch, args.seq, args.vocab, args.steps, args.rounds = 1, 1, 16, 96, 1, 1
    dtype = torch.float32 if smoke else torch.bfloat16
    base = build(SMOKE if smoke else LLAMA3_8B, args.vocab, args.layers, device, dtype)
    gen = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=gen).to(device)
    labels = torch.randint(0, args.vocab, (args.batch, args.seq), generator=gen).to(device)
    cache_dir = Path(args.cache_dir or tempfile.mkdtemp(prefix="autotune-train-"))

    reference = copy.deepcopy(base)
    want_loss = Step(reference, reference, ids, labels)()
    want_grads = grads_of(reference)
    del reference

    # every path's graphs kept (each its own backend): a reset between paths would make the
    # earlier ones compile again in the timed rounds
    torch._dynamo.config.recompile_limit = 64
    prepared, rows = [], []
    for path in paths:
        api.reset()
        model = copy.deepcopy(base)
        routes: list = []
        step = Step(compiler(path, model, cache_dir, routes, smoke), model, ids, labels)
        sync(device)
        started = time.perf_counter()
        loss = step()
        sync(device)
        compile_s = time.perf_counter() - started
        grads = grads_of(model)
        row = {"path": path, "compile_s": compile_s,
               "loss_err": abs(loss.double() - want_loss.double()).item() / abs(want_loss.double()).item(),
               "grad_err": ((grads - want_grads).norm() / want_grads.norm()).item(),
               "routed": sum(not r.fallback for r in routes), "matmuls": len(routes),
               "left": sorted({r.reason.split(" (")[0] for r in routes if r.fallback})}
        for _ in range(2):  # warm: CUDA graphs record at the second and third calls
            step()
        prepared.append((row, step))
        rows.append(row)
        if path == "ours-cold":
            api.reset()
    times = {row["path"]: [] for row in rows}
    for index in range(args.rounds):  # interleaved, the order reversed every other round
        for row, step in (prepared if index % 2 == 0 else prepared[::-1]):
            times[row["path"]].append(time_round(step, args.steps, device))
    for row in rows:
        row["ms"] = statistics.median(times[row["path"]])
        row["rounds"] = times[row["path"]]

    print(f"\ntraining step: Llama {args.layers} layers, batch {args.batch} x {args.seq} tokens, "
          f"{'float32 (smoke)' if smoke else 'bf16'}")
    print("| path | ms/step | compile s | routed | loss err | grad err |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['path']} | {row['ms']:.3f} | {row['compile_s']:.1f} | {row['routed']} of {row['matmuls']} "
              f"| {row['loss_err']:.1e} | {row['grad_err']:.1e} |")
    best = [r for r in rows if r["path"] in ("reduce-overhead", "max-autotune")]
    ours = [r for r in rows if r["path"] == "ours"]
    if best and ours:
        fastest = min(best, key=lambda r: r["ms"])
        print(f"ours against {fastest['path']} (the faster of torch.compile's): "
              f"{fastest['ms'] / ours[0]['ms']:.3f}x")
    for row in rows:
        if row["left"]:
            print(f"{row['path']}: left to the compiler: {'; '.join(row['left'])}")
    from bench.common import write_json

    # one file per model and token count: a device_run.sh of several runs keeps each
    write_json(f"train_step_l{args.layers}_b{args.batch}_s{args.seq}_v{args.vocab}.json",
               {"args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
