"""The timing worker's CandidateRunner keeps one problem's inputs and float64 reference
between candidates: reused while the problem and seed stay, made anew when they change or a
candidate fails, and a candidate that fails on kept inputs is checked again on fresh ones."""

from dataclasses import replace

import pytest
import torch

from autotune_cli.runner import verify
from autotune_cli.runner.executor import LocalExecutor
from autotune_cli.runner.verify import make_operands as fresh_operands  # not counted below
from autotune_cli.runner.candidate import CandidateRunner
from autotune_cli.runner.messages import COMPILE, MEASURE, WorkerTask
from autotune_cli.candidates.choices import KernelTemplateChoice
from autotune_cli.hardware.device import probe_device
from autotune_cli.plugins import load_plugins
from autotune_cli.problem import make_problem
from autotune_cli.settings import TimingPolicy, TuneSettings
from autotune_cli.templates import get_template
from conftest import INTERPRETING, PLUGINS

PLANTED = tuple(str(PLUGINS / name) for name in ("faulty.py", "corrupting.py", "broken.py", "treacherous.py"))
FAST = TimingPolicy(warmup=0, min_runs=2, max_runs=2, budget_ms=0.0)
PROBLEM = make_problem(m=32, n=32, k=32, device="cpu", dtype="float32")


@pytest.fixture
def runner(monkeypatch):
    """A CPU runner in this process, with make_operands and reference counted."""
    load_plugins(PLANTED)
    threads = torch.get_num_threads()
    made = {"operands": 0, "reference": 0}
    make_operands, reference = verify.make_operands, verify.reference

    def counted_operands(*args, **kwargs):
        made["operands"] += 1
        return make_operands(*args, **kwargs)

    def counted_reference(*args, **kwargs):
        made["reference"] += 1
        return reference(*args, **kwargs)

    monkeypatch.setattr(verify, "make_operands", counted_operands)
    monkeypatch.setattr(verify, "reference", counted_reference)
    runner = CandidateRunner("cpu", 0)  # sets torch's threads to 1: given back below
    runner.made = made
    yield runner
    torch.set_num_threads(threads)


def run(runner, tmp_path, uid, problem=PROBLEM, seed=0):
    task = WorkerTask(MEASURE, uid, problem, {}, seed, str(tmp_path), FAST)
    payload, fatal = runner.run(task)
    assert not fatal
    return payload


def test_consecutive_candidates_of_one_problem_share_inputs_and_reference(runner, tmp_path):
    first = run(runner, tmp_path, "test::good")
    kept = runner._inputs
    second = run(runner, tmp_path, "aten::mm")
    third = run(runner, tmp_path, "test::good")
    assert [c.status for c in (first, second, third)] == ["ok", "ok", "ok"]
    assert runner.made == {"operands": 1, "reference": 1}
    assert runner._inputs is kept  # the same tensors, not equal copies
    assert all("recheck" not in c.phases for c in (first, second, third))
    # The reference is still that of the inputs: the kept A and B were not changed.
    fresh = fresh_operands(PROBLEM, 0, "cpu")
    assert torch.equal(kept.ops.a, fresh.a) and torch.equal(kept.ops.b, fresh.b)
    assert torch.equal(kept.ref.exact, fresh.a.double() @ fresh.b.double())


def test_a_new_placement_makes_the_same_inputs_anew_and_keeps_the_reference(runner, tmp_path):
    """A pass at another placement (TimingPolicy.placement) gets the same values in new
    tensors, the float64 reference and the best times kept; the candidates of one pass
    share them, and a pass back at an earlier placement makes them anew again."""
    def at(uid, placement):
        task = WorkerTask(MEASURE, uid, PROBLEM, {}, 0, str(tmp_path), replace(FAST, placement=placement))
        payload, fatal = runner.run(task)
        assert not fatal and payload.status == "ok", payload
        return runner._inputs

    first = at("aten::mm", 0)
    best, ref = dict(first.best_ms), first.ref
    assert best and runner.made == {"operands": 1, "reference": 1}
    moved = at("aten::mm", 1)
    assert moved is not first and moved.placement == 1
    assert moved.ops.a is not first.ops.a and torch.equal(moved.ops.a, first.ops.a)
    assert torch.equal(moved.ops.b, first.ops.b)
    assert moved.ref is ref and moved.best_ms is first.best_ms  # carried, not made again
    assert all(moved.best_ms[k] <= best[k] for k in best)  # lowered by this candidate's if faster
    assert at("test::good", 1) is moved  # the pass's next candidate: the same tensors
    assert runner.made == {"operands": 2, "reference": 1}
    assert at("aten::mm", 0) is not moved
    assert runner.made == {"operands": 3, "reference": 1}
    assert run(runner, tmp_path, "aten::mm", seed=1).status == "ok"  # another seed: all anew
    assert runner.made == {"operands": 4, "reference": 2}


def test_a_wrong_result_against_a_carried_reference_is_checked_again_on_all_made_fresh(runner, tmp_path):
    """The reference carried to a new placement is an earlier candidate's as much as kept
    inputs are (a GPU kernel writing out of bounds could reach it): a wrong result against
    it is checked again with the inputs and the reference made anew, and only that counts."""
    assert run(runner, tmp_path, "test::good").status == "ok"
    runner._inputs.ref.exact.add_(1.0)  # spoiled, as a stray write would
    task = WorkerTask(MEASURE, "test::good", PROBLEM, {}, 0, str(tmp_path), replace(FAST, placement=1))
    payload, fatal = runner.run(task)
    assert not fatal and payload.status == "ok", payload
    assert "recheck" in payload.phases
    assert payload.worst_of_allowed <= 1  # the spoiled check's margin is not the candidate's
    assert runner.made == {"operands": 3, "reference": 2}
    fresh = fresh_operands(PROBLEM, 0, "cpu")
    assert torch.equal(runner._inputs.ref.exact, fresh.a.double() @ fresh.b.double())


def test_the_output_is_poisoned_again_before_a_candidate_on_kept_inputs(runner, tmp_path):
    assert run(runner, tmp_path, "test::good").status == "ok"
    # A kernel that writes nothing would find the last candidate's right product in a
    # reused output that was not filled with NaN again.
    lazy = run(runner, tmp_path, "test::writes_nothing")
    assert lazy.status == "wrong_result" and "never written" in lazy.error
    assert runner._inputs is None  # a failed candidate drops the kept inputs


def test_a_correct_candidate_after_one_that_spoiled_the_inputs_is_still_ok(runner, tmp_path):
    assert run(runner, tmp_path, "test::good").status == "ok"
    # Right output, then A and B spoiled: it passes, and the kept inputs are now wrong.
    spoiler = run(runner, tmp_path, "test::corrupt_after")
    assert spoiler.status == "ok"
    assert runner.made["operands"] == 1
    fresh = fresh_operands(PROBLEM, 0, "cpu")
    assert not torch.equal(runner._inputs.ops.a, fresh.a)  # the corruption is real
    good = run(runner, tmp_path, "test::good")
    assert good.status == "ok", good
    assert "recheck" in good.phases  # it failed on the kept inputs, passed on fresh ones
    assert runner.made == {"operands": 2, "reference": 2}
    assert torch.equal(runner._inputs.ops.a, fresh.a)  # the fresh inputs are kept now
    after = run(runner, tmp_path, "aten::mm")
    assert after.status == "ok" and "recheck" not in after.phases
    assert runner.made["operands"] == 2


@pytest.mark.parametrize("uid", ["test::first_only", "test::garbage_after", "test::every_other",
                                 "test::rebinds_out"])
def test_a_candidate_right_only_at_its_first_call_is_wrong(runner, tmp_path, uid):
    """The timed runs are verified too, on the output the caller owns: a kernel that writes
    nothing, garbage, or garbage every other call after its first, or that writes its own
    tensor in place of the caller's, is a wrong result."""
    assert run(runner, tmp_path, "test::good").status == "ok"
    payload = run(runner, tmp_path, uid)
    assert payload.status == "wrong_result", payload
    assert run(runner, tmp_path, "test::good").status == "ok"


def test_the_confirmation_launches_are_the_timing_policys(runner, tmp_path):
    """A kernel wrong on its even calls, timed with an odd last run, is caught by the first
    launch after the timing: with none (TimingPolicy.confirm_launches = 0) it would pass."""
    results = {}
    for launches in (0, 1):
        task = WorkerTask(MEASURE, "test::every_other", PROBLEM, {}, 0, str(tmp_path),
                          replace(FAST, confirm_launches=launches))
        payload, fatal = runner.run(task)
        assert not fatal
        results[launches] = payload.status
    assert results == {0: "ok", 1: "wrong_result"}


def test_a_kernel_wrong_on_a_random_half_of_its_calls_never_passes(runner, tmp_path):
    """Each build flips its own seeded coin per call: with three checks about one build in
    eight passed; with verify's 22, one in four million."""
    verdicts = [run(runner, tmp_path, "test::coin_flip").status for _ in range(40)]
    assert verdicts == ["wrong_result"] * 40, verdicts
    assert run(runner, tmp_path, "test::good").status == "ok"


def test_a_build_the_file_system_failed_is_skipped_not_a_compile_error(runner, tmp_path):
    """A kernels folder that cannot be made (a file in its place) is the environment's
    failure: skipped (measured again by the next tune), never stored as the kernel's."""
    blocked = tmp_path / "kernels"
    blocked.write_text("not a folder")
    config = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 1, "num_warps": 1, "num_stages": 1}
    task = WorkerTask(MEASURE, "triton::mm", PROBLEM, config, 0, str(blocked / "sub"), FAST)
    payload, fatal = runner.run(task)
    assert payload.status == "skipped" and "the environment, not the kernel" in payload.error, payload
    compiled, _ = runner.compile(replace(task, mode=COMPILE))
    assert compiled.ok is False and compiled.status == "skipped"


def test_a_wrong_candidate_stays_wrong_on_fresh_inputs_and_drops_them(runner, tmp_path):
    assert run(runner, tmp_path, "test::good").status == "ok"
    wrong = run(runner, tmp_path, "test::corrupt_before")  # fails on kept, then on fresh inputs
    assert wrong.status == "wrong_result"
    assert runner.made["operands"] == 2 and runner._inputs is None
    good = run(runner, tmp_path, "test::good")
    assert good.status == "ok" and "recheck" not in good.phases  # fresh from the start
    assert runner.made["operands"] == 3


def test_failures_drop_the_kept_inputs_but_a_build_error_does_not(runner, tmp_path):
    assert run(runner, tmp_path, "test::good").status == "ok"
    kept = runner._inputs
    broken = run(runner, tmp_path, "test::broken")  # fails before any input is handed over
    assert broken.status == "compile_error"
    assert runner._inputs is kept
    raised = run(runner, tmp_path, "test::raise")  # raised with the inputs in hand
    assert raised.status == "runtime_error" and "planted failure" in raised.error
    assert runner._inputs is None
    assert run(runner, tmp_path, "test::good").status == "ok"
    assert runner.made["operands"] == 2


def test_another_problem_or_seed_makes_new_inputs(runner, tmp_path):
    other = make_problem(m=48, n=32, k=16, device="cpu", dtype="float32")
    steps = [(PROBLEM, 0, 1), (PROBLEM, 0, 1), (other, 0, 2), (other, 0, 2), (PROBLEM, 0, 3), (PROBLEM, 7, 4)]
    for problem, seed, made in steps:
        assert run(runner, tmp_path, "test::good", problem, seed).status == "ok"
        assert runner.made["operands"] == made
        assert runner._inputs.ops.a.shape == (problem.m, problem.k)
    assert runner.made["reference"] == 4


def test_the_timing_worker_reuses_inputs_across_the_executors_candidates(tmp_path):
    """Through the executor: one seed for all candidates, so the worker's inputs are kept, and
    the candidate after the spoiler is rescued by the check on fresh inputs."""
    load_plugins(PLANTED)
    settings = TuneSettings(device="cpu", cache_dir=tmp_path, workers=1, plugins=PLANTED)
    device = probe_device("cpu")
    uids = ["test::good", "test::corrupt_after", "test::good", "aten::mm"]
    choices = [KernelTemplateChoice.make(get_template(uid), PROBLEM, {}) for uid in uids]
    with LocalExecutor(device, settings) as executor:
        results = executor.run(choices, policy=FAST)
    assert [r.status for r in results] == ["ok"] * 4, [r.error for r in results]
    assert ["recheck" in r.phases for r in results] == [False, False, True, False]


def test_a_long_error_keeps_what_happened():
    """A CUDA error's name is on its first line and its boilerplate after: the one-line
    reason keeps the first line (it was lost behind the advice before)."""
    from autotune_cli.runner.candidate import short_error

    error = RuntimeError("CUDA error: misaligned address\nCUDA kernel errors might be asynchronously "
                         "reported at some other API call.\nFor debugging consider passing "
                         "CUDA_LAUNCH_BLOCKING=1\nCompile with TORCH_USE_CUDA_DSA.\n")
    line = short_error(error)
    assert line.startswith("RuntimeError: CUDA error: misaligned address") and "\n" not in line
    assert short_error(ValueError("one line")) == "ValueError: one line"


def test_clock_warmer_warms_only_after_idle_time():
    """The timer's warm-up (runner/timing.py ClockWarmer): after idle time, about warm_ms of
    launches; right after other work, none; its count bounded for tiny kernels."""
    from autotune_cli.runner.timing import ClockWarmer

    now = [0.0]
    launches = []
    warmer = ClockWarmer(idle_s=0.05, warm_ms=25.0, clock=lambda: now[0])
    assert warmer.warm(lambda: launches.append(1), per_run_ms=0.3) == 84  # never busy yet: idle
    warmer.busy()
    now[0] += 0.01
    assert warmer.warm(lambda: launches.append(1), per_run_ms=0.3) == 0  # busy 10 ms ago
    now[0] += 0.1
    assert warmer.warm(lambda: launches.append(1), per_run_ms=0.0001) == ClockWarmer.MAX_LAUNCHES
    assert len(launches) == 84 + ClockWarmer.MAX_LAUNCHES


@pytest.mark.parametrize("device", [
    pytest.param("cpu", marks=pytest.mark.skipif(not INTERPRETING, reason="needs TRITON_INTERPRET=1")),
    pytest.param("cuda", marks=pytest.mark.gpu),
])
def test_triton_warmup_kernel_runs(device, tmp_path, monkeypatch):
    """The timing process's warm-up (runner/warmup.py): the kernel form runs its kernel
    and, on a GPU, leaves its binary in Triton's cache as a real candidate's first launch
    would; the compile-free form brings up the driver and the backend there; an unknown mode
    is refused."""
    import torch

    from autotune_cli.runner.warmup import warm, warm_steps

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    warm(torch, "kernel", device)
    if device == "cuda":
        assert list((tmp_path / "triton").rglob("*.cubin"))
        assert "triton key" in warm_steps()  # the 0.37 s of a first launch (warmup.py)
    with pytest.raises(ValueError, match="AUTOTUNE_WARM_TRITON"):
        warm(torch, "everything", device)


def test_a_bad_warm_mode_is_a_user_error():
    """AUTOTUNE_WARM_TRITON is read with the other switches (settings.Switches) and checked
    where the executor is made, before any worker starts: a value it does not know is a
    one-line error for a GPU's workers, not a warm-up silently skipped; the CPU's never warm."""
    from autotune_cli.settings import Switches
    from autotune_cli.errors import UserError

    assert Switches.from_environment({}) == Switches("steps", True, None)
    assert [Switches.from_environment({"AUTOTUNE_WARM_TRITON": m}).warm_triton for m in ("kernel", "0")] \
        == ["kernel", "0"]
    switches = Switches.from_environment({"AUTOTUNE_WARM_TRITON": "off", "AUTOTUNE_OFFLINE_COMPILE": "0",
                                          "AUTOTUNE_START_METHOD": "spawn"})
    assert (switches.offline_compile, switches.start_method) == (False, "spawn")
    switches.check("cpu")
    with pytest.raises(UserError, match="AUTOTUNE_WARM_TRITON must be one of steps, kernel, 0, not 'off'"):
        switches.check("cuda")


def test_an_executor_for_a_gpu_refuses_a_bad_warm_mode_before_any_worker(tmp_path, monkeypatch):
    """Where the executor for a GPU is made, a bad AUTOTUNE_WARM_TRITON stops it before it sets
    up a worker (no GPU is needed to see it: nothing is started)."""
    from autotune_cli.errors import UserError

    monkeypatch.setenv("AUTOTUNE_WARM_TRITON", "off")
    gpu = replace(probe_device("cpu"), device_type="cuda")
    with pytest.raises(UserError, match="AUTOTUNE_WARM_TRITON"):
        LocalExecutor(gpu, TuneSettings(device="cuda", cache_dir=tmp_path))


def test_the_messages_cross_a_pipe_as_they_were_made():
    """What a worker is sent and answers are frozen dataclasses pickled through the pipe (the
    problem and the timing policy as themselves): each arrives equal to what was sent."""
    import multiprocessing

    from autotune_cli.runner.messages import CompileAnswer, WorkerAnswer
    from autotune_cli.store.results import Candidate

    sent = [WorkerTask(MEASURE, "triton::mm", PROBLEM, {"BLOCK_M": 16}, 3, "/k", FAST),
            WorkerAnswer.ready(123, "offline"), WorkerAnswer.start_failed("no", "trace"),
            WorkerAnswer.measured(Candidate(uid="aten::mm", params={}, status="ok", ms=0.5, phases={"timing": 0.1}),
                                  fatal=False),
            WorkerAnswer.compile_done(CompileAnswer.built(0.25), fatal=True), CompileAnswer.pool_closed()]
    reader, writer = multiprocessing.Pipe(duplex=False)
    try:
        for message in sent:
            writer.send(message)
            assert reader.recv() == message
    finally:
        reader.close()
        writer.close()
    assert sent[0].problem.key() == PROBLEM.key() and sent[3].candidate.ok and sent[4].compiled.ok
    assert not sent[5].ok and sent[5].closed


def test_a_placement_copies_the_operands_into_a_buffer_a_step_further_in():
    """CandidateRunner.placed: the same values, shapes, strides and storage offsets (a pitched
    output's whole rows too), every tensor in one new buffer, placement x PLACEMENT_STEP
    bytes in, each after the one before at an aligned offset; graph timing counts the bytes
    they span as before (not the shared buffer's, which would rotate too few copies)."""
    import torch

    from autotune_cli.runner.timing import _operand_bytes
    from autotune_cli.runner.verify import make_operands

    problem = make_problem(m=5, n=24, k=16, dtype="float16", layout="tn", bias="n", op="addmm")
    ops = make_operands(problem, 0, "cpu", pitch=32)
    ops.out.fill_(1.5)
    align = CandidateRunner.ALIGN_PLACED
    for placement in (1, 3):
        moved = CandidateRunner.placed(ops, placement)
        start = moved.a.untyped_storage().data_ptr()
        region = placement * CandidateRunner.PLACEMENT_STEP
        for name in ("a", "b", "bias", "out"):  # the order they are placed in
            old, new = getattr(ops, name), getattr(moved, name)
            assert new.untyped_storage().data_ptr() == start
            assert (new.shape, new.stride(), new.dtype) == (old.shape, old.stride(), old.dtype)
            assert new.data_ptr() - start == region + old.storage_offset() * old.element_size()
            assert torch.equal(new, old)
            region += -(-old.untyped_storage().nbytes() // align) * align
        assert moved.out.untyped_storage().nbytes() == region  # the output's padded rows whole
        assert _operand_bytes(moved) == _operand_bytes(ops)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(256, 4096, 4096), (1, 512, 384)], ids=["large-blocks", "small-blocks"])
def test_each_placement_puts_the_operands_at_other_addresses(shape):
    """On a GPU, each placement's A, B and output lie at addresses no earlier placement's
    did (the pads below them), with the same values and the same reference: operands in the
    allocator's large blocks (the 256-row chunk's) and in its small ones (a decode's)."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    m, n, k = shape
    problem = make_problem(m=m, n=n, k=k, dtype="bfloat16", layout="nt")
    runner = CandidateRunner("cuda", probe_device("cuda").l2_bytes)
    ops, ref, _ = runner.inputs(problem, 0, None, 0)
    a, b = ops.a.clone(), ops.b.clone()
    seen = {ops.a.data_ptr(), ops.b.data_ptr(), ops.out.data_ptr()}
    for placement in (1, 2, 3, 4):
        ops, moved_ref, _ = runner.inputs(problem, 0, None, placement)
        addresses = {ops.a.data_ptr(), ops.b.data_ptr(), ops.out.data_ptr()}
        assert not addresses & seen, placement
        seen |= addresses
        assert torch.equal(ops.a, a) and torch.equal(ops.b, b) and moved_ref is ref
