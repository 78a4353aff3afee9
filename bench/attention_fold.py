"""Grouped-query decode attention: K and V repeated for the query heads (repeat_kv), against
the query heads folded into the rows (routing/gqa.py) and against our split-key kernel
(routing/decode_attention.py), each compiled by torch.compile.

Per batch size and cache length: q [B, H, 1, D], K and V [B, KV, S, D] (bf16), a boolean mask
[B, 1, 1, S] (three fifths of the keys visible), and three functions compiled with
`torch.compile(dynamic=False)`: `repeated` (repeat_kv's expand + reshape of K and V, then
SDPA, as transformers writes it), `folded` (q reshaped to [B, KV, H / KV, D], SDPA over K
and V as they are, reshaped back) and `split` (autotune::gqa_attention, the keys split as
the compile splits them on this GPU). Each is timed by split_choice.graph_us (the compile's
own timer) as a CUDA graph of `--calls` calls on the same operands (at batch 1 and 1024
keys K and V are 4 MB: they stay in the L2, as one layer's cache does between the copy and
the attention), the median of seven replays; the folded and split outputs are checked
against the repeated one (relative Frobenius error). What decides is a model's step
(`serve_decode.py`): this says where each form gains or loses.

GPU:  PYTHONPATH=. python3 bench/attention_fold.py [--batches 1,2,4,8,16] [--keys 1024,4096]
Writes $OUT/attention_fold.json (default ./bench_out).
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import write_json  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", default="1,2,4,8,16")
    parser.add_argument("--keys", default="1024,4096", help="cache lengths S")
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()

    import torch
    import torch.nn.functional as F

    torch._dynamo.config.cache_size_limit = 256
    torch._dynamo.config.recompile_limit = 256
    n, kv, dim = args.heads // args.kv_heads, args.kv_heads, args.head_dim

    def repeated(q, k, v, mask):
        return F.scaled_dot_product_attention(q, repeated_kv(k, n), repeated_kv(v, n), attn_mask=mask)

    def folded(q, k, v, mask):
        b, h, rows, d = q.shape
        out = F.scaled_dot_product_attention(q.reshape(b, kv, n * rows, d), k, v, attn_mask=mask)
        return out.reshape(b, h, rows, d)

    from autotune_cli.routing import decode_attention
    from autotune_cli.routing.split_choice import graph_us, repeated_kv

    gqa_attention = decode_attention.register_op()
    units = torch.cuda.get_device_properties(0).multi_processor_count

    def split(q, k, v, mask):
        return gqa_attention(q, k, v, mask, None, decode_attention.split_count(q.shape[0] * kv, k.shape[2], units))

    compiled_repeated = torch.compile(repeated, dynamic=False)
    compiled_folded = torch.compile(folded, dynamic=False)
    compiled_split = torch.compile(split, dynamic=False)
    rows = []
    print(f"{'keys':>5} {'batch':>5} {'B x KV':>6} {'rep us':>7} {'fold us':>7} {'split us':>8} {'fold/rep':>8}"
          f" {'split/rep':>9} {'err':>7}")
    for keys in map(int, args.keys.split(",")):
        for batch in map(int, args.batches.split(",")):
            g = torch.Generator(device="cuda").manual_seed(batch)
            q = torch.randn(batch, args.heads, 1, dim, device="cuda", dtype=torch.bfloat16, generator=g)
            k, v = (torch.randn(batch, kv, keys, dim, device="cuda", dtype=torch.bfloat16, generator=g)
                    for _ in range(2))
            mask = torch.arange(keys, device="cuda").expand(batch, 1, 1, keys) < keys * 3 // 5
            want = repeated(q, k, v, mask).float()
            err = max(((fn(q, k, v, mask).float() - want).norm() / want.norm()).item()
                      for fn in (compiled_folded, compiled_split))
            rep_us, fold_us, split_us = (graph_us(functools.partial(fn, q, k, v, mask), args.calls, replays=7)
                                         for fn in (compiled_repeated, compiled_folded, compiled_split))
            rows.append({"keys": keys, "batch": batch, "programs": batch * kv, "repeated_us": rep_us,
                         "folded_us": fold_us, "split_us": split_us, "error": err})
            print(f"{keys:>5} {batch:>5} {batch * kv:>6} {rep_us:>7.2f} {fold_us:>7.2f} {split_us:>8.2f}"
                  f" {fold_us / rep_us:>8.3f} {split_us / rep_us:>9.3f} {err:>7.1e}", flush=True)
    path = write_json("attention_fold.json", {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                              "heads": args.heads, "kv_heads": kv, "head_dim": dim, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
