"""On a host with two GPU models, the Python API looks a problem's winner up under the
fingerprint of the GPU its operands are on, not always GPU 0's."""

import dataclasses

import pytest

from autotune_cli.api.lookup import WinnerLookup
from autotune_cli.problem import make_problem
from autotune_cli.store.cache import Cache
from autotune_cli.store.entry import Entry, Winner, key_for
from autotune_cli.store.results import Candidate
from autotune_cli.tune.hits import fingerprint_for
from helpers_devices import A100, H200

GPUS = [H200, dataclasses.replace(A100, index=1)]


@pytest.fixture
def two_gpu_models(monkeypatch):
    import autotune_cli.hardware.device as device

    probed = []

    def probe(device_type, index=0, **_):
        probed.append((device_type, index))
        return GPUS[index]

    monkeypatch.setattr(device, "probe_device", probe)
    monkeypatch.setattr(device, "cuda_available", lambda: True)
    return probed


def test_each_gpu_finds_the_entry_tuned_on_its_own_model(tmp_path, two_gpu_models):
    problem = make_problem(m=64, n=64, k=64, dtype="float16", device="cuda")
    fingerprint = fingerprint_for(problem, GPUS[1], ("aten",))
    key = key_for(problem, fingerprint.digest())
    entry = Entry(problem=problem, fingerprint=fingerprint.to_dict(), fingerprint_digest=fingerprint.digest(),
                  winner=Winner(uid="aten::mm", params={}, ms=0.01, tflops=1.0),
                  candidates=(Candidate("aten::mm", {}, "ok", ms=0.01),))  # a winner is one of its results
    Cache(tmp_path).put(key, entry)
    lookup = WinnerLookup(lambda: tmp_path)
    assert lookup.find(problem, index=1)[0] == key  # the A100's entry, on the A100
    assert lookup.find(problem, index=0) is None  # the H200 beside it has none
    assert lookup.find(problem, ("aten",), 1)[0] == key
    assert lookup.find(problem, ("aten",), 0) is None
    assert sorted(set(two_gpu_models)) == [("cuda", 0), ("cuda", 1)]  # each GPU probed once
