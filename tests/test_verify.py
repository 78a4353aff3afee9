import pytest
import torch

from autotune_cli.runner.verify import check, make_operands, poison, reference
from autotune_cli.problem import make_problem


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_aten_output_passes_and_spoiled_output_fails(dtype):
    problem = make_problem(m=64, n=48, k=256, dtype=dtype, device="cpu")
    ops = make_operands(problem, seed=3, device="cpu")
    ref = reference(problem, ops)
    torch.mm(ops.a, ops.b, out=ops.out)
    assert check(problem, ops.out, ref).ok
    ops.out[10, 7] += ref.abs().mean().item()  # one element off by a typical magnitude
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
