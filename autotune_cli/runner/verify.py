"""Inputs and verification: fresh random operands (never zeros), a reference in higher
precision, and a dtype-aware check. Imports torch; runs inside a worker.

A scaled_mm's operands are random floats quantized to float8 with fp32 scales (per tensor,
or per row of A and column of B); its reference is the float64 product of the dequantized
operands, so the quantization error belongs to the inputs and a kernel is held to the
output dtype's tolerance, like any other.

The output is made by `templates.base.empty_out` with the row pitch a template asks for:
a [M, N] view of padded rows where the pitch is larger than N. NaN fills and the check read
the [M, N] view, the values a kernel owes; its padding is never read."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..problem import FP8_MAX, SCALE_BLOCK, GemmProblem
from ..templates.base import Operands, empty_out, torch_dtype

# Relative Frobenius error allowed, and per-element slack in units of an entry's own scale
# plus its magnitude (Reference). bfloat16's: the largest entry error measured over every
# template's verified candidates stays under 0.26 of it (bench/README.md, "check margins").
NORM_TOLERANCE = {"float16": 2e-3, "bfloat16": 1.2e-2, "float32": 1e-4, "tf32": 3e-3}
ELEMENT_TOLERANCE = {"float16": 1e-2, "bfloat16": 3e-2, "float32": 1e-4, "tf32": 1.5e-2}

# float64 [M, N] arrays `check` works in beside the reference's own (tune/tuner.check_fits).
CHECK_WORKING_ARRAYS = 3

# Fast accumulation (a scaled_mm's use_fast_accum) sums in the FP8 matrix units alone, which
# keep about FAST_ACCUM_BITS bits of the running sum (DeepSeek-V3's report, section 3.3.2); a
# truncating sum loses half a unit of that last bit, 2^-FAST_ACCUM_BITS of itself, on average
# at each K step of FP8_MMA_K (one warp-group MMA): allowed on top of the output dtype's, and
# an output finer than float16 is held to float16's (a sum of ~14 bits cannot give more).
FAST_ACCUM_BITS = 14
FP8_MMA_K = 32
FAST_ACCUM_FINEST = "float16"


def tolerances(problem: GemmProblem) -> tuple[float, float]:
    """(relative Frobenius error, per-element slack) allowed for `problem`'s output."""
    norm, element = NORM_TOLERANCE[problem.precision], ELEMENT_TOLERANCE[problem.precision]
    if problem.fast_accum:
        lost = problem.k / FP8_MMA_K * 2.0 ** -FAST_ACCUM_BITS
        norm = max(norm, NORM_TOLERANCE[FAST_ACCUM_FINEST]) + lost
        element = max(element, ELEMENT_TOLERANCE[FAST_ACCUM_FINEST]) + lost
    return norm, element


def _operand(shape: tuple[int, ...], transposed: bool, dtype, device: str, generator):
    """A random tensor of `shape`; stored column-major when `transposed`."""
    import torch

    if transposed:
        stored = shape[:-2] + (shape[-1], shape[-2])
        tensor = torch.randn(stored, generator=generator, dtype=torch.float32, device=device)
        return tensor.to(dtype).transpose(-1, -2)
    return torch.randn(shape, generator=generator, dtype=torch.float32, device=device).to(dtype)


def make_operands(problem: GemmProblem, seed: int, device: str, pitch: int | None = None) -> Operands:
    """Random A, B (and bias) for `problem`, and an uninitialised output whose rows are
    `pitch` elements apart (None: contiguous)."""
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    if problem.op == "scaled_mm":
        return _scaled_operands(problem, generator, device, pitch)
    dtype = torch_dtype(problem.dtype)
    a = _operand(problem.a_shape(), problem.a_transposed, dtype, device, generator)
    b = _operand(problem.b_shape(), problem.b_transposed, dtype, device, generator)
    bias = None
    if problem.op == "addmm":  # as large as a typical product entry (sqrt(K)), so that a bias left out shows
        bias = (torch.randn(problem.bias_shape(), generator=generator, device=device)
                * math.sqrt(problem.k)).to(dtype)
    return Operands(a=a, b=b, out=empty_out(problem, pitch, dtype, device), bias=bias)


def _quantize(values, rows_scaled: bool, fp8, fp8_max: float):
    """(values / scale in float8, fp32 scale): one scale for the tensor, or one per row
    ([rows, 1]) when `rows_scaled`; each maps the largest magnitude onto float8's largest."""
    import torch

    amax = values.abs().amax(dim=-1, keepdim=True) if rows_scaled else values.abs().amax()
    scale = (amax.to(torch.float32) / fp8_max).clamp_min(1e-12)
    return (values / scale).clamp(-fp8_max, fp8_max).to(fp8), scale


def _quantize_blocks(values, block_rows: int, fp8, fp8_max: float):
    """(values / scale in float8, fp32 scales [rows / block_rows, cols / 128]): one scale per
    block of block_rows x 128 (rows and columns multiples of the block), mapping the block's
    largest magnitude onto float8's largest."""
    import torch

    rows, cols = values.shape
    blocks = values.reshape(rows // block_rows, block_rows, cols // SCALE_BLOCK, SCALE_BLOCK)
    scale = (blocks.abs().amax(dim=(1, 3)).to(torch.float32) / fp8_max).clamp_min(1e-12)
    quantized = (blocks / scale[:, None, :, None]).clamp(-fp8_max, fp8_max).reshape(rows, cols).to(fp8)
    return quantized, scale


def block_scale_storage(problem: GemmProblem, device: str, scale_a=None, scale_b=None):
    """(scale_a [m, k/128], scale_b [k/128, n/128]) stored column-major, the layout cuBLASLt's
    blockwise scaling takes through torch._scaled_mm (a contiguous one is refused): given
    values ([m, k/128] and B's as computed, [n/128, k/128]) copied in, else empty."""
    import torch

    (m, k_blocks), (_, n_blocks) = problem.scale_shapes()
    a_store = torch.empty((k_blocks, m), dtype=torch.float32, device=device)
    b_store = torch.empty((n_blocks, k_blocks), dtype=torch.float32, device=device)
    if scale_a is not None:
        a_store.copy_(scale_a.t())
        b_store.copy_(scale_b)
    return a_store.t(), b_store.t()


def _scaled_operands(problem: GemmProblem, generator, device: str, pitch: int | None) -> Operands:
    """float8 A [m, k] (row-major) and B [k, n] (column-major: stored [n, k]), quantized from
    random floats whose rows (A) and columns (B) differ in magnitude by up to 2^8, so that a
    kernel applying a row's or column's scale to the wrong one is far off; fp32 scales (per
    tensor, row, or block: A's 1x128 and B's 128x128 blocks, whose magnitudes differ too).
    The product's entries stay within float16's range at any K."""
    import torch

    fp8, fp8_max = torch_dtype(problem.dtype), FP8_MAX[problem.dtype]
    out_dtype = torch_dtype(problem.result_dtype)
    rowwise = problem.scale == "row"

    def floats(rows: int, cols: int):  # K^-1/4 each: a dot of two middle rows ~1, so that the
        # largest entries (2^8 from the row spreads, 2^3 more from blockwise B's) fit float16
        values = torch.randn((rows, cols), generator=generator, device=device) * problem.k ** -0.25
        spread = torch.rand((rows, 1), generator=generator, device=device) * 8 - 4
        return values * torch.exp2(spread)

    if problem.scale == "block":
        a, block_a = _quantize_blocks(floats(problem.m, problem.k), 1, fp8, fp8_max)
        # B's columns (rows as stored) vary by block of K too, so that a kernel that reads a
        # block's scale for the wrong K step is far off
        b_values = floats(problem.n, problem.k) * torch.exp2(
            torch.rand((1, problem.k // SCALE_BLOCK), generator=generator, device=device) * 6 - 3
        ).repeat_interleave(SCALE_BLOCK, dim=1)
        b_stored, block_b = _quantize_blocks(b_values, SCALE_BLOCK, fp8, fp8_max)
        scale_a, scale_b = block_scale_storage(problem, device, block_a, block_b)
    else:
        a, scale_a = _quantize(floats(problem.m, problem.k), rowwise, fp8, fp8_max)  # [m, 1] per row
        b_stored, scale_b = _quantize(floats(problem.n, problem.k), rowwise, fp8, fp8_max)  # [n, 1]
        scale_b = scale_b.reshape(1, -1) if rowwise else scale_b
    ops = Operands(a=a, b=b_stored.t(), out=empty_out(problem, pitch, out_dtype, device), bias=None,
                   scale_a=scale_a, scale_b=scale_b)
    if problem.bias:  # as large as a typical output entry, so that a bias left out shows
        a_real, b_real = dequantized(problem, ops)
        typical = (problem.k * a_real.square().mean() * b_real.square().mean()).sqrt()
        bias = (torch.randn((problem.n,), generator=generator, device=device) * typical).to(out_dtype)
        ops = Operands(a=ops.a, b=ops.b, out=ops.out, bias=bias, scale_a=scale_a, scale_b=scale_b)
    return ops


def dequantized(problem: GemmProblem, ops: Operands):
    """A [m, k] and B [k, n] of a scaled_mm in float64, each times its scales."""
    a, b = ops.a.double(), ops.b.double()
    scale_a, scale_b = ops.scale_a.double(), ops.scale_b.double()
    if problem.scale == "block":  # each scale over its block
        scale_a = scale_a.repeat_interleave(SCALE_BLOCK, dim=1)[:, :problem.k]
        scale_b = scale_b.repeat_interleave(SCALE_BLOCK, dim=0).repeat_interleave(SCALE_BLOCK, dim=1)
        scale_b = scale_b[:problem.k, :problem.n]
    return a * scale_a, b * scale_b


def empty_operands(problem: GemmProblem, device: str, pitch: int | None = None) -> Operands:
    """Operands of the right shapes, strides and dtype (the output's rows `pitch` apart), with
    no kernel run to fill them: enough to compile a kernel for them."""
    import torch

    if problem.op == "scaled_mm":
        fp8, out_dtype = torch_dtype(problem.dtype), torch_dtype(problem.result_dtype)
        shape_a, shape_b = problem.scale_shapes()
        bias = torch.empty((problem.n,), dtype=out_dtype, device=device) if problem.bias else None
        if problem.scale == "block":  # the layout make_operands gives them
            scale_a, scale_b = block_scale_storage(problem, device)
        else:
            scale_a = torch.empty(shape_a, dtype=torch.float32, device=device)
            scale_b = torch.empty(shape_b, dtype=torch.float32, device=device)
        return Operands(a=torch.empty((problem.m, problem.k), dtype=fp8, device=device),
                        b=torch.empty((problem.n, problem.k), dtype=fp8, device=device).t(),
                        out=empty_out(problem, pitch, out_dtype, device), bias=bias,
                        scale_a=scale_a, scale_b=scale_b)
    dtype = torch_dtype(problem.dtype)

    def operand(shape, transposed):
        if transposed:
            stored = shape[:-2] + (shape[-1], shape[-2])
            return torch.empty(stored, dtype=dtype, device=device).transpose(-1, -2)
        return torch.empty(shape, dtype=dtype, device=device)

    bias = torch.empty(problem.bias_shape(), dtype=dtype, device=device) if problem.op == "addmm" else None
    return Operands(a=operand(problem.a_shape(), problem.a_transposed),
                    b=operand(problem.b_shape(), problem.b_transposed),
                    out=empty_out(problem, pitch, dtype, device), bias=bias)


@dataclass(frozen=True)
class Reference:
    """What an output is checked against: `exact`, the product in float64, and each entry's
    own scale, `row_scale * col_scale` (+ |bias|): |A's row| |B's column| / sqrt(K), the size
    of the sums a kernel accumulates for that entry. A kernel's rounding error grows with it,
    not with the output's average: with row and column magnitudes apart by 2^8 (the float8
    operands) an entry of large rows whose sum cancels to near zero carries the error of its
    large partial sums (fast accumulation: bench/README.md, "FP8"), and an entry of small rows
    is held to its own size."""
    exact: Any  # float64 [.., M, N]
    row_scale: Any  # float64 [.., M, 1]: |A's row| / sqrt(K)
    col_scale: Any  # float64 [.., 1, N]: |B's column|
    # |bias| in the bias's dtype, broadcast to exact's shape: a copy, so that a kernel writing
    # into the bias it is handed changes nothing here
    bias_magnitude: Any = None

    def entry_scale(self):
        """[.., M, N] float64: row_scale * col_scale (+ |bias|)."""
        scale = self.row_scale * self.col_scale
        return scale if self.bias_magnitude is None else scale.add_(self.bias_magnitude)


def reference_of(a, b, bias=None) -> Reference:
    """The Reference of A @ B (+ bias): A [.., M, K] and B [.., K, N] in float64, the bias in
    any dtype (added in float64; its magnitude kept in its dtype)."""
    import torch

    exact = torch.matmul(a, b)
    if bias is not None:
        exact += bias.double()
    k = max(a.shape[-1], 1)
    return Reference(exact=exact, row_scale=torch.linalg.vector_norm(a, dim=-1, keepdim=True) / math.sqrt(k),
                     col_scale=torch.linalg.vector_norm(b, dim=-2, keepdim=True),
                     bias_magnitude=None if bias is None else bias.abs())


def reference(problem: GemmProblem, ops: Operands) -> Reference:
    """The exact product in float64 (on the operands' device); for scaled_mm, of the
    dequantized operands (each times its scales)."""
    if problem.op == "scaled_mm":
        a, b = dequantized(problem, ops)
    else:
        a, b = ops.a.double(), ops.b.double()
    return reference_of(a, b, ops.bias)


def poison(ops: Operands) -> None:
    """Fill the output with NaN so that an element the kernel never writes is caught (the
    [M, N] view: a padded row's padding is the kernel's to use, never checked)."""
    poison_tensor(ops.out)


def poison_tensor(out) -> None:
    """`poison` for an output tensor held apart from its Operands (a kernel may rebind the
    field: the tensor the caller owns is the one reset and checked)."""
    out.fill_(float("nan"))


@dataclass(frozen=True)
class Check:
    ok: bool
    rel_error: float
    reason: str = ""
    # the largest element error over what it is allowed (passing: at most 1; infinite where
    # an output is not finite)
    worst_of_allowed: float | None = None


def check(problem: GemmProblem, out, ref: Reference) -> Check:
    """The output against the float64 reference: every entry written and finite, the
    relative Frobenius error and each entry's error within `tolerances`, an entry's slack in
    units of its own scale plus its magnitude (`Reference` says why). Its scale is capped at
    the output's typical entry unless the sum is fast-accumulated: a sum in fp32 errs far
    below the slack at any scale, and the cap keeps the large rows' entries held as closely
    as the rest; fast accumulation's error grows with the entry's own partial sums.
    Works in CHECK_WORKING_ARRAYS [M, N] float64 arrays beside the reference."""
    import torch

    norm_tolerance, element_tolerance = tolerances(problem)
    finite = torch.isfinite(out)
    if not bool(finite.all()):
        bad = int((~finite).sum())
        return Check(False, math.inf, f"{bad} of {out.numel()} outputs are NaN/inf or never written", math.inf)
    del finite
    exact = ref.exact
    diff = out.to(torch.float64, copy=True).sub_(exact).abs_()  # the kernel's output is left alone
    ref_norm = float(torch.linalg.vector_norm(exact))
    rel = float(torch.linalg.vector_norm(diff)) / max(ref_norm, 1e-30)
    scale = ref.entry_scale()
    if not problem.fast_accum:
        scale.clamp_(max=ref_norm / math.sqrt(max(exact.numel(), 1)))
    ratio = diff.div_(scale.add_(exact.abs()).mul_(element_tolerance).clamp_min_(1e-300))
    worst = int(ratio.argmax())
    worst_ratio = float(ratio.flatten()[worst])
    if rel > norm_tolerance:  # the entries' margin is reported all the same
        return Check(False, rel, f"relative error {rel:.2e} > {norm_tolerance:.2g}", worst_ratio)
    if not worst_ratio <= 1:  # NaN too (a bias that is not finite)
        over = int((~(ratio <= 1)).sum())
        where = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), exact.shape))
        off = abs(float(out[where]) - float(exact[where]))
        return Check(False, rel, f"{over} element(s) off, worst by {off:.3g} where {off / worst_ratio:.3g} "
                                 f"is allowed (at {list(where)})", worst_ratio)
    return Check(True, rel, worst_of_allowed=worst_ratio)
