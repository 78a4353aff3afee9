"""A finished result is never lost, and nothing outlives the command: results are saved as
they come, Ctrl-C and SIGTERM save them and say so (the same command resumes), screening
results never win, and kill -9 of the command takes its workers and their children along."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune_cli.store.cache import Cache
from autotune_cli.errors import Interrupted, Terminated
from autotune_cli.hardware.device import probe_device
from autotune_cli.problem import make_problem
from autotune_cli.store.results import BUDGET_RAN_OUT, Candidate
from autotune_cli.runner import Executor
from autotune_cli.settings import TuneSettings
from autotune_cli.tune.tuner import Tuner
from conftest import PLUGINS

PROBLEM = make_problem(m=16, n=16, k=16, device="cpu", dtype="float32")
FAULTY = str(PLUGINS / "faulty.py")
SLEEPY = str(PLUGINS / "sleepy.py")  # eight configs; the scripted executors never run them


def ok(choice, ms=1.0, runs=5):
    return Candidate(uid=choice.uid, params=choice.params, status="ok", ms=ms, p20=ms, p80=ms, runs=runs)


def all_ok(call, choices, on_result):
    for index, choice in enumerate(choices):
        on_result(index, ok(choice))
    return []


class ScriptedExecutor(Executor):
    """An executor whose every `run` call is a step function: step(call, choices, on_result)."""

    def __init__(self, step):
        self.step = step
        self.calls = []

    def run(self, choices, on_result=None, policy=None, deadline=None, shareable=False):
        self.calls.append(list(choices))
        return self.step(len(self.calls), list(choices), on_result)

    def close(self):
        pass


def tuner_with(tmp_path, step, **settings):
    executor = ScriptedExecutor(step)
    settings = TuneSettings(device="cpu", cache_dir=tmp_path, templates=("test::sleepy",), plugins=(SLEEPY,),
                            **settings)
    tuner = Tuner(settings, executor_factory=lambda device, s: executor, device=probe_device("cpu"))
    return tuner, executor


def partial_entry(tmp_path):
    entries = Cache(tmp_path).load()
    (entry,) = entries.values()
    return entry.to_dict()


def wait_for(predicate, seconds=30.0, every_s=0.05):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    return predicate()


def test_each_result_is_saved_soon_without_waiting_for_the_next(tmp_path):
    seen = {}

    def step(call, choices, on_result):
        if call == 1:
            on_result(0, ok(choices[0]))  # the first at once
            seen["first"] = wait_for(lambda: Cache(tmp_path).load() and
                                     len(partial_entry(tmp_path)["candidates"]) == 1)
            on_result(1, ok(choices[1], ms=2.0))  # the next soon after: saved by a timer, no third needed
            seen["second"] = wait_for(lambda: len(partial_entry(tmp_path)["candidates"]) == 2)
            seen["partial"] = partial_entry(tmp_path).get("partial")
            return []
        for index, choice in enumerate(choices):  # later rounds (the re-time): as they come
            on_result(index, ok(choice))
        return []

    tuner, _ = tuner_with(tmp_path, step)
    with tuner:
        outcome = tuner.tune(PROBLEM)
    assert seen == {"first": True, "second": True, "partial": True}
    assert outcome.winner is not None and "partial" not in partial_entry(tmp_path)


@pytest.mark.parametrize("signal_error, code, name", [(KeyboardInterrupt, 130, "SIGINT"),
                                                      (Terminated, 143, "SIGTERM")])
def test_an_interrupted_tune_saves_what_finished_and_says_so(tmp_path, signal_error, code, name):
    def step(call, choices, on_result):
        on_result(0, ok(choices[0]))
        on_result(1, ok(choices[1]))
        raise signal_error()

    tuner, _ = tuner_with(tmp_path, step)
    with tuner, pytest.raises(Interrupted) as raised:
        tuner.tune(PROBLEM)
    assert raised.value.code == code
    assert raised.value.message.startswith(f"interrupted ({name}): 2 finished result(s) of mm 16x16x16")
    assert "run the same command again to resume" in raised.value.message
    entry = partial_entry(tmp_path)
    assert entry["partial"] is True and len(entry["candidates"]) == 2


def test_screening_results_never_win_nor_survive_a_resume(tmp_path):
    """An exhaustive tune stopped after its screening round: the screened times are stored as
    skipped, and the resumed tune measures those candidates again, never taking them as won."""
    def interrupted(call, choices, on_result):
        if call == 1:  # the screening round
            for index, choice in enumerate(choices):
                on_result(index, ok(choice, ms=0.001 * (index + 1), runs=3))
            return [ok(c, runs=3) for c in choices]
        raise KeyboardInterrupt()

    tuner, _ = tuner_with(tmp_path, interrupted, search="exhaustive")
    with tuner, pytest.raises(Interrupted, match="nothing saved"):
        tuner.tune(PROBLEM)
    assert Cache(tmp_path).load() == {}  # as it says: no entry of no results stands in the cache

    tuner, executor = tuner_with(tmp_path, all_ok, search="exhaustive")
    with tuner:
        outcome = tuner.tune(PROBLEM)
    first = executor.calls[0]
    assert len(first) == 8  # every candidate screened again
    assert outcome.entry.resumed == 0 and outcome.winner is not None


def test_screening_results_never_win_when_the_budget_ends_the_screening(tmp_path):
    def screen_then_late(call, choices, on_result):
        assert call == 1  # no full timing after the budget ran out
        for index, choice in enumerate(choices):
            on_result(index, ok(choice, ms=0.001 * (index + 1), runs=3))
        time.sleep(1.5)  # the budget (1 s) runs out while screening
        return []

    tuner, _ = tuner_with(tmp_path, screen_then_late, search="exhaustive", budget_s=1.0)
    with tuner:
        outcome = tuner.tune(PROBLEM)
    assert outcome.winner is None
    statuses = {c.status for c in outcome.entry.candidates}
    assert statuses == {"skipped"}
    assert all("screened at" in c.error for c in outcome.entry.candidates)


def test_force_measures_everything_again(tmp_path):
    def failing(call, choices, on_result):
        for index, c in enumerate(choices):
            on_result(index, Candidate(uid=c.uid, params=c.params, status="compile_error", error="planted"))
        return []

    tuner, _ = tuner_with(tmp_path, failing)
    with tuner:
        assert tuner.tune(PROBLEM).winner is None
    tuner, executor = tuner_with(tmp_path, all_ok, force=True)
    with tuner:
        outcome = tuner.tune(PROBLEM)
    assert outcome.winner is not None and outcome.entry.resumed == 0
    assert len(executor.calls[0]) == len(outcome.entry.candidates)


# -- the command, as a user stops it --------------------------------------------------------

def descendants(pid):
    """Every process below `pid` (through /proc), pids only."""
    children = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def maps(pid):
    try:
        return Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return ""


def command_line(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


HUNG_TUNE = ["--device", "cpu", "--json", "--plugin", FAULTY, "--templates", "test::good,test::hang_child",
             "--workers", "1"]


def start_until_hung(mm_args, cache_dir, what):
    """`autotune mm` with `mm_args` (over FAULTY's good and hanging templates), run until the
    good candidate is saved and the hanging one's child has started: (process, its
    arguments, its environment, the processes below it)."""
    args = [sys.executable, "-m", "autotune_cli", "mm", *mm_args, *HUNG_TUNE]
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": str(cache_dir)}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cache_file = cache_dir / "autotune-cache.json"

    def hanging():
        if not (cache_file.exists() and "test::good" in cache_file.read_text()):
            return None
        below = descendants(proc.pid)
        return below if any(command_line(p).startswith("sleep 3600") for p in below) else None

    below = wait_for(hanging, 120)
    assert below, f"the {what} never reached its hanging candidate"
    return proc, args, env, below


def start_hung_tune(cache_dir, timeout):
    return start_until_hung(["--m", "16", "--n", "16", "--k", "16", "--timeout", str(timeout)], cache_dir, "tune")


def test_kill_9_of_the_command_takes_every_process_it_started(tmp_path):
    proc, _, _, below = start_hung_tune(tmp_path / "cache", timeout=300)
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        left = wait_for(lambda: not any(alive(p) for p in below), 20)
        assert left, [command_line(p) for p in below if alive(p)]
    finally:
        for pid in below:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    entry = partial_entry(tmp_path / "cache")  # the result that finished was saved before the kill
    assert entry["partial"] is True and [c["uid"] for c in entry["candidates"]] == ["test::good"]


@pytest.mark.slow
def test_sigterm_saves_says_so_exits_143_and_the_same_command_resumes(tmp_path):
    cache_dir = tmp_path / "cache"
    proc, args, env, below = start_hung_tune(cache_dir, timeout=4)
    try:
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert wait_for(lambda: not any(alive(p) for p in below), 20)
    finally:
        for pid in below:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 143, err
    lines = [line for line in err.splitlines() if line.startswith("autotune:")]
    assert len(lines) == 1 and "interrupted (SIGTERM): 1 finished result(s)" in lines[0], err
    assert "run the same command again to resume" in lines[0] and "Traceback" not in err
    assert out == ""
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "resuming an interrupted tune of mm 16x16x16" in done.stderr
    doc = json.loads(done.stdout)
    assert doc["winner"]["uid"] == "test::good"
    statuses = {c["uid"]: c["status"] for c in doc["candidates"]}
    assert statuses == {"test::good": "ok", "test::hang_child": "timeout"}


def test_the_budget_bounds_the_listing_of_configs(tmp_path):
    """A heuristic that offers configs without end (plugins/endless.py: up to 100 000, a
    millisecond each): --budget ends the listing, and what it reached is accounted for."""
    from autotune_cli.tune.tuner import TuneListener

    notices = []

    class Listener(TuneListener):
        def notice(self, message):
            notices.append(message)

    def past_deadline(call, choices, on_result):
        for index, choice in enumerate(choices):
            on_result(index, Candidate(uid=choice.uid, params=choice.params, status="skipped",
                                       error=BUDGET_RAN_OUT))
        return []

    executor = ScriptedExecutor(past_deadline)
    settings = TuneSettings(device="cpu", cache_dir=tmp_path, templates=("test::endless",),
                            plugins=(str(PLUGINS / "endless.py"),), budget_s=1.0)
    with Tuner(settings, Listener(), executor_factory=lambda device, s: executor,
               device=probe_device("cpu")) as tuner:
        outcome = tuner.tune(PROBLEM)
    considered = outcome.entry.considered
    assert 0 < considered < 100_000
    assert any(n.startswith("the tuning budget ran out while listing configs") for n in notices), notices
    assert len(outcome.entry.candidates) == considered and outcome.winner is None


DAEMONIZING = str(PLUGINS / "daemonizing.py")


def test_what_a_kernel_leaves_outside_its_group_does_not_outlive_the_command(tmp_path):
    """A kernel's processes in their own group, in a new session and orphaned by a double
    fork all go with the command; none holds its output open after it exits."""
    pids_file = tmp_path / "pids"
    args = [sys.executable, "-m", "autotune_cli", "mm", "--device", "cpu", "--json", "--m", "16", "--n", "16",
            "--k", "16", "--plugin", DAEMONIZING, "--templates", "test::daemonizing", "--workers", "1"]
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": str(tmp_path / "cache"), "AUTOTUNE_TEST_PIDS": str(pids_file)}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    left = []
    try:
        proc.wait(timeout=180)
        left = [int(word) for word in pids_file.read_text().split()]
        assert len(left) == 3
        assert wait_for(lambda: not any(alive(p) for p in left), 20), [command_line(p) for p in left if alive(p)]
        out, err = proc.communicate(timeout=30)  # nothing holds the pipes open
    finally:
        for pid in left:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert json.loads(out)["winner"]["uid"] == "test::daemonizing"


def start_hung_list(tmp_path):
    """`mm --from` over two problems whose first hangs in its second candidate, once the
    first candidate's result is saved."""
    listing = tmp_path / "list.json"
    listing.write_text(json.dumps([{"m": 16, "n": 16, "k": 16, "dtype": "float32"},
                                   {"m": 24, "n": 16, "k": 16, "dtype": "float32"}]))
    proc, _, _, below = start_until_hung(["--from", str(listing)], tmp_path / "cache", "list")
    return proc, below


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "SIGINT"])
def test_a_stopped_list_says_what_it_saved_and_exits_by_its_signal(tmp_path, signum, code):
    proc, below = start_hung_list(tmp_path)
    try:
        os.kill(proc.pid, signum)
        out, err = proc.communicate(timeout=60)
        assert wait_for(lambda: not any(alive(p) for p in below), 20)
    finally:
        for pid in below:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert proc.returncode == code, err
    lines = [line for line in err.splitlines() if line.startswith("autotune:")]
    name = signal.Signals(signum).name
    assert len(lines) == 1, err
    assert lines[0].startswith(f"autotune: interrupted ({name}): 0 of 2 problem(s) of the list done and saved; "
                               "1 finished result(s) of mm 16x16x16 float32 nn saved"), lines[0]
    assert "run the same command again to resume" in lines[0] and "Traceback" not in err
    assert out == ""


def test_ctrl_c_while_the_forkserver_preloads_prints_one_line_at_most(tmp_path):
    """A terminal's Ctrl-C goes to the whole process group: the forkserver, still importing
    torch, shares it and must ignore it (no traceback of its own); the command alone says so."""
    args = [sys.executable, "-m", "autotune_cli", "mm", "--m", "64", "--n", "48", "--k", "32", "--device", "cpu"]
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "80"}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)

    def importing_torch():  # the server has loaded torch's library: its Python imports follow (a second)
        return [p for p in descendants(proc.pid) if "forkserver" in command_line(p) and "libtorch" in maps(p)]

    try:
        server = wait_for(importing_torch, 60, every_s=0.005)
        assert server, "the command started no forkserver"
        os.kill(server[0], signal.SIGINT)  # the server's share of a Ctrl-C, alone: it must live on
        time.sleep(0.3)
        assert alive(server[0]) or proc.poll() is not None
        os.killpg(proc.pid, signal.SIGINT)  # the Ctrl-C as the terminal sends it
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert len(err.strip().splitlines()) <= 1, err
    assert out == ""


def _sigint_handler(queue):
    import signal

    queue.put(repr(signal.getsignal(signal.SIGINT)))


def test_a_forkserver_child_of_the_users_own_takes_ctrl_c_as_before():
    """The forkserver autotune starts is the process's one: a child the user's program forks
    from it (a DataLoader worker) starts with Python's own SIGINT handler, not the one the
    server's preload ran under."""
    import multiprocessing

    from autotune_cli.runner import processes

    processes.worker_context(None, "cpu")  # what a tune does first
    try:
        ctx = multiprocessing.get_context("forkserver")
        queue = ctx.Queue()
        child = ctx.Process(target=_sigint_handler, args=(queue,))
        child.start()
        handler = queue.get(timeout=120)
        child.join(60)
    finally:
        processes.stop_forkserver()
    assert handler == repr(signal.default_int_handler)
