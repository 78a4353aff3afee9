"""`--executor ray` under faults: what an actor measured reaches the driver's cache as it is
measured (a kill -9 of the driver, or of a busy actor, loses nothing reported; a re-queued
problem resumes from it); a dead worker's Ray error line never reaches stdout (--json stays
parseable); a --ray-address that cannot be joined is one line and exit 2, at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
# under xdist one process runs all the Ray tests (--dist loadgroup): one local cluster at a time
pytestmark = pytest.mark.xdist_group("ray")
torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

from conftest import PLUGINS  # noqa: E402
from helpers_ray import local_ray  # noqa: E402
from autotune_cli.store.cache import Cache  # noqa: E402
from autotune_cli.problem import make_problem  # noqa: E402
from autotune_cli.settings import TuneSettings  # noqa: E402

SLEEPY = str(PLUGINS / "sleepy.py")
SLEEP = "0.05"  # seconds per run of a sleepy config: a problem takes seconds, a result comes often
AUTOTUNE = [sys.executable, "-m", "autotune_cli"]


@pytest.fixture(scope="module")
def cluster():
    with local_ray(SLEEP):
        yield


class ThreeLinears(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 24, bias=False)
        self.b = nn.Linear(24, 32, bias=False)
        self.c = nn.Linear(32, 40, bias=False)

    def forward(self, x):
        return self.c(self.b(self.a(x)))


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("model") / "three.pt2"
    torch.export.save(torch.export.export(ThreeLinears().eval(), (torch.randn(8, 16),)), str(path))
    return path


def actor_pids(tuner) -> list[int]:
    return ray.get([actor.__ray_call__.remote(lambda self: os.getpid()) for actor in tuner.actors])


@pytest.mark.slow
def test_json_stdout_stays_clean_when_an_actor_process_dies(cli, cache_dir, cluster, model_path,
                                                            monkeypatch, capsys):
    from autotune_cli.scaleout.ray import RayTuner

    killed, reported = {}, set()
    tune_all = RayTuner.tune_all

    def tune_all_killing_one(self, problems, on_result=None):
        pids = actor_pids(self)

        def kill_one_busy_again():
            # an actor that reported before and is busy again: its next problem has started
            # (one busy with its first may have finished it already), and its process dies
            for slot, index in self.in_flight.values():
                if not killed and slot in reported:
                    killed.update(slot=slot, index=index)
                    os.kill(pids[slot], signal.SIGKILL)

        def hook(result):
            if on_result is not None:
                on_result(result)
            if result.outcome is not None:
                reported.add(result.slot)
                kill_one_busy_again()

        put = self.cache.put

        def put_then_look(key, entry):  # also at each partial entry: the next problem under way
            put(key, entry)
            kill_one_busy_again()

        self.cache.put = put_then_look
        return tune_all(self, problems, hook)

    monkeypatch.setattr(RayTuner, "tune_all", tune_all_killing_one)
    code, out, err = cli("model", model_path, "--device", "cpu", "--executor", "ray",
                         "--templates", "test::sleepy", "--plugin", SLEEPY, "--json")
    assert killed, "no actor was busy again after reporting"
    # Ray reports the dead worker from a thread of its own, maybe after the command: wait for it
    waited = time.monotonic() + 30
    while "(raylet)" not in out + err and time.monotonic() < waited:
        time.sleep(0.2)
        more = capsys.readouterr()
        out, err = out + more.out, err + more.err
    assert "(raylet)" not in out
    assert "(raylet)" in err  # said, where the progress goes
    rows = json.loads(out)["problems"]
    assert code == 0, err
    assert len(rows) == 3 and all(r["winner"] is not None for r in rows)
    assert rows[killed["index"]]["slot"] != killed["slot"]  # the survivor tuned it


def tune_beside_a_killer(tmp_path, todo, watch):
    """RayTuner's tune of `todo` (the sleepy template, into the cache at `tmp_path`) while
    `watch(tuner, pids, stop)` runs in a thread beside it, killing actors as it sees fit
    until `stop` is set; the results."""
    from autotune_cli.scaleout.ray import RayTuner

    settings = TuneSettings(device="cpu", cache_dir=tmp_path, templates=("test::sleepy",),
                            plugins=(SLEEPY,), gpus=0, executor="ray")
    stop = threading.Event()
    with RayTuner(settings) as tuner:
        watcher = threading.Thread(target=watch, args=(tuner, actor_pids(tuner), stop), daemon=True)
        watcher.start()
        try:
            return tuner.tune_all(todo)
        finally:
            stop.set()
            watcher.join()


@pytest.mark.slow
def test_what_a_killed_actor_measured_is_kept_and_resumed(tmp_path, cluster):
    todo = [make_problem(m=8, n=8 * (i + 1), k=8, device="cpu", dtype="float32") for i in range(2)]
    seen: dict = {}

    def watch(tuner, pids, stop):
        # the first partial entry in the driver's cache: kill the actor still measuring it
        while not stop.is_set():
            partial = {k: e for k, e in Cache(tmp_path).load().items() if e.partial}
            for slot, index in list(getattr(tuner, "in_flight", {}).values()):
                key = next((k for k, e in partial.items() if e.problem == todo[index]), None)
                if key is not None and partial[key].candidates:
                    seen.update(slot=slot, index=index, key=key, measured=len(partial[key].candidates))
                    os.kill(pids[slot], signal.SIGKILL)
                    return
            time.sleep(0.05)

    results = tune_beside_a_killer(tmp_path, todo, watch)
    assert seen, "no partial entry reached the driver's cache while its problem was measured"
    assert all(r.ok for r in results), [r.error for r in results]
    requeued = results[seen["index"]]
    assert requeued.attempts == 2 and requeued.slot != seen["slot"]
    entries = Cache(tmp_path).load()
    assert {r.outcome.key for r in results} == set(entries)
    final = entries[seen["key"]]
    assert not final.partial and final.winner is not None
    assert final.resumed >= seen["measured"] >= 1  # the survivor kept what the dead actor measured


def test_with_every_actor_dead_each_problem_fails_in_one_line_and_what_was_measured_stays(tmp_path, cluster):
    todo = [make_problem(m=8, n=8 * (i + 1), k=8, device="cpu", dtype="float32") for i in range(3)]
    seen: dict = {}

    def watch(tuner, pids, stop):
        # each actor dies once the driver holds a partial entry of the problem it measures
        while not stop.is_set() and len(seen) < len(pids):
            partial = {e.problem: e for e in Cache(tmp_path).load().values() if e.partial}
            for slot, index in list(getattr(tuner, "in_flight", {}).values()):
                entry = partial.get(todo[index])
                if slot not in seen and entry is not None and entry.candidates:
                    seen[slot] = (todo[index], {c.identity for c in entry.candidates})
                    os.kill(pids[slot], signal.SIGKILL)
            time.sleep(0.05)

    results = tune_beside_a_killer(tmp_path, todo, watch)
    assert len(seen) == 2, "the driver's cache held no partial entry of a problem being measured"
    assert not any(r.ok for r in results)
    for result in results:  # each failure named, in one line
        assert result.error and "\n" not in result.error and "actor" in result.error, result.error
    entries = {e.problem: e for e in Cache(tmp_path).load().values()}
    for problem, measured in seen.values():  # what each dead actor had reported is still stored
        assert entries[problem].partial
        assert measured <= {c.identity for c in entries[problem].candidates}


def test_a_driver_killed_by_sigkill_keeps_what_the_actors_measured(tmp_path, model_path):
    cache = tmp_path / "cache"
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": str(cache), "AUTOTUNE_TEST_SLEEP": SLEEP}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen(AUTOTUNE + ["model", str(model_path), "--device", "cpu", "--executor", "ray",
                                        "--templates", "test::sleepy", "--plugin", SLEEPY, "--json"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    first: dict = {}
    try:
        waited = time.monotonic() + 240
        while not first and proc.poll() is None and time.monotonic() < waited:
            time.sleep(0.1)
            if (cache / "autotune-cache.json").exists():
                first = Cache(cache).load()
        os.kill(proc.pid, signal.SIGKILL)  # the driver only, as a user's kill -9 does
        proc.wait(timeout=30)
    finally:
        try:  # what it started (Ray's local cluster) goes too
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.stderr.close()
    assert first, "nothing reached the cache"
    # the driver stored the actors' results while their problems were still being measured
    assert any(e.partial and e.candidates for e in first.values()), \
        {k: e.partial for k, e in first.items()}
    after = Cache(cache).load()
    for key, entry in first.items():
        kept = after[key]
        assert {c.identity for c in entry.candidates} <= {c.identity for c in kept.candidates}
        assert all(c.uid == "test::sleepy" for c in kept.candidates)


@pytest.mark.parametrize("address", ["127.0.0.1:1", "no-port-here", "127.0.0.1:99999", "http://127.0.0.1:1"])
def test_a_ray_address_that_cannot_be_joined_is_one_line(address, tmp_path, model_path):
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("RAY_ADDRESS", None)
    # today's failure was a hang of minutes: the bound is far above what the refusal takes
    proc = subprocess.run(AUTOTUNE + ["model", str(model_path), "--device", "cpu", "--executor", "ray",
                                      "--templates", "aten", "--json", "--ray-address", address],
                          env=env, capture_output=True, text=True, timeout=90)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("autotune: error: --ray-address"), lines[-5:]
    assert proc.stdout == ""
    assert not (tmp_path / "cache" / "autotune-cache.json").exists()


def test_a_running_ray_heads_address_passes_the_check(cluster):
    """The check before joining (scaleout/ray.check_address: the port answers as gRPC)
    passes a real Ray head's address."""
    from autotune_cli.scaleout.ray import check_address

    check_address(ray.get_runtime_context().gcs_address)
