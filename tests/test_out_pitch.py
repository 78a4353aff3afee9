"""Outputs with padded rows (`Template.out_pitch`): made by one function, kept by the worker
per pitch, kept by the timing copies, given to the compile pool, and checked on their
[M, N] values, so a kernel that ignores its pitch is still caught. Plus a whole tune of a
problem whose N is misaligned, through the tuner, executor and compile pool."""

import json

import pytest
import torch

from autotune_cli.runner.timing import clone_operands
from autotune_cli.runner.verify import empty_operands, make_operands
from autotune_cli.runner.candidate import CandidateRunner
from autotune_cli.runner.messages import MEASURE, WorkerTask
from autotune_cli.problem import make_problem
from autotune_cli.settings import TimingPolicy, TuneSettings
from autotune_cli.templates import Template, get_template, register_template
from autotune_cli.templates.base import empty_out, empty_out_like
from autotune_cli.tune.tuner import Tuner

FAST = TimingPolicy(warmup=0, min_runs=2, max_runs=2, budget_ms=0.0)
ODD = make_problem(m=32, n=45, k=40, dtype="float32", device="cpu")  # rows of 180 bytes
PITCH = 56


class Pitched(Template):
    """A torch kernel that asks for rows of PITCH elements; `ignores_pitch` writes the
    product as if the output were contiguous (a kernel that assumed stride N)."""

    ops = ("mm",)
    backend = "test"

    def __init__(self, uid: str, ignores_pitch: bool = False) -> None:
        self.uid = uid
        self.ignores_pitch = ignores_pitch
        self.seen: list[tuple[int, ...]] = []  # the output strides each call was given

    def source_text(self) -> str:
        return self.uid

    def out_pitch(self, problem, params):
        return PITCH

    def build(self, problem, params, kernel_dir):
        def run(ops):
            self.seen.append(ops.out.stride())
            product = torch.mm(ops.a, ops.b)
            if self.ignores_pitch:
                ops.out.as_strided(ops.out.shape, (problem.n, 1)).copy_(product)
            else:
                ops.out.copy_(product)

        return run


@pytest.fixture
def runner():
    threads = torch.get_num_threads()
    yield CandidateRunner("cpu", 0)  # sets torch's threads to 1: given back below
    torch.set_num_threads(threads)


def measure(runner, tmp_path, uid, problem=ODD):
    task = WorkerTask(MEASURE, uid, problem, {}, 0, str(tmp_path), FAST)
    payload, fatal = runner.run(task)
    assert not fatal
    return payload


def test_empty_out_pads_the_rows_of_a_view():
    out = empty_out(ODD, PITCH, torch.float32, "cpu")
    assert out.shape == (32, 45) and out.stride() == (PITCH, 1) and not out.is_contiguous()
    assert out.untyped_storage().nbytes() == 32 * PITCH * 4  # the last row owns its padding too
    assert empty_out(ODD, None, torch.float32, "cpu").is_contiguous()
    assert empty_out(ODD, 45, torch.float32, "cpu").is_contiguous()
    bmm = make_problem(m=8, n=45, k=16, batch=3, dtype="float16", device="cpu")
    batched = empty_out(bmm, 48, torch.float16, "cpu")
    assert batched.shape == (3, 8, 45) and batched.stride() == (8 * 48, 48, 1)
    with pytest.raises(ValueError, match="narrower"):
        empty_out(ODD, 40, torch.float32, "cpu")
    ops = empty_operands(ODD, "cpu", PITCH)  # what the compile pool warms a kernel up with
    assert ops.out.stride() == (PITCH, 1)


def test_the_timing_copies_keep_the_pitch():
    """CudaTimer.graph rotates over copies of the operands: a pitched output's copies are
    pitched too (torch.clone would make them contiguous), the dense operands keep theirs."""
    problem = make_problem(m=32, n=45, k=40, dtype="float16", layout="tn", bias="n", device="cpu")
    ops = make_operands(problem, seed=1, device="cpu", pitch=48)
    ops.out.copy_(torch.mm(ops.a, ops.b))
    assert ops.out.clone().is_contiguous()  # the trap
    copy = clone_operands(ops)
    assert copy.out.stride() == ops.out.stride() == (48, 1)
    assert copy.out.untyped_storage().nbytes() == 32 * 48 * 2
    assert copy.out.data_ptr() != ops.out.data_ptr() and torch.equal(copy.out, ops.out)
    assert copy.a.stride() == ops.a.stride() == (1, 32) and torch.equal(copy.a, ops.a)
    assert copy.b.stride() == ops.b.stride() and copy.bias.stride() == ops.bias.stride()
    dense = empty_out_like(torch.empty(4, 5).t())
    assert dense.stride() == (1, 5)  # a dense tensor's strides, as clone keeps them


def test_a_shared_output_is_the_one_buffer_and_the_inputs_are_still_copies():
    """CudaTimer.graph's copies write one output unless TimingPolicy.rotate_out: the copy
    then holds `ops.out` itself (pitch and all), and new A, B and bias as before."""
    problem = make_problem(m=32, n=45, k=40, dtype="float16", layout="tn", bias="n", device="cpu")
    ops = make_operands(problem, seed=1, device="cpu", pitch=48)
    copy = clone_operands(ops, share_out=True)
    assert copy.out is ops.out
    assert copy.a.data_ptr() != ops.a.data_ptr() and torch.equal(copy.a, ops.a)
    assert copy.b.data_ptr() != ops.b.data_ptr() and copy.bias.data_ptr() != ops.bias.data_ptr()
    assert not TimingPolicy().rotate_out


@pytest.mark.gpu
@pytest.mark.parametrize("rotate_out", [False, True])
def test_the_timing_graph_writes_one_output_unless_told_to_rotate(rotate_out):
    """The launches captured in the timing graph get copies of A and B (more bytes than
    the L2), and one output address for all of them unless `rotate_out`."""
    from autotune_cli.hardware.device import probe_device
    from autotune_cli.runner.timing import CudaTimer

    problem = make_problem(m=64, n=256, k=512, dtype="float16", layout="nn")
    ops = make_operands(problem, seed=1, device="cuda")
    seen_a, seen_out = set(), set()

    def run(item):
        seen_a.add(item.a.data_ptr())
        seen_out.add(item.out.data_ptr())
        torch.mm(item.a, item.b, out=item.out)

    timer = CudaTimer(probe_device("cuda").l2_bytes)
    policy = TimingPolicy(warmup=1, min_runs=2, max_runs=2, budget_ms=0.0, mode="graph", rotate_out=rotate_out)
    timing = timer.measure(run, ops, policy)
    assert timing.mode.startswith("graph") and len(seen_a) > 1
    assert len(seen_out) == (len(seen_a) if rotate_out else 1)
    torch.testing.assert_close(ops.out, torch.mm(ops.a, ops.b))


def test_each_candidate_gets_its_pitch_and_a_kernel_that_ignores_it_is_wrong(runner, tmp_path):
    right = register_template(Pitched("test::pitched"))
    wrong = register_template(Pitched("test::pitch_ignored", ignores_pitch=True))
    first = measure(runner, tmp_path, "test::pitched")
    assert first.status == "ok", first
    assert set(right.seen) == {(PITCH, 1)}
    kept = runner._inputs
    assert measure(runner, tmp_path, "aten::mm").status == "ok"  # contiguous, same inputs
    assert runner._inputs is kept and set(kept.outs) == {PITCH, None}
    assert kept.outs[None].is_contiguous()
    again = measure(runner, tmp_path, "test::pitched")  # the kept output, NaN-filled again
    assert again.status == "ok" and runner._inputs is kept
    bad = measure(runner, tmp_path, "test::pitch_ignored")
    assert bad.status == "wrong_result", bad
    assert set(wrong.seen) == {(PITCH, 1)}


def test_a_tune_of_misaligned_n_verifies_the_alignment_templates(tmp_path):
    """The whole pipeline (tuner, executor, a compile pool for the Triton candidate, the
    timing worker) on N = 45 fp16: every candidate runs into its padded output and is ok.
    (Under the interpreter the pool builds the kernel but has nothing to compile: that it
    compiles for the pitched output is seen on the GPU, tests/test_gpu_tune.py.)"""
    space = tmp_path / "space.json"
    space.write_text(json.dumps([{"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8,
                                  "num_stages": 2, "num_warps": 4}]))
    settings = TuneSettings(device="cpu", cache_dir=tmp_path / "cache", workers=1, compile_workers=1,
                            templates=("triton::mm_padded", "aten::mm_aligned"), space_file=str(space))
    problem = make_problem(m=32, n=45, k=40, dtype="float16", bias="n", device="cpu")
    pitches = {uid: get_template(uid).out_pitch(problem, {}) for uid in settings.templates}
    assert pitches == {"triton::mm_padded": 48, "aten::mm_aligned": 48}
    with Tuner(settings) as tuner:
        outcome = tuner.tune(problem)
    candidates = [c.to_dict() for c in outcome.entry.candidates]
    assert sorted(c["uid"] for c in candidates) == ["aten::mm_aligned"] * 6 + ["triton::mm_padded"]
    assert all(c["status"] == "ok" for c in candidates), candidates
    widths = {(c["params"]["ZERO_PAD"], c["params"]["PAD_BYTES"]) for c in candidates if c["uid"] == "aten::mm_aligned"}
    assert widths == {(z, w) for z in (0, 1) for w in (16, 128, 512)}
    assert outcome.winner is not None
