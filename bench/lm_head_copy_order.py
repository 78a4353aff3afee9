"""lm_head (2048x50257x768 fp16): does the order in which B's padded copy is written change
the cuBLAS kernel that reads it next?

bench/lm_head_overlap.py (2026-11-30) timed cuBLAS alone on the padded B, the L2 flushed
before, at 0.2656 ms, and Inductor's whole call (its pad kernel, then the same cuBLAS
kernel) at 0.2968: Inductor's cuBLAS ran faster after its pad than alone. The copy leaves up
to ~50 MB of the freshly written B in L2; which part depends on the order the copy's
programs ran in. Inductor's pad walks the padded B flat (rows in order: the last rows of K
stay), ours (`row_copy`, grid rows x column blocks) by column block (the last columns stay).
Here one copy kernel walks B's tiles in four orders, each followed by the same cuBLAS call
into the padded output; with ours, Inductor's and cuBLAS alone beside them, all in one
process, timed by the tuner's timer (the L2 flushed before each call) in six passes of
alternating order, then each one's kernels by torch.profiler.

PYTHONPATH=. python3 bench/lm_head_copy_order.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import LM_HEAD, fresh_compile_caches, write_json  # noqa: E402

M, N, K = LM_HEAD
PITCH = 50264
BLOCK = 1024
ORDERS = {  # name: (blocks of one row run together, reversed)
    "by column block": (False, False),
    "by column block, reversed": (False, True),
    "by row": (True, False),
    "by row, reversed": (True, True),
}


def main() -> None:
    scratch = fresh_compile_caches("lm-head-order-")
    import torch
    import triton
    import triton.language as tl

    from bench.common import POLICY, lm_head_beside_inductor, print_kernel_times, relative_error

    @triton.jit
    def copy_tiles(src, dst, rows, cols, src_row, dst_row, BY_ROW: tl.constexpr, REVERSED: tl.constexpr,
                   BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        blocks = tl.cdiv(cols, BLOCK)
        if REVERSED:
            pid = rows * blocks - 1 - pid
        if BY_ROW:
            row, block = pid // blocks, pid % blocks
        else:
            row, block = pid % rows, pid // rows
        offs = block * BLOCK + tl.arange(0, BLOCK)
        mask = offs < cols
        values = tl.load(src + row.to(tl.int64) * src_row + offs, mask=mask)
        tl.store(dst + row.to(tl.int64) * dst_row + offs, values, mask=mask)

    timer, a, b, _, run_ours, inductor = lm_head_beside_inductor(scratch)
    padded = torch.zeros(K, PITCH, device="cuda", dtype=torch.float16)
    out = torch.empty(M, PITCH, device="cuda", dtype=torch.float16)
    grid = (K * triton.cdiv(N, BLOCK),)

    def ordered(by_row: bool, reversed_: bool):
        def run():
            copy_tiles[grid](b, padded, K, N, b.stride(0), padded.stride(0), BY_ROW=by_row, REVERSED=reversed_,
                             BLOCK=BLOCK, num_warps=4)
            torch.mm(a, padded, out=out)
            return out[:, :N]
        return run

    copy_tiles[grid](b, padded, K, N, b.stride(0), padded.stride(0), BY_ROW=True, REVERSED=False,
                     BLOCK=BLOCK, num_warps=4)

    cases = {"ours": run_ours, "inductor": inductor,
             "cuBLAS alone (B padded before)": lambda: torch.mm(a, padded, out=out)}
    for name, (by_row, reversed_) in ORDERS.items():
        cases[f"copy {name} + cuBLAS"] = ordered(by_row, reversed_)
    reference = a.double() @ b.double()
    for name, fn in cases.items():
        if name.startswith("copy"):  # each copy must write every element it is read for
            padded[:, :N].fill_(float("nan"))
        got = fn()
        got = out[:, :N] if name.startswith("cuBLAS") else got
        torch.cuda.synchronize()
        error = relative_error(got, reference)
        print(f"{name}: relative error {error:.2e}", flush=True)
        if not error < 1e-2:
            raise SystemExit(f"{name} is wrong")
    names = list(cases)
    samples = {name: [] for name in names}
    for index in range(6):
        for name in names if index % 2 == 0 else names[::-1]:
            samples[name].append(timer(cases[name], POLICY).median_ms)
    medians = {name: statistics.median(samples[name]) for name in names}
    print(f"{'variant':40s} {'ms':>8s} {'/ inductor':>10s} {'/ ours':>8s}  passes")
    for name in names:
        print(f"{name:40s} {medians[name]:8.4f} {medians[name] / medians['inductor']:10.3f} "
              f"{medians[name] / medians['ours']:8.3f}  {', '.join(f'{s:.4f}' for s in samples[name])}", flush=True)
    for name in names:
        print(f"== kernels of {name}")
        print_kernel_times(cases[name], timer)
    write_json("lm_head_copy_order.json", {"medians_ms": medians, "passes_ms": samples})


if __name__ == "__main__":
    main()
