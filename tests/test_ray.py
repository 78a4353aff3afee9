"""`--executor ray` on a local Ray cluster of two CPUs: `--device cpu` actors (num_cpus=1)
tune a saved model into the driver's cache; an actor killed mid-run loses nothing it
reported, and its unfinished problem is tuned by the survivor."""

from __future__ import annotations

import json

import pytest

ray = pytest.importorskip("ray")
# under xdist one process runs all the Ray tests (--dist loadgroup): one local cluster at a time
pytestmark = pytest.mark.xdist_group("ray")
torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

from conftest import PLUGINS  # noqa: E402
from helpers_ray import local_ray  # noqa: E402
from autotune_cli.store.cache import Cache  # noqa: E402
from autotune_cli.hardware.device import probe_device  # noqa: E402
from autotune_cli.problem import make_problem  # noqa: E402
from autotune_cli.settings import TuneSettings  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    with local_ray("0.05"):
        yield


class ThreeLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 24, bias=False)
        self.b = nn.Linear(24, 32)
        self.c = nn.Linear(32, 16, bias=False)

    def forward(self, x):
        return self.c(torch.relu(self.b(self.a(x))))


def test_model_on_ray_actors_into_the_drivers_cache(cli, cache_dir, cluster, tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "three.pt2"
    torch.export.save(torch.export.export(ThreeLayers().eval(), (torch.randn(4, 16),)), str(path))
    args = ("model", path, "--device", "cpu", "--executor", "ray", "--templates", "aten", "--json")
    code, out, err = cli(*args)
    assert code == 0, err
    rows = json.loads(out)["problems"]
    assert len(rows) == 3
    entries = Cache(cache_dir).load()
    assert set(entries) == {r["key"] for r in rows}
    cpu = probe_device("cpu").name
    for row in rows:
        assert row["winner"] is not None and not row["from_cache"]
        assert row["slot"] in (0, 1) and row["host"] and row["device"] == cpu
        entry = entries[row["key"]]
        assert entry.winner.to_dict() == row["winner"]
        assert entry.device_name == cpu
        assert row["key"].endswith("@" + entry.fingerprint_digest)
    # again: the actors find every problem in the entries the driver sends; nothing changes
    before = Cache(cache_dir).load()
    code, out, err = cli(*args)
    assert code == 0, err
    again = json.loads(out)["problems"]
    assert all(r["from_cache"] for r in again) and err.count("cached:") == 3
    assert [r["winner"] for r in again] == [r["winner"] for r in rows]
    assert Cache(cache_dir).load() == before


@pytest.mark.slow
def test_an_actor_killed_mid_run_loses_nothing(tmp_path, cluster):
    from autotune_cli.scaleout.ray import RayTuner

    plugin = str(PLUGINS / "sleepy.py")
    settings = TuneSettings(device="cpu", cache_dir=tmp_path, templates=("test::sleepy",),
                            plugins=(plugin,), gpus=0, executor="ray")
    todo = [make_problem(m=8, n=8 * (i + 1), k=8, device="cpu", dtype="float32") for i in range(5)]
    reported, killed = [], {}

    with RayTuner(settings) as tuner:
        assert len(tuner.actors) == 2

        def on_result(result):
            reported.append(result)
            if killed or result.outcome is None:
                return
            done_by = {r.slot for r in reported if r.outcome is not None}
            for slot, index in tuner.in_flight.values():
                if slot in done_by:  # it reported already and is busy again: kill it now
                    killed.update(slot=slot, index=index,
                                  stored=[r.outcome.key for r in reported if r.slot == slot])
                    ray.kill(tuner.actors[slot], no_restart=True)
                    return

        results = tuner.tune_all(todo, on_result=on_result)
    assert killed, "no actor was busy after reporting"
    assert all(r.ok for r in results), [r.error for r in results]
    entries = Cache(tmp_path).load()
    assert {r.outcome.key for r in results} == set(entries)
    assert set(killed["stored"]) <= set(entries)  # what the dead actor reported is kept
    requeued = results[killed["index"]]
    assert requeued.attempts == 2 and requeued.slot != killed["slot"]
    survivors = {r.slot for r in results if r.index != killed["index"]} | {requeued.slot}
    assert killed["slot"] in {r.slot for r in reported}
    assert all(entries[r.outcome.key].winner.uid == "test::sleepy" for r in results)
    assert len(survivors) >= 1
