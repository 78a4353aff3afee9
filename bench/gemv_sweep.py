"""triton::gemv at configs given directly (no heuristic), on decode shapes, beside torch.mm
and a kernel that only reads B (the practical floor): kernel time as a CUDA graph over
rotating operand copies larger than the L2 (bench/common.py), every config verified.
The configs are compiled first by a pool of processes (one per core), then timed in this one.

PYTHONPATH=. python3 bench/gemv_sweep.py [--shapes 1x4096x4096,8x4096x4096] [--layouts nt,nn]
    [--families fma,each,dot,short] [--top 12] [--pdl 0,1] [--flat 0,1]
--families short: a grid for a short K along B^T (BLOCK_K 256 or K's power of two in one
masked step, with and without the eviction hints, 1-64 columns a program: down to a row or
two, as a reduction over K is tiled), the CUDA-core forms and DOT.
--pdl 0,1 times every config as a plain launch and as a programmatic dependent launch.
--flat 0,1 times every one-row per-step-sum config along B^T with and without FLAT_ROW (a 2-D
product in place of a [1, BLOCK_N, BLOCK_K] one).
Prints, per problem, every config's time (sorted), x floor (bytes / 4.3 TB/s) and x torch.mm.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune_cli.hardware.roofline import hbm_seconds  # noqa: E402
SHAPES = "1x4096x4096,8x4096x4096,16x14336x4096,1x4096x14336"
TARGET_PROGRAMS = 4 * 132


def pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def auto_split(n: int, k: int, block_n: int, block_k: int) -> int:
    blocks = -(-n // block_n)
    split = 1
    while blocks * split < TARGET_PROGRAMS and k // (split * 2) >= block_k:
        split *= 2
    return split


def config(bm, bn, bk, warps, stages=1, split=1, dot=0, each=0, evict=1, fused=0) -> dict:
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_stages": stages,
            "num_warps": warps, "DOT": dot, "REDUCE_EACH": each, "EVICT": evict, "FUSED_REDUCE": fused}


def focus_configs(m: int, n: int, k: int, layout: str) -> list[dict]:
    """Around the best of the wide sweep: the CUDA-core forms for M = 1 along K (B^T),
    the matrix units for more rows; with and without the eviction hints."""
    bm, out = pow2(m), []
    if m == 1 and layout.endswith("t"):
        pairs = ((4, 4096, 8), (2, 4096, 4), (4, 2048, 4))  # with and without the hints
        for bn, bk, warps in pairs + ((4, 4096, 16), (8, 4096, 16), (2, 4096, 8), (1, 4096, 4), (8, 2048, 8)):
            for evict in ((1, 0) if (bn, bk, warps) in pairs else (1,)):
                out.append(config(bm, bn, bk, warps, each=1, evict=evict))
        pairs = ((1, 2048, 8), (8, 512, 4))
        for bn, bk, warps in pairs + ((1, 2048, 16), (2, 2048, 8), (1, 4096, 8), (4, 1024, 4), (2, 1024, 4)):
            for evict in ((1, 0) if (bn, bk, warps) in pairs else (1,)):
                out.append(config(bm, bn, bk, warps, evict=evict))
    for bn, bk, warps, stages in ((32, 512, 4, 3), (16, 512, 2, 3), (16, 1024, 2, 3), (32, 1024, 4, 2),
                                  (16, 512, 1, 3), (16, 512, 2, 4), (32, 512, 4, 4), (32, 512, 2, 3),
                                  (16, 1024, 1, 2), (64, 512, 4, 2),
                                  # 64 wide (the warp-group MMA's least M), deep pipelines: the
                                  # float8 GEMV's leaders (decode_roofline.py --dtype float8_e4m3fn)
                                  (64, 256, 4, 4), (64, 256, 4, 5), (64, 128, 4, 6), (64, 128, 4, 8),
                                  (128, 128, 4, 4)):
        for evict in ((1, 0) if (bn, bk, warps, stages) == (32, 512, 4, 3) else (1,)):
            out.append(config(16, bn, bk, warps, stages, 1, dot=1, evict=evict))
    for bn, bk, warps, stages, split in ((32, 256, 4, 3, 4), (64, 256, 4, 3, 8), (16, 512, 2, 3, 2)):
        out.append(config(16, bn, bk, warps, stages, split, dot=1, fused=1))  # split, one launch
    return out


def configs(m: int, n: int, k: int, layout: str, families: set[str]) -> list[dict]:
    """A sweep around what should stream B well: many programs, 16-byte loads, enough bytes
    in flight per SM."""
    bm = pow2(m)
    out = []
    k_fast = layout.endswith("t")
    if "each" in families:  # reduce over K every step: the accumulator is [BLOCK_M, BLOCK_N]
        if k_fast:
            for bn in (1, 2, 4, 8, 16):
                for bk in (512, 1024, 2048, 4096):
                    for warps in (4, 8):
                        per_thread = bn * bk / (32 * warps)
                        if bk > k or not 8 <= per_thread <= 64 or bm * per_thread > 256:
                            continue
                        pipelined = (bn, bk, warps) in ((4, 1024, 4), (8, 512, 4), (2, 2048, 4), (4, 2048, 8))
                        split = auto_split(n, k, bn, bk) if n // bn < 264 else 1
                        for stages in ((1, 3) if pipelined else (1,)):
                            out.append(config(bm, bn, bk, warps, stages, split, each=1))
        else:
            for bn in (64, 128, 256):
                for bk in (16, 32, 64):
                    for warps in (4, 8):
                        per_thread = bn * bk / (32 * warps)
                        if not 8 <= per_thread <= 64:
                            continue
                        out.append(config(bm, bn, bk, warps, 1, auto_split(n, k, bn, bk), each=1))
    if "fma" in families:  # elementwise [BLOCK_M, tile] accumulator, reduced after the loop
        tiles = ((8, 512, 4), (16, 256, 4), (4, 1024, 4), (16, 512, 8), (8, 1024, 8)) if k_fast else \
            ((64, 16, 4), (64, 32, 4), (128, 16, 4), (128, 32, 8), (256, 16, 8), (32, 32, 4), (32, 64, 8))
        for bn, bk, warps in tiles:
            if bm * bn * bk / (32 * warps) > 128:
                continue
            for stages in ((1, 3) if (bn, bk) in ((8, 512), (64, 32)) else (1,)):
                split = auto_split(n, k, bn, bk)
                out.append(config(bm, bn, bk, warps, stages, split))
                if split > 1:
                    out.append(config(bm, bn, bk, warps, stages, max(1, split // 2)))
    if "short" in families and k_fast:  # a short K along B^T: few steps, wider column blocks
        # BLOCK_K a divisor of K (256) or K's power of two in one masked step; tiles of
        # 4-64 values a thread, 512 to N programs' worth of column blocks.
        for bk in sorted({256, pow2(k)}):
            for bn in (1, 2, 4, 8, 16, 32, 64):
                for warps in (2, 4, 8, 16):
                    per_thread = bm * bn * bk / (32 * warps)
                    if bk > pow2(k) or not 4 <= per_thread <= 64:
                        continue
                    steps = -(-k // bk)
                    for stages in ((1, 2) if steps > 1 else (1,)):
                        # one step: with and without the eviction hints (Inductor's
                        # persistent reduction marks A's loads only)
                        for evict in ((1, 0) if steps == 1 else (1,)):
                            out.append(config(bm, bn, bk, warps, stages, each=1, evict=evict))
                        if per_thread <= 32:
                            out.append(config(bm, bn, bk, warps, stages))
        for bn, bk, warps, stages in ((32, 256, 4, 3), (64, 256, 4, 3), (64, 256, 8, 3), (128, 256, 8, 3),
                                      (64, 128, 4, 4), (128, 128, 4, 4), (32, 128, 4, 5), (64, 256, 4, 2)):
            if bk <= pow2(k):
                out.append(config(16, bn, bk, warps, stages, 1, dot=1))
    if "dot" in families:  # the matrix units, M padded to 16
        tiles = [(bn, bk, 4) for bn in (16, 32, 64) for bk in (128, 256, 512)] + \
            [(16, 256, 2), (32, 256, 2), (16, 512, 2), (16, 256, 1), (32, 128, 1)]
        if m == 1:
            tiles = [(16, 256, 4), (32, 256, 4), (16, 512, 4), (32, 512, 4)]
        for bn, bk, warps in tiles:
            split = auto_split(n, k, bn, bk)
            out.append(config(16, bn, bk, warps, 3, split, dot=1))
            if m > 1 and bk <= 256 and warps == 4:
                out.append(config(16, bn, bk, warps, 5, split, dot=1))
            if split > 1 and m > 1:
                out.append(config(16, bn, bk, warps, 3, 1, dot=1))
    seen, unique = set(), []
    for c in out:
        key = tuple(sorted(c.items()))
        if key not in seen:
            seen.add(key)
            unique.append(c)
    return unique


def label(c: dict) -> str:
    family = "dot" if c["DOT"] else ("each" if c["REDUCE_EACH"] else "fma")
    return (f"{family:4} BN{c['BLOCK_N']} BK{c['BLOCK_K']} w{c['num_warps']} s{c['num_stages']}"
            f" sk{c['SPLIT_K']}" + ("" if c.get("EVICT", 1) else " noevict")
            + (" fused" if c.get("FUSED_REDUCE") else "")
            + (" pdl" if c.get("PDL") else "") + (" flat" if c.get("FLAT_ROW") else ""))


def compile_case(args) -> str | None:
    """Build and compile one config on the GPU without launching it; the error, or None."""
    problem_dict, cfg, kernel_dir = args
    try:
        from autotune_cli.problem import GemmProblem
        from autotune_cli.runner.verify import make_operands
        from autotune_cli.templates import get_template

        problem = GemmProblem.from_dict(problem_dict)
        template = get_template("triton::gemv")
        run = template.build(problem, template.full_params(problem, cfg), kernel_dir)
        ops = make_operands(problem, 0, "cuda")
        run.warmup(ops)
        return None
    except Exception as exc:  # noqa: BLE001 - a config that does not compile is reported
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--layouts", default="nt,nn")
    parser.add_argument("--families", default="fma,each,dot")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--focus", action="store_true", help="the focused list (focus_configs) instead")
    parser.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1))
    parser.add_argument("--pdl", default="0", help="PDL values each config is timed with: 0, 1 or 0,1")
    parser.add_argument("--flat", default="0",
                        help="FLAT_ROW values each one-row per-step-sum config along B^T is timed with: 0, 1 or 0,1")
    args = parser.parse_args()
    pdls = [int(v) for v in args.pdl.split(",")]
    flats = [int(v) for v in args.flat.split(",")]

    from autotune_cli.problem import make_problem
    from autotune_cli.templates import get_template

    template = get_template("triton::gemv")
    families = set(args.families.split(","))
    kernel_dir = tempfile.mkdtemp(prefix="gemv-sweep-")
    plan = []  # (problem, [config, ...])
    for text in args.shapes.split(","):
        m, n, k = (int(x) for x in text.split("x"))
        for layout in args.layouts.split(","):
            problem = make_problem(m=m, n=n, k=k, dtype="bfloat16", layout=layout, device="cuda")
            kept = []
            listed = focus_configs(m, n, k, layout) if args.focus else configs(m, n, k, layout, families)
            flat_ok = m == 1 and layout.endswith("t")  # FLAT_ROW: one row, K along B^T, REDUCE_EACH
            listed = [{**c, "FLAT_ROW": flat} for c in listed
                      for flat in (flats if flat_ok and c["REDUCE_EACH"] and not c["DOT"] else (0,))]
            for c in ({**c, "PDL": pdl} for c in listed for pdl in pdls):
                try:
                    template.full_params(problem, c)
                    kept.append(c)
                except ValueError as exc:
                    print(f"  refused {label(c)}: {exc}")
            plan.append((problem, kept))
    cases = [(problem.to_dict(), c, kernel_dir) for problem, kept in plan for c in kept]
    print(f"compiling {len(cases)} configs with {args.workers} processes", flush=True)
    with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        errors = list(pool.map(compile_case, cases, chunksize=1))
    failed = {(json.dumps(p, sort_keys=True), json.dumps(c, sort_keys=True)): e
              for (p, c, _), e in zip(cases, errors) if e}
    print(f"compiled: {len(cases) - len(failed)} ok, {len(failed)} failed", flush=True)

    from bench.common import SideBySide
    from bench.decode_roofline import launchable, reader

    bench = SideBySide()
    summary = []
    for problem, kept in plan:
        floor_us = hbm_seconds(problem.min_bytes) * 1e6
        runs, labels, cfgs = [bench.anchor(problem), reader(2112, 4096, 8), reader(1056, 4096, 8)], \
            ["torch.mm", "read B only 2112p", "read B only 1056p"], [None, None, None]
        if 1 in pdls:
            runs.append(reader(2112, 4096, 8, pdl=True))
            labels.append("read B only 2112p pdl")
            cfgs.append(None)
        pkey = json.dumps(problem.to_dict(), sort_keys=True)
        for c in kept:
            error = failed.get((pkey, json.dumps(c, sort_keys=True)))
            if error:
                print(f"  {label(c)}: compile failed: {error}")
                continue
            try:
                runs.append(template.build(problem, template.full_params(problem, c), kernel_dir))
                labels.append(label(c))
                cfgs.append(c)
            except Exception as exc:  # noqa: BLE001
                print(f"  {label(c)}: build failed: {exc}")
        runs_ok, labels_ok = launchable(problem, runs, labels)
        cfgs = [cfgs[labels.index(lab)] for lab in labels_ok]
        times, verdicts = bench.time_many(problem, runs_ok, rounds=3)
        torch_us = times[0] * 1e3
        rows = []
        for lab, ms, verdict, c in zip(labels_ok, times, verdicts, cfgs):
            ok = verdict.ok or lab.startswith("read")
            rows.append((ms * 1e3, lab, ok, c, verdict.reason))
        print(f"== {problem.describe()}: floor {floor_us:.2f} us, torch.mm {torch_us:.2f} us, "
              f"{sum(r[3] is not None for r in rows)} configs", flush=True)
        rows.sort(key=lambda r: r[0])
        shown = 0
        for us, lab, ok, _config, reason in rows:
            if shown < args.top or lab.startswith(("torch", "read")):
                print(f"  {lab:34} {us:7.2f} us  x floor {us / floor_us:5.2f}  x torch {us / torch_us:5.2f}"
                      + ("" if ok else f"  WRONG {reason}"))
                shown += 1
        for family in ("fma ", "each", "dot "):
            best = [r for r in rows if r[1].startswith(family) and r[2]]
            if best:
                print(f"  best {family}: {best[0][1]} {best[0][0]:.2f} us")
        best = next((r for r in rows if r[3] is not None and r[2]), None)
        summary.append((problem.describe(), floor_us, torch_us, best))
        print("  all: " + json.dumps([[round(r[0], 2), r[1]] for r in rows if r[3] is not None]), flush=True)
    print("\n| problem | floor us | torch.mm us | best gemv us | x floor | config |")
    print("|---|---|---|---|---|---|")
    for describe, floor_us, torch_us, best in summary:
        if best:
            print(f"| {describe} | {floor_us:.2f} | {torch_us:.2f} | {best[0]:.2f} | {best[0] / floor_us:.2f} "
                  f"| {best[1]} |")


if __name__ == "__main__":
    main()
