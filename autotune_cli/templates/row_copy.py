"""Copying an operand into storage whose rows are padded, on the GPU, with one Triton kernel.

The alignment templates (aten::mm_aligned, triton::mm_padded) copy an operand whose row
pitch is off (B of lm_head: 768 rows of 50257 fp16) into zeroed storage with aligned rows.
torch's `copy_` into such a view takes its strided element-wise path, about twice as slow; a
Triton copy matches Inductor's generated pad kernel, and both products then run the same
cuBLAS kernel. Three forms:

  by row    `_copy_rows`: each program one block of one row, loads and stores masked at the
            row's true length, so the padding is not written; programs numbered in row
            order (faster than column block by column block; block size and warps matter
            little).
  flat      `_copy_flat`, where the caller owns the padding (`owns_padding`): the padded
            destination walked as one flat run, padding written as zeros (as Inductor's
            pad kernel writes it), its row length and pitch compile-time constants. Rows
            narrower than a block (odd's 777) leave no lanes idle; as runtime values the
            sizes made it slower than by row.
  run       `_copy_run`, where source and destination rows are both exactly `cols` apart:
            one contiguous run each, offsets from 16-byte aligned bases, so loads and stores
            are vectorized. (A pitch such as 3000 is not known to Triton to be a multiple of
            8, so by row no load or store is.)

Measured and not kept: walking the source flat for 16-byte loads (its rows are misaligned),
and destination rows padded to 16 elements for this copy's sake (slower; the width is
aten::mm_aligned's PAD_BYTES, chosen for cuBLAS). The lm_head and odd rows of
bench/gpu_llm_suite.py time the whole products.

Imported only in `build` on CUDA: it imports triton.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .kernel import Copier
from .launch import Launcher

BLOCK = 1024
FLAT_BLOCK = 1024
RUN_BLOCK = 2048


@triton.jit
def _copy_rows(src, dst, cols, src_row, src_col, dst_row, dst_col, BLOCKS, BLOCK: tl.constexpr):
    # Programs in row order (the blocks of one row, then the next row): faster than column
    # block by column block, and the cuBLAS kernel after it runs no slower.
    pid = tl.program_id(0)
    row = (pid // BLOCKS).to(tl.int64)
    offs = ((pid % BLOCKS) * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)  # x strides: past 2**31
    mask = offs < cols
    values = tl.load(src + row * src_row + offs * src_col, mask=mask)
    tl.store(dst + row * dst_row + offs * dst_col, values, mask=mask)


@triton.jit
def _copy_flat(src, dst, total, src_row, src_col, COLS: tl.constexpr, PITCH: tl.constexpr,
               BLOCK: tl.constexpr):
    # The destination walked as one flat run of whole padded rows (PITCH apart, the padding
    # written as zeros), 16-byte stores and no lane idle; the sizes are compile-time
    # constants, so the row and column of each element cost a multiply and a shift.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    row = offs // PITCH
    col = offs % PITCH
    inside = offs < total
    values = tl.load(src + row * src_row + col * src_col, mask=inside & (col < COLS), other=0.0)
    tl.store(dst + offs, values, mask=inside)


@triton.jit
def _copy_run(src, dst, total, BLOCK: tl.constexpr):
    # Source and destination are each one contiguous run of `total` elements. Every block but
    # the last is copied without a mask: a mask against a `total` that Triton does not know
    # to be a multiple of 16 may change inside any vector, and would keep every load and
    # store to single elements.
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offs = start + tl.arange(0, BLOCK)
    if start + BLOCK <= total:
        tl.store(dst + offs, tl.load(src + offs))
    else:
        inside = offs < total
        tl.store(dst + offs, tl.load(src + offs, mask=inside), mask=inside)


_LAUNCH_RUN = Launcher(_copy_run, 4, 3)
_LAUNCH_FLAT = Launcher(_copy_flat, 4, 3)
_LAUNCH_ROWS = Launcher(_copy_rows, 4, 3)


class RowCopier(Copier):
    """`copy(src)`: dst[...] = src for 2-D tensors of one shape and dtype on one GPU (any
    strides), the kernel, grid and arguments worked out once per source shape, strides and
    dtype (the alignment templates copy operands of one problem into the same buffers on
    every call). One program per row and block of columns, in row order, rows being dst's
    contiguous dimension where it has one (a transposed view is walked along its columns).
    `owns_padding`: dst is the leading [rows, cols] of a buffer whose rows are padded, the
    padding its own (the alignment templates' buffers): then rows going into a wider pitch
    are copied flat over whole padded rows, the padding written with zeros. The flat kernel
    takes its sizes as compile-time constants: one compile per (cols, pitch, dtype), in the
    process that first copies such an operand (the timing worker, not the compile pool).
    Where both are rows of exactly `cols` elements, one after another, they are copied as one
    contiguous run (`_copy_run`), whatever the padding's owner: only dst's elements are
    written. `copy.fixed(src)` is the copy for sources laid out as `src` alone (a plan whose
    operands' shapes and strides are fixed): no key to build, the launch bound
    (`Launcher.bind`)."""

    def __init__(self, dst, owns_padding: bool = False) -> None:
        self.dst, self.owns_padding = dst, owns_padding
        self.plans: dict = {}

    def __call__(self, src) -> None:
        key = (src.shape, src.stride(), src.dtype)
        go = self.plans.get(key)
        if go is None:
            go = self.plans[key] = fixed_copy(self.dst, src, self.owns_padding)
        go(src)

    def fixed(self, src):
        return fixed_copy(self.dst, src, self.owns_padding)


copier = RowCopier  # copier(dst, owns_padding=False): a RowCopier


def fixed_copy(dst, src, owns_padding: bool = False):
    """`copy(s)`: the copy `copier(dst, owns_padding)` makes, for sources of `src`'s shape,
    strides and dtype (checked here, once), its launch bound."""
    plan = _plan(dst, src, owns_padding)
    if plan is None:
        return lambda s: None
    launch, grid, dst_arg, rest = plan
    go = launch.bind(grid, rest, trusted=(1,) if dst_arg.data_ptr() % 16 == 0 else ())  # dst does not move
    return lambda s: go(s, dst_arg)  # src's pointer; its strides are in `rest`


def _plan(dst, src, owns_padding: bool):
    """(launcher, grid, dst argument, the arguments after src and dst) of the copy, or None
    when there is nothing to copy. src goes in as given: only its pointer is read, its
    strides (those of the walk) are among the rest."""
    if dst.shape != src.shape or dst.dim() != 2:
        raise ValueError(f"row copy: shapes {tuple(dst.shape)} and {tuple(src.shape)} must be equal and 2-D")
    if src.dtype != dst.dtype:
        raise ValueError(f"row copy: dtypes {src.dtype} and {dst.dtype} must be equal")
    if dst.stride(1) != 1 and dst.stride(0) == 1:  # walk the contiguous dimension
        dst, src = dst.t(), src.t()
    rows, cols = dst.shape
    if rows == 0 or cols == 0:
        return None
    if dst.stride() == (cols, 1) and src.stride() == (cols, 1):  # one contiguous run each
        return _LAUNCH_RUN, (triton.cdiv(rows * cols, RUN_BLOCK),), dst, (rows * cols, RUN_BLOCK)
    pitch = dst.stride(0)
    total = rows * pitch
    if (owns_padding and dst.stride(1) == 1 and pitch > cols
            and dst.storage_offset() % pitch == 0 and total < 2**31
            and (rows - 1) * abs(src.stride(0)) + (cols - 1) * abs(src.stride(1)) < 2**31
            and dst.storage_offset() + total <= dst.untyped_storage().nbytes() // dst.element_size()):
        return (_LAUNCH_FLAT, (triton.cdiv(total, FLAT_BLOCK),), dst,
                (total, src.stride(0), src.stride(1), cols, pitch, FLAT_BLOCK))  # COLS, PITCH, BLOCK
    blocks = triton.cdiv(cols, BLOCK)
    return (_LAUNCH_ROWS, (rows * blocks,), dst,
            (cols, src.stride(0), src.stride(1), dst.stride(0), dst.stride(1), blocks, BLOCK))
