from dataclasses import replace

import pytest
import torch

from autotune_cli.runner.verify import ELEMENT_TOLERANCE, check, dequantized, make_operands, poison, reference
from autotune_cli.problem import make_problem


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_aten_output_passes_and_spoiled_output_fails(dtype):
    problem = make_problem(m=64, n=48, k=256, dtype=dtype, device="cpu")
    ops = make_operands(problem, seed=3, device="cpu")
    ref = reference(problem, ops)
    torch.mm(ops.a, ops.b, out=ops.out)
    assert check(problem, ops.out, ref).ok
    ops.out[10, 7] += ref.exact.abs().mean().item()  # one element off by a typical magnitude
    verdict = check(problem, ops.out, ref)
    assert not verdict.ok


def test_unwritten_output_is_caught():
    problem = make_problem(m=32, n=32, k=32, device="cpu", dtype="float32")
    ops = make_operands(problem, seed=0, device="cpu")
    ref = reference(problem, ops)
    poison(ops)
    torch.mm(ops.a[:31], ops.b, out=ops.out[:31])  # the last row never written
    verdict = check(problem, ops.out, ref)
    assert not verdict.ok and "never written" in verdict.reason


def test_inputs_are_random_and_laid_out_as_asked():
    problem = make_problem(m=16, n=24, k=8, layout="tt", device="cpu", bias="mn")
    ops = make_operands(problem, seed=5, device="cpu")
    assert ops.a.shape == (16, 8) and ops.a.stride() == (1, 16)
    assert ops.b.shape == (8, 24) and ops.b.stride() == (1, 8)
    assert ops.bias.shape == (16, 24)
    assert bool((ops.a != 0).all()) and ops.a.float().std() > 0.5
    other = make_operands(problem, seed=6, device="cpu")
    assert not torch.equal(ops.a, other.a)


def _float8(k: int, fast_accum: bool = False, m: int = 64, n: int = 64):
    """A rowwise float8 problem and its operands (rows of A and columns of B apart in
    magnitude by up to 2^8), as the tuner makes them."""
    problem = make_problem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale="row", out_dtype="bfloat16",
                           fast_accum=fast_accum, device="cpu")
    ops = make_operands(problem, seed=2, device="cpu")
    return problem, ops, reference(problem, ops)


def test_an_entry_of_small_rows_is_held_to_its_own_scale():
    """15% of its own scale on one entry of the smallest rows fails, though it is far below the
    output's typical entry (against which every entry was once measured)."""
    problem, ops, ref = _float8(k=256)
    scale = ref.entry_scale()
    row, col = int(ref.row_scale.argmin()), int(ref.col_scale.argmin())
    typical = float(ref.exact.square().mean().sqrt())
    spoiled = ref.exact.clone()
    spoiled[row, col] += 0.15 * float(scale[row, col]) + 0.15 * abs(float(ref.exact[row, col]))
    assert 0.15 * float(scale[row, col]) < 0.01 * typical
    verdict = check(problem, spoiled, ref)
    assert not verdict.ok and "1 element(s) off" in verdict.reason and f"[{row}, {col}]" in verdict.reason
    assert verdict.worst_of_allowed == pytest.approx(0.15 / ELEMENT_TOLERANCE["bfloat16"])


def test_an_entry_of_large_rows_is_allowed_its_own_scale_under_fast_accumulation_alone():
    """An error of 1% of each entry's own scale (the form a reduced-precision sum's takes)
    passes where the sum is fast-accumulated; summed in fp32 the large rows' entries stay held
    to the output's typical entry, and their 1% of a scale up to ~10x larger fails."""
    problem, ops, ref = _float8(k=256)
    scale = ref.entry_scale()
    assert float(scale.max()) > 5 * float(ref.exact.square().mean().sqrt())
    signs = torch.where(torch.rand(scale.shape, generator=torch.Generator().manual_seed(0)) < 0.5, -1.0, 1.0)
    rounded = ref.exact + 0.01 * scale * signs
    assert check(replace(problem, fast_accum=True), rounded, ref).ok
    assert not check(problem, rounded, ref).ok


def _truncated_sum(ops, bits: int = 14, step: int = 32):
    """A @ B of the float8 operands as a reduced-precision accumulator sums it: each step of
    `step` along K added to a running sum cut to `bits` significant bits (toward zero)."""

    def cut(x):
        mantissa, exponent = torch.frexp(x)
        return torch.ldexp(torch.trunc(mantissa * 2.0 ** bits) / 2.0 ** bits, exponent)

    a, b = ops.a.double(), ops.b.double()
    total = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float64)
    for start in range(0, a.shape[1], step):
        total = cut(total + cut(a[:, start:start + step] @ b[start:start + step]))
    return total * ops.scale_a.double() * ops.scale_b.double()


def test_fast_accumulation_is_allowed_its_truncated_sum_and_no_more():
    """At K = 24576 a 14-bit truncating accumulator's output (the FP8 matrix units' own, which
    use_fast_accum asks for) passes the fast-accumulation problem and fails the same problem
    summed in fp32; a K block of 256 left out of an exact sum still fails."""
    fast, ops, ref = _float8(k=24576, fast_accum=True)
    exact_sum = replace(fast, fast_accum=False)
    truncated = _truncated_sum(ops).to(torch.bfloat16)
    verdict = check(fast, truncated, ref)
    assert verdict.ok and verdict.worst_of_allowed < 1, verdict.reason
    assert not check(exact_sum, truncated, ref).ok
    a, b = dequantized(fast, ops)
    skipped = ref.exact - a[:, 4096:4352] @ b[4096:4352]
    assert not check(fast, skipped.to(torch.bfloat16), ref).ok


@pytest.mark.parametrize("bias", ["n", "mn"])
def test_a_bias_left_out_of_a_long_sum_is_caught(bias):
    """The bias is drawn as large as a typical product entry (sqrt(K)): left out at K = 8192
    the output is far off (drawn ~N(0, 1) it was within bfloat16's tolerance there)."""
    problem = make_problem(m=32, n=48, k=8192, dtype="bfloat16", bias=bias, device="cpu")
    ops = make_operands(problem, seed=1, device="cpu")
    ref = reference(problem, ops)
    torch.addmm(ops.bias, ops.a, ops.b, out=ops.out)
    assert check(problem, ops.out, ref).ok
    without = torch.mm(ops.a, ops.b)
    verdict = check(problem, without, ref)
    assert not verdict.ok and verdict.rel_error > 0.3


def test_a_bias_written_after_the_reference_changes_nothing_of_it():
    """The reference keeps its own copy of |bias|: a kernel writing NaN into the bias it is
    handed cannot turn the per-entry check off for a later output."""
    problem = make_problem(m=256, n=256, k=256, dtype="bfloat16", bias="n", device="cpu")
    ops = make_operands(problem, seed=3, device="cpu")
    ref = reference(problem, ops)
    torch.addmm(ops.bias, ops.a, ops.b, out=ops.out)
    assert check(problem, ops.out, ref).ok
    ops.out[5, 4] += float(ref.exact.abs().mean())  # one entry off, in the column whose bias goes bad
    ops.bias[4] = float("nan")
    verdict = check(problem, ops.out, ref)
    assert not verdict.ok and "1 element(s) off" in verdict.reason
