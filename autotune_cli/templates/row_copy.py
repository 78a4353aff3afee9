"""Copying an operand into storage whose rows are padded, on the GPU, with one Triton kernel.

The alignment templates (aten::mm_aligned, triton::mm_padded) copy an operand whose row
pitch is off (B of lm_head: 768 rows of 50257 fp16) into zeroed storage with aligned rows.
torch's `copy_` into such a view takes its strided element-wise path: 0.100 ms for that
77 MB B on an H200 (bench/lm_head_probe.py), a third of the whole product, where Inductor's
generated pad kernel (a Triton pointwise kernel, as here) leaves the product at 0.304 ms in
all. Here each program copies one block of one row; loads and stores are masked at the
row's true length, so the padding is never written (it stays as zeroed at build).

Two other forms were tried on lm_head's B and lost to this one, as candidates of
aten::mm_aligned beside it (H200, bench/lm_head_probe.py): walking the source as one flat
array, for 16-byte loads (0.096 ms against 0.086), and walking the padded buffer as one flat
array, padding included, for 16-byte stores, as Inductor's generated pad kernel does (0.091
against 0.068; the tuner picked the row form on both misaligned suite shapes).

Destination rows a multiple of 16 elements apart (50272 rather than 50264), so that Triton
knows each row starts 16-byte aligned, made this copy slower, not faster: 0.185 ms against
0.070 (bench/lm_head_probe.py, H200): the buffers keep rows 16 bytes apart.

Into the templates' own padded buffers the copy writes whole padded rows, zeros past the
operand's columns, with the row pitch a compile-time constant (`fill_pitch`), and uses 32-bit
offsets where they fit, as Inductor's generated pad kernel does: that kernel took 0.043 ms
for lm_head's B where the row copy masked at the operand's width took 0.073 (torch.profiler,
bench/inductor_kernels.py, H200). Triton stores element by element where a store is masked
at 50257 columns; with the constant pitch 50264 and the mask at it, 16 bytes at a time (read
from the PTX for sm_90; a hint on a run-time pitch, tl.multiple_of, was not enough).

Imported only in `build` on CUDA: it imports triton.
"""

from __future__ import annotations

import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _copy_rows(src, dst, cols, blocks, src_row, src_col, dst_row, dst_col, BLOCK: tl.constexpr,
               WIDE: tl.constexpr):
    # Programs in row order (a row's blocks one after another), as a flat copy walks memory.
    row = tl.program_id(0) // blocks
    offs = (tl.program_id(0) % blocks) * BLOCK + tl.arange(0, BLOCK)
    if WIDE:  # an offset past 2**31 elements: 64-bit arithmetic
        row = row.to(tl.int64)
        offs = offs.to(tl.int64)
    mask = offs < cols
    values = tl.load(src + row * src_row + offs * src_col, mask=mask)
    tl.store(dst + row * dst_row + offs * dst_col, values, mask=mask)


@triton.jit
def _fill_rows(src, dst, cols, blocks, src_row, src_col, PITCH: tl.constexpr, BLOCK: tl.constexpr,
               WIDE: tl.constexpr):
    # Whole rows of dst, PITCH elements each, zeros past `cols`: with PITCH a constant, each
    # row's start is known to be 16-byte aligned where PITCH allows (lm_head's 50264 fp16:
    # 16-byte stores, where a store masked at `cols` is written element by element).
    row = tl.program_id(0) // blocks
    offs = (tl.program_id(0) % blocks) * BLOCK + tl.arange(0, BLOCK)
    if WIDE:
        row = row.to(tl.int64)
        offs = offs.to(tl.int64)
    values = tl.load(src + row * src_row + offs * src_col, mask=offs < cols, other=0)
    tl.store(dst + row * PITCH + offs, values, mask=offs < PITCH)


def copy_rows(dst, src, fill_pitch: bool = False) -> None:
    """dst[...] = src for 2-D tensors of one shape and dtype on one GPU (any strides): one
    program per row and block of columns, numbered in row order, rows being dst's contiguous
    dimension where it has one (a transposed view is walked along its columns).

    fill_pitch: dst is the leading [rows, cols] of zeroed storage whose rows are dst's row
    pitch long (the alignment templates' padded buffers); the copy then writes whole rows,
    the padding with zeros again, so that its stores can be 16 bytes wide (`_fill_rows`,
    compiled once per pitch). Otherwise only dst's own elements are written."""
    if dst.shape != src.shape or dst.dim() != 2:
        raise ValueError(f"copy_rows: shapes {tuple(dst.shape)} and {tuple(src.shape)} must be equal and 2-D")
    if dst.stride(1) != 1 and dst.stride(0) == 1:  # walk the contiguous dimension
        dst, src = dst.t(), src.t()
    rows, cols = dst.shape
    if rows == 0 or cols == 0:
        return
    pitch = dst.stride(0)
    span = max(cols, pitch) + BLOCK  # the furthest column a program's offsets reach
    wide = max(rows * abs(t.stride(0)) + span * abs(t.stride(1)) for t in (src, dst)) >= 2**31
    if fill_pitch and dst.stride(1) == 1 and pitch >= cols:
        blocks = triton.cdiv(pitch, BLOCK)
        _fill_rows[(rows * blocks,)](src, dst, cols, blocks, src.stride(0), src.stride(1),
                                     PITCH=pitch, BLOCK=BLOCK, WIDE=wide, num_warps=4)
        return
    blocks = triton.cdiv(cols, BLOCK)
    _copy_rows[(rows * blocks,)](src, dst, cols, blocks, src.stride(0), src.stride(1), pitch,
                                 dst.stride(1), BLOCK=BLOCK, WIDE=wide, num_warps=4)
