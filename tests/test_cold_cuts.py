"""Less work per problem without worse picks: the first timing gives up on a candidate far
slower than the problem's best so far, a lead over cuBLAS too large for any misread is not
confirmed, and a list's next problems are compiled while this one is timed."""

import time

import pytest
import torch

from conftest import PLUGINS, ran_verified
from autotune_cli.candidates.choices import get_choices
from autotune_cli.hardware.device import probe_device
from autotune_cli.plugins import load_plugins
from autotune_cli.problem import make_problem
from autotune_cli.runner.candidate import GAVE_UP, CandidateRunner
from autotune_cli.runner.messages import COMPILE, MEASURE, WorkerTask
from autotune_cli.settings import MeasurePolicy, Switches, TimingPolicy, TuneSettings

SLEEPY = str(PLUGINS / "sleepy.py")  # eight configs, each run sleeps $AUTOTUNE_TEST_SLEEP s
PROBLEM = make_problem(m=32, n=32, k=32, device="cpu", dtype="float32")


@pytest.fixture
def runner(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_TEST_SLEEP", "0.02")
    load_plugins((SLEEPY,))
    threads = torch.get_num_threads()
    yield CandidateRunner("cpu", 0)
    torch.set_num_threads(threads)


def run(runner, tmp_path, uid, config=None, give_up_over=0.0):
    timing = TimingPolicy(warmup=0, min_runs=3, max_runs=3, budget_ms=0.0, give_up_over=give_up_over)
    task = WorkerTask(MEASURE, uid, PROBLEM, config or {}, 0, str(tmp_path), timing)
    payload, fatal = runner.run(task)
    assert not fatal
    return payload


def test_a_candidate_far_slower_than_the_best_so_far_is_given_up_after_one_run(runner, tmp_path):
    # nothing timed yet: nothing to hold it against
    first = run(runner, tmp_path, "test::sleepy", {"id": 0}, give_up_over=1.5)
    assert first.status == "ok" and first.runs == 3
    fast = run(runner, tmp_path, "aten::mm", give_up_over=1.5)
    assert fast.status == "ok" and fast.runs == 3
    kept = runner._inputs
    assert kept.best_ms["events"] == fast.ms  # the best so far: what the next is held against
    slow = run(runner, tmp_path, "test::sleepy", {"id": 1}, give_up_over=1.5)
    assert slow.status == "skipped" and slow.error.startswith(GAVE_UP)
    assert slow.runs == 1 and slow.ms >= 20.0  # its one run says how slow it is
    assert "timed_check" in slow.phases and ran_verified(slow.to_dict())  # verified like an OK one ...
    assert runner._inputs is kept  # ... so the inputs are kept
    # without the knob (the re-timing, the confirmation), it is timed fully
    again = run(runner, tmp_path, "test::sleepy", {"id": 1})
    assert again.status == "ok" and again.runs == 3


def test_the_rounds_after_the_first_never_give_up():
    measure = MeasurePolicy.for_device("cuda", Switches()).for_problem(
        make_problem(m=4096, n=4096, k=4096, dtype="bfloat16", device="cuda"), "cuda")
    assert measure.timing.give_up_over == 1.5 and measure.screening().give_up_over == 1.5
    assert measure.retiming().give_up_over == 0.0 and measure.sustained().give_up_over == 0.0
    assert MeasurePolicy.for_device("cpu", Switches()).for_problem(PROBLEM, "cpu").timing.give_up_over == 0.0


def test_a_tune_gives_up_on_hopeless_candidates_and_still_picks_the_best(tmp_path, monkeypatch):
    from autotune_cli.tune.tuner import Tuner

    monkeypatch.setenv("AUTOTUNE_TEST_SLEEP", "0.02")
    settings = TuneSettings(device="cpu", cache_dir=tmp_path, templates=("aten::mm", "test::sleepy"),
                            plugins=(SLEEPY,), workers=1,
                            measure=MeasurePolicy.for_device("cpu", Switches(), give_up_over=1.5))
    problem = make_problem(m=32, n=32, k=32, device="cpu", dtype="float32")
    with Tuner(settings) as tuner:
        outcome = tuner.tune(problem)
    by_uid = {}
    for cand in outcome.entry.to_dict()["candidates"]:
        by_uid.setdefault(cand["uid"], []).append(cand)
    assert outcome.winner.uid == "aten::mm"
    gave_up = [c for c in by_uid["test::sleepy"] if c["status"] == "skipped" and c["error"].startswith(GAVE_UP)]
    assert len(gave_up) >= 7  # one worker: every sleepy config after aten::mm (at most one before it)
    assert all(c["ms"] >= 10.0 for c in gave_up)


def confirm_asked(first: dict, sustained: dict) -> list:
    from autotune_cli.store.results import Candidate
    from autotune_cli.search.base import SearchContext, confirm_against_vendor

    class Choice:
        def __init__(self, uid):
            self.uid = uid

    asked = []

    from autotune_cli.runner import Executor as ExecutorProtocol

    class Executor(ExecutorProtocol):
        def run(self, choices, on_result, policy=None, deadline=None, shareable=False):
            asked.append([c.uid for c in choices])
            for i, choice in enumerate(choices):
                on_result(i, Candidate(uid=choice.uid, params={}, status="ok", ms=sustained[choice.uid]))

    ctx = SearchContext(problem=None, device=None, choices=[], executor=Executor(),
                        measure=MeasurePolicy(confirm_passes=4), deadline=None, on_result=lambda *a: None)
    pairs = [(Choice(uid), Candidate(uid=uid, params={}, status="ok", ms=ms)) for uid, ms in first.items()]
    confirm_against_vendor(ctx, pairs)
    return asked


def test_a_lead_no_misread_could_make_is_not_confirmed():
    # aten::mm_aligned at 3.6x cuBLAS (1000x3000x777 fp16 on the H200): nothing to confirm
    assert confirm_asked({"aten::mm_aligned": 0.017, "aten::mm": 0.0605}, {}) == []
    # 10% ahead: a lead the short bursts could still have misread by part: confirmed
    sustained = {"triton::mm_swap_ab": 0.0125, "aten::mm": 0.0138}
    assert confirm_asked({"triton::mm_swap_ab": 0.0124, "aten::mm": 0.0138}, sustained) == \
        [["triton::mm_swap_ab", "aten::mm"], ["aten::mm", "triton::mm_swap_ab"]] * 2


def wait_for(condition, seconds=120.0):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def test_prefetched_kernels_come_after_asked_ones_and_are_answered_at_once(tmp_path):
    from autotune_cli.runner.compile_pool import CompilePool, compile_key
    from autotune_cli.runner.processes import worker_context

    settings = TuneSettings(device="cpu", cache_dir=tmp_path, templates=("triton::mm",), compile_workers=0)
    device = probe_device("cpu")
    choices = get_choices(make_problem(m=64, n=64, k=64, device="cpu", dtype="float16"), device,
                          settings).choices[:4]
    assert len({compile_key(c) for c in choices}) == 4
    pool = CompilePool(worker_context(None, "cpu"), [device], 1, (), 60.0, 180.0, Switches())
    tasks = [WorkerTask.for_choice(c, COMPILE, 0, str(settings.kernel_dir),
                                   settings.measure.timing_for(c.problem, device.device_type)) for c in choices]
    keys = [compile_key(c) for c in choices]
    answers = {}
    try:
        pool.prefetch(keys[1], tasks[1])
        pool.prefetch(keys[2], tasks[2])
        pool.prefetch(keys[3], tasks[3])
        pool.submit(keys[0], tasks[0], "owner", lambda payload: answers.setdefault(0, payload))
        pool.submit(keys[3], tasks[3], "owner", lambda payload: answers.setdefault(3, payload))
        pool.prefetch(keys[0], tasks[0])  # asked for already: nothing more
        assert wait_for(lambda: pool.compiled == 4 and 0 in answers and 3 in answers)
        sent = {i: pool._built[k].sent_at for i, k in enumerate(keys)}
        # the one process was free when the first prefetch came; after it, what is asked for
        # comes before what is only prefetched, each first come first served
        assert sent[0] < sent[3] < sent[2]
        pool.submit(keys[2], tasks[2], "owner", lambda payload: answers.setdefault(2, payload))
        assert answers[2].ok and answers[2].reused  # at once, from the prefetch
        assert pool.compiled == 4
    finally:
        pool.close()


def test_a_list_compiles_the_next_problem_while_this_one_is_timed(tmp_path):
    from autotune_cli.tune.tuner import Tuner

    settings = TuneSettings(device="cpu", cache_dir=tmp_path, templates=("aten::mm", "triton::mm"),
                            compile_workers=1, workers=1)
    first = make_problem(m=64, n=64, k=64, device="cpu", dtype="float16")
    second = make_problem(m=64, n=64, k=64, device="cpu", dtype="float32")  # other kernels
    with Tuner(settings) as tuner:
        outcome = tuner.tune(first, upcoming=(second,))
        assert "prefetch" in outcome.entry.phases
        pool = tuner.started_executor.compile_pool
        from autotune_cli.runner.compile_pool import compile_key

        wanted = {compile_key(c) for c in get_choices(second, tuner.device, settings).choices
                  if c.uid == "triton::mm"}
        assert wanted and wait_for(lambda: wanted <= set(pool._built))
        outcome = tuner.tune(second)
    assert outcome.winner is not None
    assert not outcome.entry.compiles  # every kernel was there when asked for
    assert all(c.status == "ok" for c in outcome.entry.candidates)
