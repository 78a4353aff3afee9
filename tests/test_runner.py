"""The runner (runner/) on the CPU: crash and hang isolation, the compile pool, the
forkserver, and through the tuner the search strategies, the time budget and resuming an
interrupted tune."""

import json

import pytest
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


from conftest import PLUGINS, is_pick
from autotune_cli.runner.executor import LocalExecutor
from autotune_cli.runner.messages import COMPILE, WorkerTask
from autotune_cli.candidates.choices import get_choices
from autotune_cli.hardware.device import probe_device
from autotune_cli.plugins import load_plugins
from autotune_cli.problem import make_problem
from autotune_cli.settings import Switches, TuneSettings


def test_faults_are_isolated_and_the_good_candidate_wins(tmp_path):
    load_plugins([str(PLUGINS / "faulty.py")])
    settings = TuneSettings(device="cpu", cache_dir=tmp_path, timeout_s=4.0, workers=2,
                            plugins=(str(PLUGINS / "faulty.py"),),
                            templates=("test::abort", "test::raise", "test::hang", "test::good", "aten::mm"))
    problem = make_problem(m=32, n=32, k=32, device="cpu", dtype="float32")
    device = probe_device("cpu")
    choices = get_choices(problem, device, settings).choices
    with LocalExecutor(device, settings) as executor:
        results = executor.run(choices)
    by_uid = {r.uid: r for r in results}
    assert set(by_uid) == {"test::abort", "test::raise", "test::hang", "test::good", "aten::mm"}
    assert by_uid["test::abort"].status == "runtime_error" and "SIGABRT" in by_uid["test::abort"].error
    assert by_uid["test::raise"].status == "runtime_error" and "planted failure" in by_uid["test::raise"].error
    assert by_uid["test::hang"].status == "timeout" and "worker killed" in by_uid["test::hang"].error
    assert "within 4 s" in by_uid["test::hang"].error  # cut at its deadline, not left to run
    assert by_uid["test::good"].ok and by_uid["aten::mm"].ok


def test_a_worker_that_died_while_idle_is_replaced_and_its_task_runs(tmp_path):
    """A timing worker killed between runs is still marked idle: the next task sent to it
    fails to go (a broken pipe), goes back to the queue, and a fresh worker runs it (a lent
    worker, scaleout/local.py, is dropped the same way instead of failing the borrower's run). A
    device lends only workers that are alive."""
    settings = TuneSettings(device="cpu", cache_dir=tmp_path, workers=1, gpus=2, templates=("aten::mm",))
    problems = [make_problem(m=16, n=16 * (i + 1), k=16, device="cpu", dtype="float32") for i in range(2)]
    from autotune_cli.scaleout.local import MultiDeviceTuner

    with MultiDeviceTuner(settings) as tuner:
        assert all(r.ok for r in tuner.tune_all(problems))
        executors = [t.started_executor for t in tuner.tuners]
        worker = executors[0].timers[0]
        assert worker.state == "idle"
        worker.process.kill()
        worker.process.join()
        assert worker.state == "idle"  # nothing has noticed yet
        executors[1]._shareable = True  # as in a first round: a live idle worker would be lent
        try:
            assert tuner.lend_idle_workers(0) is False  # the dead one is not
        finally:
            executors[1]._shareable = False
        choices = get_choices(make_problem(m=16, n=48, k=16, device="cpu", dtype="float32"),
                              tuner.devices[0], settings).choices
        results = executors[0].run(choices)
        assert [r.status for r in results] == ["ok"] and worker.state == "idle" and worker.process.is_alive()


def test_faults_through_the_cli(cli, cache_dir):
    code, out, err = cli("mm", "--device", "cpu", "--json", "--m", 32, "--n", 32, "--k", 32,
                         "--plugin", PLUGINS / "faulty.py", "--timeout", 4,
                         "--templates", "test::abort,test::raise,test::hang,test::good")
    assert code == 0, err
    doc = json.loads(out)
    statuses = {c["uid"]: c["status"] for c in doc["candidates"]}
    assert statuses == {"test::abort": "runtime_error", "test::raise": "runtime_error",
                        "test::hang": "timeout", "test::good": "ok"}
    assert doc["winner"]["uid"] == "test::good"


def test_compile_pool_feeds_the_timing_worker(tmp_path):
    """With a compile pool the Triton candidates are compiled (under the interpreter,
    a no-op warm-up) by another process first, then measured: same results."""
    settings = TuneSettings(device="cpu", cache_dir=tmp_path, compile_workers=1, workers=1)
    problem = make_problem(m=64, n=64, k=64, device="cpu", dtype="float16")
    device = probe_device("cpu")
    choices = get_choices(problem, device, settings).choices
    with LocalExecutor(device, settings) as executor:
        assert len(executor.compilers) == 1 and len(executor.timers) == 1
        results = executor.run(choices)
    assert len(results) == len(choices) and all(r.ok for r in results)
    triton = [r for r in results if r.uid == "triton::mm"]
    assert triton and all(r.compile_s is not None and r.first_run_s is not None for r in triton)


def test_compile_errors_are_caught_in_the_pool(tmp_path):
    plugin = str(PLUGINS / "broken.py")
    load_plugins([plugin])
    settings = TuneSettings(device="cpu", cache_dir=tmp_path, compile_workers=1, workers=1,
                            plugins=(plugin,), templates=("test::broken", "triton::mm", "aten::mm"))
    problem = make_problem(m=32, n=32, k=32, device="cpu")
    device = probe_device("cpu")
    choices = get_choices(problem, device, settings).choices
    with LocalExecutor(device, settings) as executor:
        results = executor.run(choices)
    by_uid = {}
    for result in results:
        by_uid.setdefault(result.uid, []).append(result)
    (broken,) = by_uid["test::broken"]
    assert broken.status == "compile_error" and "SyntaxError" in broken.error
    assert all(r.ok for r in by_uid["triton::mm"] + by_uid["aten::mm"])


def test_exhaustive_search_on_cpu(cli, cache_dir):
    code, out, err = cli("mm", "--device", "cpu", "--json", "--search", "exhaustive",
                         "--m", 32, "--n", 32, "--k", 32, "--dtype", "float32", "--interpreter-budget", 2,
                         "--templates", "aten,triton::mm")
    assert code == 0, err
    doc = json.loads(out)
    # 1875 configs, scaled to a 32^3 problem: blocks {16, 32}^3 x 5 stages x 3 warp counts
    assert doc["considered"] == 8 * 5 * 3 + 1
    statuses = {}
    for cand in doc["candidates"]:
        statuses[cand["status"]] = statuses.get(cand["status"], 0) + 1
    assert statuses.get("ok", 0) >= 2  # finalists, aten among them
    assert is_pick(doc["winner"], doc["candidates"])
    assert sum(doc["pruned"].values()) + len(doc["candidates"]) <= 1876


@pytest.mark.slow
def test_budget_skips_what_it_cannot_reach(cli, cache_dir, monkeypatch):
    # each config's first calls sleep 1 s (plugins/sleepy.py): eight configs are far past the budget
    monkeypatch.setenv("AUTOTUNE_TEST_SLEEP", "1.0")
    code, out, err = cli("mm", "--device", "cpu", "--json", "--m", 16, "--n", 16, "--k", 16,
                         "--plugin", PLUGINS / "sleepy.py", "--templates", "test::sleepy,aten",
                         "--workers", 1, "--budget", 12)
    assert code == 0, err
    doc = json.loads(out)
    statuses = [c["status"] for c in doc["candidates"]]
    assert "skipped" in statuses and "ok" in statuses
    assert len(statuses) == 9  # aten and eight sleepy configs, each accounted for
    skipped = [c for c in doc["candidates"] if c["status"] == "skipped"]
    assert all(c["error"] == "the tuning budget ran out" for c in skipped)


@pytest.mark.slow
def test_budget_stops_the_candidate_running_at_it(cli, cache_dir, monkeypatch):
    # a sleepy config sleeps 60 s per call, past the budget and short of --timeout: the one
    # running when the budget ends is stopped and skipped, not left to finish or time out
    monkeypatch.setenv("AUTOTUNE_TEST_SLEEP", "60")
    code, out, err = cli("mm", "--device", "cpu", "--json", "--m", 16, "--n", 16, "--k", 16,
                         "--plugin", PLUGINS / "sleepy.py", "--templates", "test::sleepy",
                         "--workers", 1, "--budget", 4, "--timeout", 600)
    assert code == 1, err
    doc = json.loads(out)
    assert [c["status"] for c in doc["candidates"]] == ["skipped"] * 8
    assert all(c["error"] == "the tuning budget ran out" for c in doc["candidates"])
    assert doc["winner"] is None
    assert "none finished within --budget; raise it" in err


@pytest.mark.slow
def test_interrupted_tune_resumes(cache_dir, tmp_path):
    args = [sys.executable, "-m", "autotune_cli", "mm", "--device", "cpu", "--json", "--m", "16",
            "--n", "16", "--k", "16", "--plugin", str(PLUGINS / "sleepy.py"),
            "--templates", "test::sleepy", "--workers", "1"]
    # a candidate takes about a second (plugins/sleepy.py): the kill comes before all eight are done
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": str(cache_dir), "AUTOTUNE_TEST_SLEEP": "0.2"}
    cache_file = cache_dir / "autotune-cache.json"
    # its output goes to files: a pipe nobody reads could block it once full
    with open(tmp_path / "out", "wb") as out, open(tmp_path / "err", "wb") as err:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=err, start_new_session=True)
    # until the first partial entry is saved, or the process ends (its stderr then says why);
    # the bound only keeps a hung run from hanging the suite
    bound = time.monotonic() + 600
    try:
        while proc.poll() is None and time.monotonic() < bound:
            if cache_file.exists() and '"partial": true' in cache_file.read_text():
                break
            time.sleep(0.05)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, (tmp_path / "err").read_text()[-2000:]
    assert cache_file.exists(), "no partial entry was saved"
    partial = json.loads(cache_file.read_text())["entries"]
    (entry,) = partial.values()
    assert entry["partial"] is True and entry["winner"] is None
    measured_before = len(entry["candidates"])
    assert 1 <= measured_before < 8
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["from_cache"] is False
    assert len(doc["candidates"]) == 8
    assert doc["winner"]["params"] == {"id": 5}
    final = json.loads(cache_file.read_text())["entries"]
    (entry,) = final.values()
    assert entry["resumed"] == measured_before and "partial" not in entry


def test_workers_see_the_callers_environment_of_now(tmp_path, monkeypatch):
    """Workers fork from a server started earlier; the environment they run under is the
    caller's at the time they start, not the server's."""
    from autotune_cli.runner.processes import worker_context

    worker_context(None, "cpu")  # the forkserver is up (started before the mark is set)
    plugin = str(PLUGINS / "envcheck.py")
    load_plugins([plugin])
    monkeypatch.setenv("AUTOTUNE_ENV_MARK", "set-after-the-server-started")
    settings = TuneSettings(device="cpu", cache_dir=tmp_path, workers=1, plugins=(plugin,),
                            templates=("test::envcheck",))
    problem = make_problem(m=16, n=16, k=16, device="cpu")
    device = probe_device("cpu")
    with LocalExecutor(device, settings) as executor:
        (result,) = executor.run(get_choices(problem, device, settings).choices)
        assert executor.startups and all(role == "measure" for role, _ in executor.startups)
    assert result.ok, result.error


def test_one_forkserver_serves_one_kind_of_worker(monkeypatch):
    """Triton decorates its library at import, as the interpreter or not: the forkserver
    serves the kind of worker it was started for, and the other kind is spawned."""
    from autotune_cli.runner import processes
    from autotune_cli.errors import UserError

    monkeypatch.delenv("AUTOTUNE_START_METHOD", raising=False)
    worker_context = processes.worker_context
    worker_context(None, "cpu")  # starts the server unless one is up already
    served = "cpu" if processes._forkserver_interprets else "cuda"
    other = "cuda" if served == "cpu" else "cpu"
    assert worker_context(None, served).get_start_method() == "forkserver"
    assert worker_context(None, other).get_start_method() == "spawn"
    assert worker_context("spawn", served).get_start_method() == "spawn"
    with pytest.raises(UserError, match="forkserver or spawn"):
        worker_context("fork", "cpu")


def killed(pid: int) -> bool:
    """Whether the process has died: gone, or a zombie its parent has not reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_forkserver_that_died_comes_back_in_its_kind(tmp_path, monkeypatch):
    """If the server dies, the next worker starts it again under the interpreter setting
    of its kind (not the caller's environment, which may lack TRITON_INTERPRET)."""
    import multiprocessing.forkserver as forkserver

    from autotune_cli.runner import processes

    monkeypatch.delenv("AUTOTUNE_START_METHOD", raising=False)
    if processes.worker_context(None, "cpu").get_start_method() != "forkserver":
        pytest.skip("this process's forkserver serves GPU workers")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    pid = forkserver._forkserver._forkserver_pid
    os.kill(pid, signal.SIGKILL)  # (left unreaped: multiprocessing reaps it and starts another)
    bound = time.monotonic() + 60
    while not killed(pid) and time.monotonic() < bound:
        time.sleep(0.01)
    settings = TuneSettings(device="cpu", cache_dir=tmp_path, workers=1, templates=("triton::mm",))
    problem = make_problem(m=33, n=17, k=40, device="cpu", dtype="float16")
    device = probe_device("cpu")
    choices = get_choices(problem, device, settings).choices[:2]
    with LocalExecutor(device, settings) as ex:
        results = ex.run(choices)
    assert forkserver._forkserver._forkserver_pid != pid
    assert results and all(r.ok for r in results), [r.error for r in results]


def test_stopping_the_forkserver_ends_it_and_the_next_worker_starts_another(tmp_path, monkeypatch):
    """The command stops the forkserver it started before it exits (it holds the command's
    stdout and stderr): the server is gone, and a worker asked for later starts a new one."""
    import multiprocessing.forkserver as forkserver

    from autotune_cli.runner import processes

    monkeypatch.delenv("AUTOTUNE_START_METHOD", raising=False)
    if processes.worker_context(None, "cpu").get_start_method() != "forkserver":
        pytest.skip("this process's forkserver serves GPU workers")
    pid = forkserver._forkserver._forkserver_pid
    processes.stop_forkserver()
    assert forkserver._forkserver._forkserver_pid is None
    with pytest.raises(ChildProcessError):  # reaped: no such child any more
        os.waitpid(pid, os.WNOHANG)
    processes.stop_forkserver()  # nothing to stop: a no-op
    settings = TuneSettings(device="cpu", cache_dir=tmp_path, workers=1, templates=("triton::mm",))
    problem = make_problem(m=32, n=16, k=16, device="cpu", dtype="float16")
    device = probe_device("cpu")
    with LocalExecutor(device, settings) as ex:
        results = ex.run(get_choices(problem, device, settings).choices[:1])
    assert forkserver._forkserver._forkserver_pid not in (None, pid)
    assert results and results[0].ok, results[0].error


def test_the_command_stops_the_forkserver_after_main(monkeypatch):
    """`autotune` (cli.run) stops the forkserver once main() is done, also when it raised,
    and exits with main()'s code."""
    from autotune_cli import cli
    from autotune_cli.runner import processes

    calls = []
    monkeypatch.setattr(processes, "stop_forkserver", lambda: calls.append("stop"))
    monkeypatch.setattr(cli, "main", lambda: calls.append("main") or 3)
    with pytest.raises(SystemExit) as exited:
        cli.run()
    assert exited.value.code == 3 and calls == ["main", "stop"]

    def fails():
        calls.append("main")
        raise RuntimeError("boom")

    monkeypatch.setattr(cli, "main", fails)
    with pytest.raises(RuntimeError):
        cli.run()
    assert calls == ["main", "stop", "main", "stop"]


def test_a_shared_compile_pool_builds_each_kernel_once(tmp_path):
    """Two devices (two CPU executors standing in) tune problems that differ only in size
    at the same time through one compile pool: each kernel is compiled once and both get
    every result."""
    import threading

    from autotune_cli.runner.compile_pool import CompilePool, compile_key
    from autotune_cli.runner.processes import worker_context

    settings = TuneSettings(device="cpu", cache_dir=tmp_path, compile_workers=2, workers=1,
                            templates=("triton::mm",))
    device = probe_device("cpu")
    problems = [make_problem(m=64, n=64, k=64, device="cpu", dtype="float16"),
                make_problem(m=80, n=64, k=64, device="cpu", dtype="float16")]
    choice_lists = [get_choices(p, device, settings).choices for p in problems]
    keys = [{compile_key(c) for c in choices} for choices in choice_lists]
    assert keys[0] == keys[1] and len(keys[0]) == len(choice_lists[0]) >= 2  # same kernels
    pool = CompilePool(worker_context(None, "cpu"), [device], 2, (), 60.0, 180.0, Switches())
    executors = [LocalExecutor(device, settings, compile_pool=pool) for _ in problems]
    outcomes: dict[int, list] = {}
    try:
        threads = [threading.Thread(target=lambda i=i: outcomes.setdefault(i, executors[i].run(choice_lists[i])))
                   for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    finally:
        for executor in executors:
            executor.close()
        pool.close()
    for i in range(2):
        assert len(outcomes[i]) == len(choice_lists[i]) and all(r.ok for r in outcomes[i])
        assert all(r.compile_s is not None for r in outcomes[i])
    assert pool.compiled == len(keys[0])  # once each, not once per device
    # each executor logs the compiles it waited for; one shared compile is one entry in both
    logged = set(executors[0].compile_log) | set(executors[1].compile_log)
    assert len(logged) == len(keys[0]) and all(sent <= done for sent, done, _ in logged)
    assert executors[0].compilers is executors[1].compilers is pool.workers
    assert all(not w.process for w in pool.workers)  # closed


def test_compile_pool_withdraw_drops_unwanted_work(tmp_path):
    """A request withdrawn before its compile started is dropped; the others are answered."""
    from autotune_cli.runner.compile_pool import CompilePool, compile_key
    from autotune_cli.runner.processes import worker_context

    settings = TuneSettings(device="cpu", cache_dir=tmp_path, templates=("triton::mm",))
    device = probe_device("cpu")
    problem = make_problem(m=64, n=64, k=64, device="cpu", dtype="float16")
    choices = get_choices(problem, device, settings).choices[:3]
    pool = CompilePool(worker_context(None, "cpu"), [device], 1, (), 60.0, 180.0, Switches())
    answers = []
    keep, drop = object(), object()
    try:
        for i, choice in enumerate(choices):
            task = WorkerTask.for_choice(choice, COMPILE, 0, str(settings.kernel_dir), settings.measure.timing)
            pool.submit(compile_key(choice), task, keep if i == 0 else drop, answers.append)
        pool.withdraw(drop)
        deadline = time.monotonic() + 120
        while not answers and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
    finally:
        pool.close()
    assert len(answers) == 1 and answers[0].ok
    assert pool.compiled == 1


def test_compile_keys_follow_the_binary(tmp_path):
    """Problems that differ only in sizes share a compile key (one binary), also for the
    persistent TMA template, whose SM-count constexpr does not depend on the problem; a
    split-K kernel, whose text holds K per split, does not share across K."""
    from autotune_cli.runner.compile_pool import compile_key

    device = probe_device("cpu")

    def keys(uid, **dims):
        settings = TuneSettings(device="cpu", cache_dir=tmp_path, templates=(uid,), interpreter_budget_s=1e9)
        problem = make_problem(device="cpu", dtype="float16", **dims)
        return {c.config_dict.get("BLOCK_K"): compile_key(c) for c in get_choices(problem, device, settings).choices}

    small = keys("triton::mm_persistent_tma", m=64, n=64, k=64)
    large = keys("triton::mm_persistent_tma", m=64, n=256, k=64)
    assert small and set(small.values()) == set(large.values())
    k64, k128 = keys("triton::mm_splitk", m=16, n=32, k=1024), keys("triton::mm_splitk", m=16, n=32, k=2048)
    assert k64 and not set(k64.values()) & set(k128.values())


def _run_within(executor, choices, seconds=120):
    """executor.run(choices) on a thread; fails the test instead of hanging."""
    import threading

    box = {}

    def target():
        try:
            box["results"] = executor.run(choices)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "run() hung"
    return box


def test_compile_pool_survives_a_worker_that_dies_while_idle(tmp_path):
    """A compile process killed between tasks is replaced; the next problem's compiles
    still come (the pool's thread does not die on the broken pipe)."""
    settings = TuneSettings(device="cpu", cache_dir=tmp_path, compile_workers=1, workers=1,
                            templates=("triton::mm",))
    device = probe_device("cpu")
    first = get_choices(make_problem(m=64, n=64, k=64, device="cpu", dtype="float16"), device, settings).choices[:2]
    second = get_choices(make_problem(m=64, n=64, k=64, device="cpu", dtype="float32"), device, settings).choices[:2]
    with LocalExecutor(device, settings) as executor:
        assert all(r.ok for r in _run_within(executor, first)["results"])
        (worker,) = executor.compilers
        os.kill(worker.process.pid, signal.SIGKILL)
        worker.process.join(60)
        box = _run_within(executor, second)
        assert "error" not in box, box.get("error")
        assert len(box["results"]) == 2 and all(r.ok for r in box["results"])
        assert executor.compile_pool._thread.is_alive()


def test_a_broken_pool_thread_fails_the_run_instead_of_hanging(tmp_path, monkeypatch):
    """Anything that goes wrong in the pool's thread fails the pool: waiters are told and
    the executor raises WorkerStartError (as for workers that cannot start)."""
    from autotune_cli.runner.compile_pool import CompilePool
    from autotune_cli.runner.executor import WorkerStartError

    def broken(self, worker):
        raise RuntimeError("planted")

    monkeypatch.setattr(CompilePool, "_receive", broken)
    settings = TuneSettings(device="cpu", cache_dir=tmp_path, compile_workers=1, workers=1,
                            templates=("triton::mm",))
    device = probe_device("cpu")
    choices = get_choices(make_problem(m=32, n=32, k=32, device="cpu"), device, settings).choices[:2]
    with LocalExecutor(device, settings) as executor:
        box = _run_within(executor, choices)
    assert isinstance(box.get("error"), WorkerStartError) and "planted" in str(box["error"])


def test_closed_pools_answer_at_once(tmp_path):
    """A shared pool closed under a run answers SKIPPED (tried again another time), never a
    compile error; an executor's own pool, closed with it, is made anew by the next run."""
    from autotune_cli.runner.compile_pool import CompilePool, compile_key
    from autotune_cli.runner.processes import worker_context

    settings = TuneSettings(device="cpu", cache_dir=tmp_path, compile_workers=1, workers=1,
                            templates=("triton::mm",))
    device = probe_device("cpu")
    choices = get_choices(make_problem(m=32, n=32, k=32, device="cpu"), device, settings).choices[:2]
    shared = CompilePool(worker_context(None, "cpu"), [device], 1, (), 60.0, 180.0, Switches())
    shared.close()
    answers = []
    shared.submit(compile_key(choices[0]), {}, object(), answers.append)
    assert answers and answers[0].closed and not answers[0].ok
    with LocalExecutor(device, settings, compile_pool=shared) as executor:
        results = _run_within(executor, choices)["results"]
    assert len(results) == len(choices) and {r.status for r in results} == {"skipped"}
    with LocalExecutor(device, settings) as executor:
        executor.close()
        results = _run_within(executor, choices)["results"]
        assert all(r.ok for r in results) and not executor.compile_pool.closed


def test_a_run_cut_short_leaves_nothing_for_the_next(tmp_path):
    """A run left by an exception (Ctrl-C in a listener, say) stops its busy timing workers:
    their results do not land in the next run under stale indices."""
    settings = TuneSettings(device="cpu", cache_dir=tmp_path, workers=2, templates=("triton::mm", "aten"))
    device = probe_device("cpu")
    choices = get_choices(make_problem(m=64, n=64, k=64, device="cpu", dtype="float16"), device, settings).choices
    assert len(choices) >= 3

    def interrupt(index, candidate):
        raise KeyboardInterrupt

    with LocalExecutor(device, settings) as executor:
        with pytest.raises(KeyboardInterrupt):
            executor.run(choices, interrupt)
        assert not any(w.state == "busy" for w in executor.timers)
        results = executor.run(choices[:1])
    assert len(results) == 1 and results[0].ok and results[0].uid == choices[0].uid


def _pool_answers(pool, choices, seconds=120):
    from autotune_cli.runner.compile_pool import compile_key

    settings = TuneSettings(device="cpu")
    answers = []
    for choice in choices:
        task = WorkerTask.for_choice(choice, COMPILE, 0, str(settings.kernel_dir), settings.measure.timing)
        pool.submit(compile_key(choice), task, object(), answers.append)
    deadline = time.monotonic() + seconds
    while len(answers) < len(choices) and time.monotonic() < deadline:
        time.sleep(0.05)
    return answers


def test_compile_processes_that_cannot_start(tmp_path, monkeypatch):
    """A process whose start raises is retried with a back-off while the others work; when
    none can start, every waiter is answered 'pool_failed' (nobody hangs)."""
    from autotune_cli.runner.compile_pool import CompilePool
    from autotune_cli.runner.processes import WorkerProcess, worker_context

    real_start = WorkerProcess.start
    device = probe_device("cpu")
    settings = TuneSettings(device="cpu", cache_dir=tmp_path, templates=("triton::mm",))
    choices = get_choices(make_problem(m=64, n=64, k=64, device="cpu", dtype="float16"), device, settings).choices[:2]

    pool = CompilePool(worker_context(None, "cpu"), [device], 2, (), 60.0, 180.0, Switches())
    broken = pool.workers[0]

    def start(self, timeout):
        if self is broken:
            raise OSError("planted: no process")
        return real_start(self, timeout)

    monkeypatch.setattr(WorkerProcess, "start", start)
    try:
        answers = _pool_answers(pool, choices)
    finally:
        pool.close()
    assert len(answers) == len(choices) and all(a.ok for a in answers)
    assert pool.failure is None

    def never(self, timeout):
        raise OSError("planted: no process")

    monkeypatch.setattr(WorkerProcess, "start", never)
    pool = CompilePool(worker_context(None, "cpu"), [device], 2, (), 60.0, 180.0, Switches())
    try:
        answers = _pool_answers(pool, choices, seconds=60)
    finally:
        pool.close()
    assert len(answers) == len(choices) and all(a.pool_failed for a in answers)
    assert "planted" in answers[0].error


def test_kernels_several_devices_wait_for_are_compiled_first(tmp_path):
    """Two devices' problems that share binaries: what the second asks for that the first
    asked for too jumps ahead of what only the first waits for (in the order the second
    asked); a third request for a job already ahead leaves the order as it is."""
    from autotune_cli.runner.compile_pool import CompilePool
    from autotune_cli.runner.processes import worker_context

    device = probe_device("cpu")
    pool = CompilePool(worker_context(None, "cpu"), [device], 0, (), 60.0, 180.0, Switches())  # no process pops
    first, second = object(), object()
    try:
        for key in ("a", "b", "c", "d"):
            pool.submit(key, {}, first, lambda payload: None)
        for key in ("d", "b", "e"):
            pool.submit(key, {}, second, lambda payload: None)
        pool.submit("b", {}, second, lambda payload: None)  # a third waiter: stays where it is
        with pool._lock:
            order = [pool._pop_job().key for _ in range(5)]
            assert pool._pop_job() is None
        assert order == ["d", "b", "a", "c", "e"]
        for key in ("x", "y"):  # both wait for x and y: ahead; then both withdraw
            pool.submit(key, {}, first, lambda payload: None)
            pool.submit(key, {}, second, lambda payload: None)
        pool.withdraw(first)
        with pool._lock:
            assert [job.key for job in pool._shared] == ["x", "y"]  # the second still waits
        pool.withdraw(second)
        with pool._lock:
            assert not pool._shared and not pool._queue and not {"x", "y"} & set(pool._jobs)
    finally:
        pool.close()
