"""An entry is used only under the key that describes it: its own problem and the digest of
its own fingerprint. A winner copied under another problem's key, or a fingerprint of another
GPU under this machine's digest, is never built (the API, torch.compile's routing through it,
a command's hit, export and import all read through the one check) and is named once."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from autotune_cli import api
from autotune_cli.store.cache import CACHE_FILE, Cache
from autotune_cli.candidates.choices import get_choices
from autotune_cli.hardware.device import probe_device
from autotune_cli.store.entry import key_for
from autotune_cli.tune.hits import cached, fingerprint_for
from autotune_cli.problem import make_problem
from autotune_cli.settings import TuneSettings
from autotune_cli.tune.tuner import TuneListener


@pytest.fixture(autouse=True)
def fresh_api():
    api.reset()
    yield
    api.reset()


def entry_of(problem, uid: str, params: dict | None = None, fingerprint=None) -> tuple[str, dict]:
    """(key, entry) as a tune of `uid` alone on this CPU writes them; `params`: the winner's
    (default: the first config the tuner would try)."""
    fingerprint = fingerprint or fingerprint_for(problem, probe_device("cpu"), (uid,))
    if params is None:
        settings = TuneSettings(device="cpu", templates=(uid,))
        params = get_choices(problem, probe_device("cpu"), settings).choices[0].params
    entry = {
        "problem": problem.to_dict(), "fingerprint": fingerprint.to_dict(),
        "fingerprint_digest": fingerprint.digest(), "machine": fingerprint.machine_digest(),
        "winner": {"uid": uid, "params": params, "ms": 1e-6, "p20": None, "p80": None, "tflops": 1.0},
        "candidates": [{"uid": uid, "params": params, "status": "ok", "ms": 1e-6}],
        "tuned_at": "2026-11-30T00:00:00+00:00",
    }
    return key_for(problem, fingerprint.digest()), entry


def plant(cache_dir: Path, entries: dict) -> None:
    """Write the file as anyone who can write the folder could: no check on the way in."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    (cache_dir / CACHE_FILE).write_text(json.dumps({"schema": 1, "entries": entries}))


def copied_under(target, source, uid: str) -> tuple[str, dict]:
    """The winner of `source` stored under the key a tune of `target` looks up."""
    _, entry = entry_of(source, uid)
    key, _ = entry_of(target, uid, params={})
    return key, entry


SHAPES = [
    ("triton::mm", dict(m=64, n=64, k=64), dict(m=40, n=40, k=40)),
    ("triton::mm", dict(m=64, n=64, k=64), dict(m=64, n=64, k=72)),
    ("triton::mm", dict(m=64, n=64, k=64), dict(m=100, n=100, k=100)),
    ("triton::gemv", dict(m=1, n=64, k=64), dict(m=3, n=40, k=72)),
]


@pytest.mark.parametrize("uid, source, target", SHAPES)
def test_api_never_builds_a_winner_copied_under_another_problems_key(tmp_path, uid, source, target):
    cache_dir = tmp_path / "cache"
    source_p = make_problem(**source, dtype="float32", device="cpu")
    target_p = make_problem(**target, dtype="float32", device="cpu")
    key, entry = copied_under(target_p, source_p, uid)
    plant(cache_dir, {key: entry})
    a, b = torch.randn(target_p.m, target_p.k), torch.randn(target_p.k, target_p.n)
    dispatcher = api.Dispatcher(cache_dir)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = dispatcher.mm(a, b)
        out_again = dispatcher.mm(a, b)
        info = dispatcher.dispatch_info(a, b)
    torch.testing.assert_close(out, a @ b)
    torch.testing.assert_close(out_again, a @ b)
    assert info.fallback and info.uid == "torch.mm"
    assert dispatcher.lookup_entry(target_p) is None and dispatcher.lookup_entry(target_p, templates=uid) is None
    refusals = [str(w.message) for w in caught if "is not used" in str(w.message)]
    assert len(refusals) == 1 and key in refusals[0] and "\n" not in refusals[0], refusals
    assert f"holds the problem {source_p.key()}" in refusals[0]


class Heard(TuneListener):
    def __init__(self):
        self.notices, self.hits = [], []

    def notice(self, text):
        self.notices.append(text)

    def cache_hit(self, problem, entry):
        self.hits.append(problem)


def test_a_command_does_not_call_a_copied_winner_a_hit(tmp_path):
    cache_dir = tmp_path / "cache"
    target = make_problem(m=40, n=40, k=40, dtype="float32", device="cpu")
    key, entry = copied_under(target, make_problem(m=64, n=64, k=64, dtype="float32", device="cpu"), "aten::mm")
    plant(cache_dir, {key: entry})
    heard = Heard()
    settings = TuneSettings(device="cpu", templates=("aten::mm",), cache_dir=cache_dir)
    assert cached(settings, target, heard) is None and heard.hits == []
    assert len(heard.notices) == 1 and key in heard.notices[0] and "is not used" in heard.notices[0]


def test_a_tune_replaces_a_copied_winner_and_says_so_once(cli, tmp_path):
    cache_dir = tmp_path / "cache"
    target = make_problem(m=40, n=40, k=40, dtype="float32", device="cpu")
    key, entry = copied_under(target, make_problem(m=64, n=64, k=64, dtype="float32", device="cpu"), "aten::mm")
    plant(cache_dir, {key: entry})
    code, out, err = cli("mm", "--device", "cpu", "--m", "40", "--n", "40", "--k", "40", "--dtype", "float32",
                         "--templates", "aten::mm", "--workers", "1", "--json", "--cache-dir", cache_dir)
    assert code == 0, err
    assert json.loads(out)["key"] == key and not json.loads(out)["from_cache"]
    assert err.count(f"cache entry {key} is not used") == 1
    assert Cache(cache_dir).load()[key].problem == target  # the tune's own entry replaced it


@pytest.mark.parametrize("how", ["from", "model"])
def test_a_list_or_a_model_says_once_that_a_copied_winner_is_not_used(cli, tmp_path, how):
    """`mm --from` and `model` look the cache up before their plan: the note comes from
    there (the tuner's own reading would find it told already, and said nothing)."""
    cache_dir = tmp_path / "cache"
    target = make_problem(m=40, n=40, k=40, dtype="float32", device="cpu")
    key, entry = copied_under(target, make_problem(m=64, n=64, k=64, dtype="float32", device="cpu"), "aten::mm")
    plant(cache_dir, {key: entry})
    if how == "from":
        listed = tmp_path / "list.json"
        listed.write_text(json.dumps([{"m": 40, "n": 40, "k": 40, "dtype": "float32"}]))
        args = ("mm", "--from", listed)
    else:
        import torch

        class Net(torch.nn.Module):
            def forward(self, x, w):
                return x @ w

        model = tmp_path / "net.pt2"
        torch.export.save(torch.export.export(Net(), (torch.randn(40, 40), torch.randn(40, 40))), model)
        args = ("model", model)
    code, out, err = cli(*args, "--device", "cpu", "--templates", "aten::mm", "--workers", "1",
                         "--cache-dir", cache_dir)
    assert code == 0, err
    assert err.count(f"cache entry {key} is not used") == 1, err
    assert Cache(cache_dir).load()[key].problem == target


def another_gpus_entry_under_this_machines_key():
    problem = make_problem(m=32, n=32, k=32, dtype="float32", device="cpu")
    key, entry = entry_of(problem, "aten::mm")
    entry["fingerprint"] = {**entry["fingerprint"], "device_name": "NVIDIA H100 80GB HBM3"}
    return problem, key, entry


def test_a_fingerprint_of_another_machine_under_this_machines_digest_is_not_imported(cli, tmp_path):
    problem, key, entry = another_gpus_entry_under_this_machines_key()
    export = tmp_path / "export.json"
    export.write_text(json.dumps({"schema": 1, "entries": {key: entry}}))
    code, out, err = cli("cache", "import", export, "--cache-dir", tmp_path / "cache")
    assert code == 0 and "imported 0, replaced 0, skipped 1 of 1" in err
    assert f"skipped {key}: its fingerprint ('NVIDIA H100 80GB HBM3') has the digest" in err
    assert Cache(tmp_path / "cache").load() == {}
    assert api.Dispatcher(tmp_path / "cache").lookup_entry(problem) is None


def test_every_reader_goes_through_the_check_and_is_told_once(cli, tmp_path):
    """The file holds a good entry and a foreign one under this machine's digest: show,
    export and the API see only the good one; the notice comes once per read."""
    cache_dir = tmp_path / "cache"
    problem, bad_key, bad = another_gpus_entry_under_this_machines_key()
    good_key, good = entry_of(make_problem(m=16, n=16, k=16, dtype="float32", device="cpu"), "aten::mm")
    plant(cache_dir, {bad_key: bad, good_key: good})
    code, out, err = cli("cache", "show", "--json", "--cache-dir", cache_dir)
    assert code == 0 and list(json.loads(out)["entries"]) == [good_key]
    assert err.count(f"cache entry {bad_key} is not used") == 1
    cache = Cache(cache_dir)
    assert list(cache.load()) == [good_key] and cache.get(bad_key) is None
    assert cache.notices == []  # told once in this process already
    code, out, err = cli("cache", "export", "--format", "autotune", "--cache-dir", cache_dir)
    assert code == 0 and list(json.loads(out)["entries"]) == [good_key]
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert api.Dispatcher(cache_dir).lookup_entry(problem) is None
    # writing through the cache refuses what does not belong under its key
    with pytest.raises(ValueError, match="cannot be stored under its key"):
        Cache(cache_dir).put(bad_key, bad)
