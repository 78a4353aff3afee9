"""lm_head's B (768 rows of 50257 fp16) into rows 50264 apart: the copy moves 77 MB in ~44 us
(1.75 TB/s), where the contiguous copy of odd's B runs at ~2.5 TB/s. Is it the block size and
warps (loads in flight per thread: every load is a single 2-byte element, the source rows
being misaligned), or the form? Each variant below is checked exact, then timed by
torch.profiler (the L2 flushed before each call, 20 calls) with cuBLAS's product after it, as
aten::mm_aligned runs them:

  rows BLOCK/warps   templates/row_copy._copy_rows's form: one program per row and block
  src flat BLOCK     the source walked as one flat run (16-byte loads, unmasked but the last
                     block), each element's destination row and column from the sizes as
                     compile-time constants (single-element stores)

PYTHONPATH=. python3 bench/lm_head_copy_blocks.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from bench.common import LM_HEAD, fresh_compile_caches, print_kernel_times  # noqa: E402


@triton.jit
def copy_src_flat(src, dst, total, COLS: tl.constexpr, PITCH: tl.constexpr, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offs = start + tl.arange(0, BLOCK)
    row = offs // COLS
    col = offs - row * COLS
    if start + BLOCK <= total:
        tl.store(dst + row * PITCH + col, tl.load(src + offs))
    else:
        inside = offs < total
        tl.store(dst + row * PITCH + col, tl.load(src + offs, mask=inside), mask=inside)


def main() -> None:
    fresh_compile_caches("lm-head-copy-blocks-")
    import torch

    from autotune_cli.bench.timing import CudaTimer
    from autotune_cli.fingerprint import probe_device
    from autotune_cli.templates import row_copy

    m, n, k = LM_HEAD
    pitch = -(-n // 8) * 8
    timer = CudaTimer(probe_device("cuda").l2_bytes)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    b_pad = torch.zeros(k, pitch, device="cuda", dtype=torch.float16)
    c_pad = torch.empty(m, pitch, device="cuda", dtype=torch.float16)
    variants = {}
    for block, warps in ((1024, 4), (1024, 8), (2048, 4), (2048, 8), (4096, 8), (4096, 16), (8192, 16), (512, 4)):
        blocks = triton.cdiv(n, block)
        variants[f"rows BLOCK {block} warps {warps}"] = (
            lambda block=block, warps=warps, blocks=blocks: row_copy._copy_rows[(k * blocks,)](
                b, b_pad, n, n, 1, pitch, 1, blocks, BLOCK=block, num_warps=warps))
    for block, warps in ((1024, 4), (2048, 4), (4096, 8)):
        variants[f"src flat BLOCK {block} warps {warps}"] = (
            lambda block=block, warps=warps: copy_src_flat[(triton.cdiv(k * n, block),)](
                b, b_pad, k * n, COLS=n, PITCH=pitch, BLOCK=block, num_warps=warps))
    for name, copy in variants.items():
        b_pad.zero_()
        copy()
        torch.cuda.synchronize()
        exact = bool(torch.equal(b_pad[:, :n], b)) and not bool(b_pad[:, n:].any())
        print(f"== {name}: exact {exact}", flush=True)
        if not exact:
            continue
        print_kernel_times(lambda copy=copy: (copy(), torch.mm(a, b_pad, out=c_pad)), timer)


if __name__ == "__main__":
    main()
