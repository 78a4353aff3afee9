"""Decode (M <= 16) against what the GPU can read: how far each kernel is from the HBM floor.

For each decode shape, in one process with the tuner's timer and policy (bench/common.py):
  - torch.mm (cuBLAS), the anchor;
  - triton::mm at the tuned winner's config and at configs around it (more programs: BLOCK_N
    32 gives 128 programs on 4096 columns, wider BLOCK_K, stages, warps), each verified;
  - a read-only Triton kernel over B alone (each program sums a contiguous share of B into one
    float), at several program counts and block sizes, also launched as a programmatic
    dependent launch (PDL), and one whose tiles come through TMA in a pipelined loop: no
    matmul, only B's bytes read once.
    Its best time is what any kernel that must read B takes here, and so the practical
    floor; "x floor" divides by bytes / 4.3 TB/s (the H200's HBM bandwidth).

With --dtype float8_e4m3fn (and --scale row|tensor|block) the anchor is torch._scaled_mm
(cuBLASLt) and the kernels triton::scaled_gemv at its shipped configs and at FP8_EXTRA.

PYTHONPATH=. python3 bench/decode_roofline.py [--only 16x4096x4096] [--dtype float8_e4m3fn --scale row]
Writes $OUT/decode_roofline.json (or bench_out/).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from autotune_cli.problem import make_problem  # noqa: E402
from autotune_cli.hardware.roofline import HBM_BYTES_PER_S  # noqa: E402
from autotune_cli.templates import get_template  # noqa: E402
from bench.common import SideBySide, write_json  # noqa: E402

SHAPES = ((16, 4096, 4096), (16, 4096, 14336), (8, 14336, 4096))
FP8_SHAPES = ((8, 4096, 4096), (16, 14336, 4096))
# float8 GEMV tiles beside the shipped list (heuristics/gemv.FP8_TILES): deeper pipelines,
# longer steps, wider blocks, B's loads without the evict_first hint (EVICT 0).
FP8_EXTRA = tuple(
    {"BLOCK_N": bn, "BLOCK_K": bk, "num_stages": st, "num_warps": w, "SPLIT_K": 1, "DOT": 1, "EVICT": evict}
    for bn, bk, st, w, evict in [
        (64, 256, 7, 4, 1), (64, 256, 8, 4, 1), (64, 512, 5, 4, 1), (64, 512, 3, 4, 1), (128, 256, 5, 4, 1),
        (128, 256, 6, 4, 1), (128, 128, 8, 4, 1), (64, 256, 6, 4, 0), (64, 256, 4, 4, 0), (128, 256, 4, 4, 0),
    ])
WINNER = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "GROUP_M": 8, "num_stages": 5, "num_warps": 2}


def mm_configs() -> list[dict]:
    configs = [dict(WINNER)]
    for bn, bk, stages, warps in [
        (32, 256, 4, 2), (32, 256, 5, 2), (32, 256, 6, 2), (32, 256, 4, 4), (32, 256, 6, 4),
        (32, 512, 3, 2), (32, 512, 4, 2), (32, 512, 3, 4), (32, 512, 4, 4),
        (64, 256, 4, 2), (64, 256, 6, 2), (64, 256, 5, 4),
        (64, 512, 3, 4), (64, 512, 4, 4), (64, 512, 3, 8),
        (128, 256, 3, 4), (128, 128, 5, 4),
    ]:
        configs.append({"BLOCK_M": 16, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8,
                        "num_stages": stages, "num_warps": warps})
    return configs


@triton.jit
def read_sum(B, OUT, total, PER_PROGRAM: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    """Program p sums B's elements [p*PER_PROGRAM, (p+1)*PER_PROGRAM) into OUT[p]. PDL: launched
    as a programmatic dependent launch, the grid may be scheduled while the previous kernel
    drains, and waits for it (gdc_wait) before reading anything."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    pid = tl.program_id(0)
    start = pid.to(tl.int64) * PER_PROGRAM
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for offset in range(0, PER_PROGRAM, BLOCK):
        idx = start + offset + tl.arange(0, BLOCK)
        acc += tl.load(B + idx, mask=idx < total, other=0.0).to(tl.float32)
    tl.store(OUT + pid, tl.sum(acc, axis=0))


@triton.jit
def read_tma(desc, OUT, ROWS_PER_PROGRAM: tl.constexpr, BLOCK_ROWS: tl.constexpr, COLS: tl.constexpr,
             STAGES: tl.constexpr):
    """Program p sums rows [p*ROWS_PER_PROGRAM, ...) of B viewed as [rows, COLS], tiles of
    [BLOCK_ROWS, COLS] loaded by TMA in a loop pipelined STAGES deep."""
    pid = tl.program_id(0)
    first = pid * ROWS_PER_PROGRAM
    acc = tl.zeros((BLOCK_ROWS, COLS), dtype=tl.float32)
    for step in tl.range(0, ROWS_PER_PROGRAM, BLOCK_ROWS, num_stages=STAGES):
        acc += desc.load([first + step, 0]).to(tl.float32)
    tl.store(OUT + pid, tl.sum(tl.sum(acc, axis=1), axis=0))


def reader(programs: int, block: int, warps: int, pdl: bool = False):
    """A runnable (ops -> None) that reads ops.b once with `programs` programs (`pdl`: as a
    programmatic dependent launch)."""
    sums = torch.empty(programs, device="cuda", dtype=torch.float32)
    extra = {"PDL": True, "launch_pdl": True} if pdl else {}

    def run(ops):
        total = ops.b.numel()
        per_program = triton.cdiv(triton.cdiv(total, programs), block) * block
        read_sum[(programs,)](ops.b, sums, total, PER_PROGRAM=per_program, BLOCK=block, num_warps=warps, **extra)

    return run


def tma_reader(programs: int, block_rows: int, cols: int, stages: int, warps: int = 4):
    """A runnable that reads ops.b once through TMA (B's elements a multiple of
    programs x block_rows x cols)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    sums = torch.empty(programs, device="cuda", dtype=torch.float32)

    def run(ops):
        stored = ops.b if ops.b.is_contiguous() else ops.b.t()  # B^T stored [n, k]: its own memory
        rows = stored.numel() // cols
        if rows % (programs * block_rows):
            raise ValueError(f"{rows} rows of {cols} do not split into {programs} x {block_rows}")
        desc = TensorDescriptor(stored.view(rows, cols), [rows, cols], [cols, 1], [block_rows, cols])
        read_tma[(programs,)](desc, sums, ROWS_PER_PROGRAM=rows // programs, BLOCK_ROWS=block_rows, COLS=cols,
                              STAGES=stages, num_warps=warps)

    return run


def launchable(problem, runs, labels):
    """The runnables that launch at all (a config may want more shared memory than there is),
    with their labels; those that do not are said and left out."""
    from autotune_cli.runner.verify import make_operands

    ops = make_operands(problem, 1, "cuda")
    kept = []
    for run, label in zip(runs, labels):
        try:
            run(ops)
            torch.cuda.synchronize()
            kept.append((run, label))
        except Exception as exc:  # noqa: BLE001 - a config this GPU cannot run
            print(f"  {label}: left out ({type(exc).__name__}: {str(exc).splitlines()[0][:100]})", flush=True)
    return [r for r, _ in kept], [label for _, label in kept]


def candidates(problem) -> list[tuple[str, dict, str]]:
    """(uid, config, label) of the matmul kernels timed for the problem."""
    if problem.op != "scaled_mm":
        return [("triton::mm", config, "triton::mm BN{BLOCK_N} BK{BLOCK_K} s{num_stages} w{num_warps}".format(**config))
                for config in mm_configs()]
    from autotune_cli.heuristics.gemv import SCALED_GEMV
    from autotune_cli.heuristics.registry import lookup_heuristic

    shipped = list(lookup_heuristic(SCALED_GEMV, "cuda", problem.op).get_configs(problem))
    extra = [{"BLOCK_M": 16, **config} for config in FP8_EXTRA] if problem.scale != "block" else []
    out = []
    for config in shipped + [c for c in extra if c not in shipped]:
        form = "DOT" if config.get("DOT") else "EACH" if config.get("REDUCE_EACH") else "FMA"
        label = ("scaled_gemv{} {form} BN{BLOCK_N} BK{BLOCK_K} s{num_stages} w{num_warps} sk{SPLIT_K}{}"
                 .format("" if config in shipped else "+", "" if config.get("EVICT", 1) else " noevict",
                         form=form, **config))
        out.append((SCALED_GEMV, config, label))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default=None, help="comma-separated MxNxK shapes")
    parser.add_argument("--dtype", default="bfloat16", help="bfloat16, float16 or float8_e4m3fn (scaled_mm)")
    parser.add_argument("--scale", default="row", help="the float8 scales: row, tensor or block")
    args = parser.parse_args()
    bench = SideBySide()
    kernel_dir = tempfile.mkdtemp(prefix="decode-roofline-")
    rows = []
    fp8 = args.dtype.startswith("float8")
    for m, n, k in FP8_SHAPES if fp8 else SHAPES:
        name = f"{m}x{n}x{k}"
        if args.only and name not in args.only.split(","):
            continue
        problem = make_problem(m=m, n=n, k=k, dtype=args.dtype, device="cuda", scale=args.scale if fp8 else None)
        floor_ms = problem.min_bytes / HBM_BYTES_PER_S * 1e3
        runs, labels = [bench.anchor(problem)], ["torch._scaled_mm" if fp8 else "torch.mm"]
        for uid, config, label in candidates(problem):
            try:
                params = get_template(uid).full_params(problem, config)
                runs.append(bench.runnable(problem, {"uid": uid, "params": params}, kernel_dir))
                labels.append(label)
            except Exception as exc:  # noqa: BLE001 - a config the template refuses: said, left out
                print(f"  {label}: left out ({type(exc).__name__}: {str(exc).splitlines()[0][:100]})", flush=True)
        for programs in (132, 264, 528, 1056, 2112):
            for block, warps in ((2048, 4), (4096, 8), (8192, 8)):
                runs.append(reader(programs, block, warps))
                labels.append(f"read B only: {programs} programs, block {block}, {warps} warps")
        for programs in (1056, 2112):
            runs.append(reader(programs, 4096, 8, pdl=True))
            labels.append(f"read B only, PDL: {programs} programs, block 4096, 8 warps")
        for programs, block_rows, stages in ((128, 16, 4), (256, 16, 4), (256, 16, 6), (512, 8, 4), (512, 16, 3)):
            runs.append(tma_reader(programs, block_rows, 256, stages))
            labels.append(f"read B only, TMA: {programs} programs, [{block_rows}, 256] x {stages} stages")
        runs, labels = launchable(problem, runs, labels)
        times, verdicts = bench.time_many(problem, runs, rounds=4)
        print(f"== {name} {args.dtype}{' ' + args.scale if fp8 else ''}: floor {floor_ms * 1e3:.2f} us "
              "(bytes / 4.3 TB/s)", flush=True)
        shape_rows = []
        for label, ms, verdict in zip(labels, times, verdicts):
            is_mm = not label.startswith("read")
            row = {"shape": name, "kernel": label, "ms": ms, "x_floor": ms / floor_ms,
                   "verified": verdict.ok if is_mm else None}
            shape_rows.append(row)
            print(f"  {label:52s} {ms * 1e3:7.2f} us  x floor {ms / floor_ms:5.2f}"
                  + ("" if not is_mm else ("  ok" if verdict.ok else f"  WRONG {verdict.reason}")), flush=True)
        best_mm = min((r for r in shape_rows if r["verified"]), key=lambda r: r["ms"])
        best_read = min((r for r in shape_rows if r["verified"] is None), key=lambda r: r["ms"])
        print(f"  best matmul {best_mm['kernel']} {best_mm['ms'] * 1e3:.2f} us ({best_mm['x_floor']:.2f}x); "
              f"best read of B alone {best_read['ms'] * 1e3:.2f} us ({best_read['x_floor']:.2f}x)", flush=True)
        rows.extend(shape_rows)
    write_json("decode_roofline.json", rows)


if __name__ == "__main__":
    main()
