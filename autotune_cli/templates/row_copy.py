"""Copying an operand into storage whose rows are padded, on the GPU, with one Triton kernel.

The alignment templates (aten::mm_aligned, triton::mm_padded) copy an operand whose row
pitch is off (B of lm_head: 768 rows of 50257 fp16) into zeroed storage with aligned rows.
torch's `copy_` into such a view takes its strided element-wise path: 0.100 ms for that
77 MB B on an H200 (bench/lm_head_probe.py), a third of the whole product, where Inductor's
generated pad kernel (a Triton pointwise kernel, as here) leaves the product at 0.304 ms in
all. Here each program copies one block of one row; loads and stores are masked at the
row's true length, so the padding is never written (it stays as zeroed at build).

A second form, `copy_flat`, walks the destination's storage as one flat array, padding
included, as Inductor's generated pad kernel does: each program stores BLOCK consecutive
elements from an aligned offset (so the stores can be 16 bytes wide; a row's padding gets
zeros) and gathers them from the source, masked past each row's true length. Which of the
two is faster is for the tuner to find: aten::mm_aligned's COPY_FLAT param picks one. (A
form that walked the source flat instead, for 16-byte loads, measured 0.096 ms against the
row form's 0.086 on lm_head's B and was dropped.)

Destination rows a multiple of 16 elements apart (50272 rather than 50264), so that Triton
knows each row starts 16-byte aligned, made this copy slower, not faster: 0.185 ms against
0.070 (bench/lm_head_probe.py, H200): the buffers keep rows 16 bytes apart.

Imported only in `build` on CUDA: it imports triton.
"""

from __future__ import annotations

import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _copy_rows(src, dst, cols, src_row, src_col, dst_row, dst_col, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = (tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)  # x strides: past 2**31
    mask = offs < cols
    values = tl.load(src + row * src_row + offs * src_col, mask=mask)
    tl.store(dst + row * dst_row + offs * dst_col, values, mask=mask)


def copy_rows(dst, src) -> None:
    """dst[...] = src for 2-D tensors of one shape and dtype on one GPU (any strides): one
    program per row and block of columns, rows being dst's contiguous dimension where it has
    one (a transposed view is walked along its columns)."""
    if dst.shape != src.shape or dst.dim() != 2:
        raise ValueError(f"copy_rows: shapes {tuple(dst.shape)} and {tuple(src.shape)} must be equal and 2-D")
    if dst.stride(1) != 1 and dst.stride(0) == 1:  # walk the contiguous dimension
        dst, src = dst.t(), src.t()
    rows, cols = dst.shape
    if rows == 0 or cols == 0:
        return
    grid = (rows, triton.cdiv(cols, BLOCK))
    _copy_rows[grid](src, dst, cols, src.stride(0), src.stride(1), dst.stride(0), dst.stride(1),
                     BLOCK=BLOCK, num_warps=4)


@triton.jit
def _copy_flat(src, dst, total, cols, pitch, src_row, src_col, WIDE: tl.constexpr, BLOCK: tl.constexpr):
    if WIDE:  # offsets past 2**31
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    else:
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    row = offs // pitch
    col = offs - row * pitch
    values = tl.load(src + row * src_row + col * src_col, mask=mask & (col < cols), other=0.0)
    tl.store(dst + offs, values, mask=mask)


def copy_flat(dst, src) -> None:
    """dst[...] = src, as `copy_rows`, where `dst` is the first columns of row-major storage
    whose rows are `dst.stride(0)` apart: the storage's rows are written whole, their padding
    with zeros. Any other destination (column-major, or storage that ends before the last
    row's padding) goes to `copy_rows`."""
    if dst.shape != src.shape or dst.dim() != 2:
        raise ValueError(f"copy_flat: shapes {tuple(dst.shape)} and {tuple(src.shape)} must be equal and 2-D")
    rows, cols = dst.shape
    pitch = dst.stride(0)
    room = dst.untyped_storage().nbytes() // dst.element_size() - dst.storage_offset()
    if dst.stride(1) != 1 or pitch < cols or room < rows * pitch:
        copy_rows(dst, src)
        return
    total = rows * pitch
    if total == 0:
        return
    reach = max(total, (rows - 1) * abs(src.stride(0)) + (cols - 1) * abs(src.stride(1)) + 1)
    _copy_flat[(triton.cdiv(total, BLOCK),)](src, dst, total, cols, pitch, src.stride(0), src.stride(1),
                                             WIDE=reach >= 2**31, BLOCK=BLOCK, num_warps=4)
