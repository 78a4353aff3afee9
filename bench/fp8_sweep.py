"""Sweep float8 candidate configs for a few shapes: every candidate tuned by the ordinary
tuner (compile pool, verification against float64, the same timing for all: a CUDA graph of
calls over rotating operand copies larger than the L2, as bench/fp8_suite.py times them),
aten::_scaled_mm (torch._scaled_mm) among them, with the shipped config lists replaced by
the wide lists below. Prints each case's candidates ranked, with TFLOP/s and the ratio to
torch._scaled_mm: the input for the shipped lists in configs/.

PYTHONPATH=. python3 bench/fp8_sweep.py [--shapes 8192x8192x8192] [--scales row,tensor] [--top 25] \
    [--fast-accum]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune_cli.heuristics import triton_scaled_mm as fp8_heuristics  # noqa: E402
from autotune_cli.problem import make_problem, parse_mnk  # noqa: E402
from autotune_cli.settings import MeasurePolicy, TuneSettings  # noqa: E402
from autotune_cli.tune.tuner import Tuner  # noqa: E402

DEFAULT_SHAPES = "8192x8192x8192,2048x4096x14336,8x4096x4096,16x14336x4096"


def tile(bm, bn, bk, stages, warps, group=8, **extra):
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group, "num_stages": stages,
            "num_warps": warps, **extra}


def persistent_space() -> tuple:
    """Large tiles for the compute-bound shapes, with the accumulation in the dot or apart,
    the loop nest flattened or not, and warp specialization asked for on either loop."""
    out = []
    tiles = [(128, 256, 128, 3, 8), (256, 128, 128, 3, 8), (128, 128, 128, 4, 8), (128, 128, 256, 3, 8),
             (128, 256, 64, 4, 8), (64, 256, 128, 4, 4)]
    for (bm, bn, bk, st, w), promote, flatten in itertools.product(tiles, (0, 1), (1, 0)):
        out.append(tile(bm, bn, bk, st, w, FLATTEN=flatten, PROMOTE_IN_DOT=promote))
    for (bm, bn, bk, st, w), group in itertools.product(tiles[:2], (4, 16)):
        out.append(tile(bm, bn, bk, st, w, group=group, PROMOTE_IN_DOT=1))
    for (bm, bn, bk, st, w), ws in itertools.product(tiles[:4], (1, 2)):
        out.append(tile(bm, bn, bk, st, w, FLATTEN=0, WARP_SPECIALIZE=ws, PROMOTE_IN_DOT=1))
    out.append(tile(128, 128, 128, 5, 8, PROMOTE_IN_DOT=1))
    return tuple(out)


def tiled_space() -> tuple:
    """Decode tiles (BLOCK_M 16) for the tiled kernel, one program per output tile."""
    out = []
    for bn, bk, st, w in itertools.product((16, 32, 64, 128), (128, 256, 512), (3, 5), (4,)):
        if bn * bk * st <= 128 * 1024:
            out.append(tile(16, bn, bk, st, w))
    out += [tile(32, 64, 256, 4, 4), tile(16, 32, 256, 4, 2), tile(16, 64, 256, 4, 2)]
    return tuple(out)


def splitk_space() -> tuple:
    out = []
    for bn, bk, st, sk in itertools.product((32, 64, 128), (128, 256), (3, 5), (2, 4, 8)):
        out.append(tile(16, bn, bk, st, 4, SPLIT_K=sk))
    for bn, sk in itertools.product((32, 64), (4, 16)):
        out.append(tile(16, bn, 256, 4, 2, SPLIT_K=sk))
        out.append(tile(16, bn, 512, 3, 4, SPLIT_K=sk))
    return tuple(out)


SPACES = {}


ORIGINAL = fp8_heuristics.shipped_configs


def patched_shipped(name: str):
    return SPACES[name] if name in SPACES else ORIGINAL(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=DEFAULT_SHAPES)
    parser.add_argument("--scales", default="row,tensor")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--fast-accum", action="store_true", help="use_fast_accum=True problems")
    parser.add_argument("--device", default="cuda", help="cpu: a smoke run of this script under the interpreter")
    args = parser.parse_args()
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton-fp8-sweep-"))
    SPACES.update({"triton_scaled_mm_cuda": persistent_space(), "triton_scaled_mm_splitk_cuda": splitk_space()})
    fp8_heuristics.shipped_configs = patched_shipped
    settings = TuneSettings(device=args.device, cache_dir=Path(tempfile.mkdtemp()), force=True,
                            measure=MeasurePolicy.for_device(args.device, graph_below_us=1e12))
    summary = []
    with Tuner(settings) as tuner:
        for shape in args.shapes.split(","):
            m, n, k = parse_mnk(shape)
            # the persistent template's list for large M, the tiled one's decode list for small
            SPACES["triton_scaled_mm_cuda"] = persistent_space() if m > 64 else tiled_space()
            for scale in args.scales.split(","):
                problem = make_problem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale=scale, device=args.device,
                                       fast_accum=args.fast_accum)
                started = time.perf_counter()
                outcome = tuner.tune(problem)
                wall = time.perf_counter() - started
                cands = outcome.entry.to_dict()["candidates"]
                ok = sorted((c for c in cands if c["status"] == "ok"), key=lambda c: c["ms"])
                torch_ms = next((c["ms"] for c in ok if c["uid"] == "aten::_scaled_mm"), float("nan"))
                mode = " fast-accum" if args.fast_accum else ""
                print(f"\n=== {m}x{n}x{k} {scale}{mode}: {len(ok)} ok of {len(cands)}, tune {wall:.0f} s, "
                      f"torch._scaled_mm {torch_ms:.4f} ms ({problem.tflops(torch_ms):.0f} TFLOP/s)", flush=True)
                for c in ok[:args.top]:
                    p = c.get("params") or {}
                    short = " ".join(f"{key}={p[key]}" for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M",
                                                                    "num_stages", "num_warps", "SPLIT_K", "FLATTEN",
                                                                    "WARP_SPECIALIZE", "PROMOTE_IN_DOT") if key in p)
                    print(f"  {c['ms']:.4f} ms {problem.tflops(c['ms']):6.0f} TF/s x{torch_ms / c['ms']:.3f} "
                          f"{c['uid']:34} {short}")
                failed = {}
                for c in cands:
                    if c["status"] != "ok":
                        key = (c["uid"], c["status"], (c.get("error") or "").strip().splitlines()[-1:][0][:150]
                               if c.get("error") else "")
                        failed[key] = failed.get(key, 0) + 1
                for (uid, status, error), count in failed.items():
                    print(f"  not ok x{count}: {uid} {status}: {error}")
                best = ok[0] if ok else None
                summary.append((f"{m}x{n}x{k} {scale}", best and best["uid"], best and best["ms"], torch_ms))
    print("\ncase                         best                               ms       torch ms  ratio")
    for case, uid, ms, torch_ms in summary:
        ratio = torch_ms / (ms or float("nan"))
        print(f"{case:28} {str(uid):34} {ms or float('nan'):.4f}  {torch_ms:.4f}  {ratio:.3f}")


if __name__ == "__main__":
    main()
