"""Scale out on one host, on the CPU: two CPU worker groups stand in for two GPUs.

Problems are spread over the devices, every result carries the fingerprint of the device
that measured it, a device that is lost hands its problem back to the survivors, and the
local path never imports Ray.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

from autotune_cli.runner import Executor  # noqa: E402
from autotune_cli.runner.executor import LocalExecutor, WorkerStartError  # noqa: E402
from autotune_cli.store.cache import Cache  # noqa: E402
from autotune_cli.store.entry import CacheKey  # noqa: E402
from autotune_cli.errors import UserError  # noqa: E402
from autotune_cli.hardware.device import probe_device  # noqa: E402
from autotune_cli.problem import make_problem  # noqa: E402
from autotune_cli.scaleout.common import parse_gpus  # noqa: E402
from autotune_cli.scaleout.local import MultiDeviceTuner, candidate_count, schedule_order  # noqa: E402
from autotune_cli.settings import TuneSettings  # noqa: E402


class FourLayers(nn.Module):
    """Four distinct mm problems."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 24, bias=False)
        self.b = nn.Linear(24, 32, bias=False)
        self.c = nn.Linear(32, 40, bias=False)
        self.d = nn.Linear(40, 16, bias=False)

    def forward(self, x):
        return self.d(self.c(self.b(self.a(x))))


@pytest.fixture(scope="module")
def four_layers(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("scale") / "four.pt2"
    model = FourLayers().eval()
    torch.export.save(torch.export.export(model, (torch.randn(8, 16),)), str(path))
    return path


def problems(count=4):
    return [make_problem(m=8, n=8 * (i + 2), k=16, device="cpu", dtype="float32") for i in range(count)]


def aten_settings(tmp_path, **fields):
    return TuneSettings(device="cpu", cache_dir=tmp_path, templates=("aten",), workers=2, **fields)


def test_parse_gpus():
    assert parse_gpus(None) == 1 and parse_gpus("3") == 3 and parse_gpus("all") == 0
    for bad in ("0", "-1", "two", ""):
        with pytest.raises(UserError):
            parse_gpus(bad)


def test_model_on_two_cpu_groups_without_ray(cache_dir, four_layers):
    """`--gpus 2` on the CPU: both groups tune, every problem is cached, Ray stays out."""
    code = (
        "import sys\n"
        "from autotune_cli.cli import main\n"
        f"rc = main(['model', {str(four_layers)!r}, '--device', 'cpu', '--gpus', '2',\n"
        "            '--templates', 'aten', '--workers', '2', '--json'])\n"
        "assert 'ray' not in sys.modules, 'the local path imported ray'\n"
        "sys.exit(rc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "AUTOTUNE_CACHE_DIR": str(cache_dir)})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    rows = doc["problems"]
    assert len(rows) == 4 and len({r["key"] for r in rows}) == 4
    assert {r["slot"] for r in rows} == {0, 1}  # both devices were used
    entries = Cache(cache_dir).load()
    cpu = probe_device("cpu").name
    for row in rows:
        assert row["winner"] is not None and not row["from_cache"] and row["device"] == cpu
        assert entries[row["key"]].winner.to_dict() == row["winner"]
    assert proc.stderr.count("tuned:") == 4


def test_each_result_carries_its_devices_fingerprint(tmp_path):
    """Devices with different names never share an entry: each result is stored under the
    fingerprint of the device that measured it."""
    cpu = probe_device("cpu")
    devices = [replace(cpu, name="cpu-A", index=0), replace(cpu, name="cpu-B", index=1)]
    settings = aten_settings(tmp_path)
    seen = []
    with MultiDeviceTuner(settings, devices=devices) as tuner:
        results = tuner.tune_all(problems(4), on_result=seen.append)
    assert len(seen) == 4 and all(r.ok for r in results)
    assert {r.slot for r in results} == {0, 1}
    entries = Cache(tmp_path).load()
    digests = {}
    for result in results:
        device = devices[result.slot]
        entry = entries[result.outcome.key]
        assert result.device == device.name == entry.device_name
        fingerprint = tuner.tuners[result.slot].fingerprint(result.problem)
        assert result.outcome.key == str(CacheKey(result.problem.key(), fingerprint.digest()))
        digests.setdefault(device.name, set()).add(entry.machine)
    assert len(digests["cpu-A"] | digests["cpu-B"]) == 2  # one machine digest per device name


def test_devices_of_one_model_share_one_compile_pool(tmp_path):
    """Two devices of one name share one compile pool, which builds each kernel once for the
    problems of both (same kernels: the problems differ only in N); a device of another
    name gets its own pool."""
    cpu = probe_device("cpu")
    same = [replace(cpu, index=0), replace(cpu, index=1)]
    settings = TuneSettings(device="cpu", cache_dir=tmp_path, compile_workers=2, workers=2,
                            templates=("triton::mm",))
    probs = [make_problem(m=32, n=n, k=32, device="cpu", dtype="float16") for n in (64, 80, 96, 112)]
    with MultiDeviceTuner(settings, devices=same) as tuner:
        assert len(tuner.pools) == 1
        (pool,) = tuner.pools.values()
        assert all(t.executor.compile_pool is pool for t in tuner.tuners)
        results = tuner.tune_all(probs)
    assert all(r.ok for r in results) and {r.slot for r in results} == {0, 1}
    kernels = len(results[0].outcome.entry.candidates)
    assert kernels >= 2 and pool.compiled == kernels  # once for all four problems
    assert all(not w.process for w in pool.workers)  # the tuner closed its pool
    other = [replace(cpu, name="cpu-A", index=0), replace(cpu, name="cpu-B", index=1)]
    with MultiDeviceTuner(settings, devices=other) as tuner:
        assert len(tuner.pools) == 2


class LostDevice(Executor):
    """An executor whose workers cannot be started: the device is gone."""

    def __init__(self, device, settings):
        self.runs = 0

    def run(self, choices, on_result=None, policy=None, deadline=None, shareable=False):
        self.runs += 1
        time.sleep(0.2)
        raise WorkerStartError("benchmark worker failed to start: planted")

    def close(self):
        pass


def test_a_lost_device_hands_its_problem_to_the_survivor(tmp_path):
    cpu = probe_device("cpu")
    devices = [replace(cpu, index=0), replace(cpu, index=1)]

    def factory(device, settings):
        return LostDevice(device, settings) if device.index == 1 else LocalExecutor(device, settings)

    with MultiDeviceTuner(aten_settings(tmp_path), devices=devices, executor_factory=factory) as tuner:
        results = tuner.tune_all(problems(4))
    assert all(r.ok for r in results), [r.error for r in results]
    assert {r.slot for r in results} == {0}
    assert sorted(r.attempts for r in results) == [1, 1, 1, 2]  # one was re-queued
    assert tuner.alive == [True, False] and "planted" in tuner.slot_errors[1]
    entries = Cache(tmp_path).load()
    assert {r.outcome.key for r in results} <= set(entries)


class InterruptsAfterFirst(Executor):
    """Measures nothing real. The first run finishes; the next waits until the first problem
    is reported tuned (and so saved), then Ctrl-C reaches the main thread (as a signal does),
    and that run ends when the stop closes its workers, as a worker's closed pipe ends one.
    Every step waits on the one before it: no sleep decides the order."""

    lock = threading.Lock()
    calls = 0
    first_reported = threading.Event()
    interrupted_run_ended = threading.Event()

    def __init__(self, device, settings):
        self.device = device
        self.closed = threading.Event()

    @classmethod
    def reset(cls) -> None:
        cls.calls = 0
        cls.first_reported.clear()
        cls.interrupted_run_ended.clear()

    def run(self, choices, on_result=None, policy=None, deadline=None, shareable=False):
        import _thread
        from autotune_cli.store.results import Candidate

        with InterruptsAfterFirst.lock:
            InterruptsAfterFirst.calls += 1
            call = InterruptsAfterFirst.calls
        if call > 1:
            try:
                assert InterruptsAfterFirst.first_reported.wait(timeout=120), "the first problem never finished"
                _thread.interrupt_main()
                assert self.closed.wait(timeout=120), "the stop never closed the workers"
                raise EOFError("the workers were closed")
            finally:
                InterruptsAfterFirst.interrupted_run_ended.set()
        results = [Candidate(uid=c.uid, params=c.params, status="ok", ms=1.0 + i, p20=1.0 + i, p80=1.0 + i,
                             runs=5) for i, c in enumerate(choices)]
        for i, result in enumerate(results):
            if on_result is not None:
                on_result(i, result)
        return results

    def close(self):
        self.closed.set()


def test_ctrl_c_over_several_devices_says_what_was_saved(tmp_path):
    """Deterministic whichever device takes which problem and wherever the main thread is
    when Ctrl-C lands (starting the threads or waiting on them): the interrupt comes only
    once the first problem is reported, and the interrupted run ends at the stop."""
    import signal

    from autotune_cli.errors import Interrupted

    InterruptsAfterFirst.reset()
    reported = []

    def on_result(result):
        if result.outcome is not None:
            reported.append(result.outcome.key)
            InterruptsAfterFirst.first_reported.set()

    cpu = probe_device("cpu")
    devices = [replace(cpu, index=0), replace(cpu, index=1)]
    settings = aten_settings(tmp_path)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as Python's own
    try:
        with MultiDeviceTuner(settings, devices=devices, executor_factory=InterruptsAfterFirst) as tuner:
            with pytest.raises(Interrupted) as raised:
                tuner.tune_all(problems(1) + problems(2)[1:], on_result=on_result)
    finally:
        signal.signal(signal.SIGINT, before)
    assert InterruptsAfterFirst.interrupted_run_ended.wait(timeout=120)
    assert raised.value.code == 130
    message = raised.value.message
    assert message.startswith("interrupted (SIGINT): 1 of 2 problem(s) tuned and saved"), message
    assert "run the same command again to resume" in message
    assert len(reported) == 1 and set(Cache(tmp_path).load()) == set(reported)


def test_every_device_lost_reports_every_problem_failed(tmp_path):
    cpu = probe_device("cpu")
    devices = [replace(cpu, index=0), replace(cpu, index=1)]
    with MultiDeviceTuner(aten_settings(tmp_path), devices=devices, executor_factory=LostDevice) as tuner:
        results = tuner.tune_all(problems(3))
    assert not any(r.ok for r in results)
    assert all(r.error and "planted" in r.error for r in results), [r.error for r in results]
    assert not (tmp_path / "autotune-cache.json").exists()


def test_bad_scale_options_are_one_line_errors(cli, cache_dir, four_layers, monkeypatch):
    code, out, err = cli("model", four_layers, "--device", "cpu", "--gpus", "zero")
    assert code == 2 and "--gpus takes a positive count or 'all'" in err and out == ""
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    code, out, err = cli("model", four_layers, "--device", "cpu", "--executor", "ray")
    assert code == 2 and "pip install 'gemm-autotune[ray]'" in err and out == ""
    assert not (cache_dir / "autotune-cache.json").exists()



def test_several_devices_take_the_most_work_first(tmp_path):
    """On several devices the problem with the most candidates goes first (ties in the
    model's order), so the last ones handed out are short; on one device the model's order
    stays. The work is the candidate count, not the size: on the H200 a tune's time goes
    with how many candidates it times."""
    sizes = [(256, 1024, 4096), (256, 14336, 4096), (256, 4096, 4096), (256, 4096, 4096), (16, 64, 64)]
    probs = [make_problem(m=m, n=n, k=k, device="cpu", dtype="float16") for m, n, k in sizes]
    work = {p.key(): w for p, w in zip(probs, (5, 9, 7, 7, 1))}
    assert schedule_order(probs, 1, lambda p: work[p.key()]) == [0, 1, 2, 3, 4]
    assert schedule_order(probs, 2, lambda p: work[p.key()]) == [1, 2, 3, 0, 4]
    settings = TuneSettings(device="cpu", cache_dir=tmp_path, templates=("aten", "triton::mm"))
    counted = candidate_count(settings, probe_device("cpu"))
    small = [make_problem(m=64, n=n, k=64, device="cpu", dtype="float16") for n in (64, 80)]
    assert counted(small[0]) > 1 and counted(small[0]) == counted(small[1])
    bad_space = tmp_path / "space.json"
    bad_space.write_text('{"triton::nonesuch": {}}')
    unlisted = candidate_count(replace(settings, space_file=bad_space), probe_device("cpu"))
    assert unlisted(small[0]) == 0  # cannot be listed: the tune will say why
    from autotune_cli.search.exhaustive import COMPILE_CAP

    capped = candidate_count(replace(settings, search="exhaustive", space_file=bad_space), probe_device("cpu"))
    assert capped(small[0]) == capped(probs[1]) == COMPILE_CAP  # the cap, nothing listed


@pytest.mark.slow
def test_an_idle_device_lends_its_worker_to_anothers_first_round(tmp_path):
    """Two CPU worker groups, one long problem (many interpreter programs per candidate) and
    one short: the group done first lends its worker to the long problem's first round; some
    of its candidates say they were measured there, every result is ok, the worker goes back
    when the round ends, and nothing is lent outside a round that takes it."""
    space = tmp_path / "space.json"
    space.write_text(json.dumps([{"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 1,
                                  "num_stages": s, "num_warps": w} for s in (1, 2, 3) for w in (1, 2)]))
    settings = TuneSettings(device="cpu", cache_dir=tmp_path / "cache", workers=2, compile_workers=0, gpus=2,
                            templates=("aten::mm", "triton::mm"), space_file=str(space))
    long = make_problem(m=64, n=64, k=32, device="cpu", dtype="float32")
    short = make_problem(m=16, n=16, k=16, device="cpu", dtype="float32")
    with MultiDeviceTuner(settings) as tuner:
        idle = tuner.tuners[0].started_executor
        assert idle is None  # nothing made before a problem needs it
        results = tuner.tune_all([long, short])
        assert all(r.ok for r in results), [r.error for r in results]
        by_problem = {r.problem.key(): r for r in results}
        long_slot, short_slot = by_problem[long.key()].slot, by_problem[short.key()].slot
        assert long_slot != short_slot
        assert tuner.lent_rounds[short_slot] >= 1 and tuner.lent_rounds[long_slot] == 0
        borrower = tuner.tuners[long_slot].started_executor
        assert borrower.lent_results >= 1 and borrower._borrowed == []
        lender = tuner.tuners[short_slot].started_executor
        assert not borrower.borrow(lender.timers, lambda _: None)  # no round in progress
    candidates = [c.to_dict() for c in by_problem[long.key()].outcome.entry.candidates]
    lent = [c for c in candidates if c.get("measured_on") is not None]
    assert lent and {c["measured_on"] for c in lent} == {short_slot}
    assert all(c["status"] == "ok" for c in candidates)
    assert all(c.measured_on is None for c in by_problem[short.key()].outcome.entry.candidates)
