"""The cache key's fingerprint is the machine's; the templates a tune considered belong to
its entry. A `--templates` tune stores no second entry for a problem, a winner is still
stale once a template it was tuned with changes, and entries stored under the keys of
before (whose digest held the templates) are read and used, never a crash."""

from __future__ import annotations

import json

from autotune_cli import api
from conftest import messages
from autotune_cli.store.cache import CACHE_FILE, Cache
from autotune_cli.hardware.device import probe_device
from autotune_cli.store.entry import key_for
from autotune_cli.store.fingerprint import Fingerprint, legacy_digest_of
from autotune_cli.tune.hits import fingerprint_for, look_up
from autotune_cli.problem import make_problem

ONE_CONFIG = [{"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 1, "num_warps": 4}]
PROBLEM = make_problem(m=24, n=16, k=16, dtype="float32", device="cpu")
SHAPE = ("--m", "24", "--n", "16", "--k", "16", "--dtype", "float32")


def tune(cli, folder, *args) -> dict:
    code, out, err = cli("mm", "--device", "cpu", "--workers", "1", "--json", *SHAPE, *args, "--cache-dir", folder)
    assert code == 0, err
    return json.loads(out)


def test_the_machines_digest_does_not_depend_on_the_templates():
    device = probe_device("cpu")
    assert Fingerprint.of(device, {"aten::mm": "1"}).digest() == Fingerprint.of(device, {"x": "2"}).digest()
    assert fingerprint_for(PROBLEM, device, ("aten",)).digest() == fingerprint_for(PROBLEM, device).digest()


def test_a_templates_tune_keeps_one_entry_per_problem(cli, tmp_path):
    folder = tmp_path / "cache"
    space = tmp_path / "space.json"
    space.write_text(json.dumps(ONE_CONFIG))
    narrow = tune(cli, folder, "--templates", "aten")
    wide = tune(cli, folder, "--templates", "aten,triton::mm", "--space", space)
    assert not wide["from_cache"]  # triton::mm was never timed: the narrow entry cannot answer
    assert wide["key"] == narrow["key"]
    entries = Cache(folder).load()
    assert list(entries) == [narrow["key"]] and set(entries[narrow["key"]].templates) == {"aten::mm", "triton::mm"}
    code, out, _ = cli("cache", "show", "--json", "--cache-dir", folder)
    assert code == 0 and len(json.loads(out)["entries"]) == 1
    if wide["winner"]["uid"] == "aten::mm":  # the winner of a wider selection serves a narrower one
        again = tune(cli, folder, "--templates", "aten")
        assert again["from_cache"] and again["key"] == narrow["key"]


def test_a_narrower_tune_adds_to_what_a_wider_one_learned(cli, tmp_path, monkeypatch):
    """One entry per problem holds the results of every selection tuned: a tune of a
    selection the entry does not cover adds its results (never throws the others away), its
    command shows its own pick, and each selection the entry covers is answered from it."""
    import warnings

    folder = tmp_path / "cache"
    space = tmp_path / "space.json"
    space.write_text(json.dumps(ONE_CONFIG))
    cuBLAS = tune(cli, folder, "--templates", "aten")
    assert cuBLAS["winner"]["uid"] == "aten::mm"
    code, out, err = cli("mm", "--device", "cpu", "--workers", "1", "--json", *SHAPE, "--templates", "triton::mm",
                         "--space", space, "--cache-dir", folder)
    assert code == 0, err
    triton = json.loads(out)
    assert not triton["from_cache"] and triton["winner"]["uid"] == "triton::mm"
    assert {c["uid"] for c in triton["candidates"]} == {"triton::mm"}  # its own results, its own pick
    (entry,) = Cache(folder).load().values()
    assert set(entry.templates) == {"aten::mm", "triton::mm"}
    assert {c.uid for c in entry.candidates} == {"aten::mm", "triton::mm"}
    assert entry.winner.uid == "aten::mm"  # the interpreter's Triton is far slower than the CPU's BLAS
    assert any(m.startswith("note: the cache keeps aten::mm (") for m in messages(err)), err  # no params: one space
    # each selection the entry covers is a hit, answered with its own pick
    for templates, uid in (("triton::mm", "triton::mm"), ("aten", "aten::mm"), ("aten,triton::mm", "aten::mm")):
        code, out, err = cli("mm", "--device", "cpu", "--workers", "1", "--json", *SHAPE, "--templates", templates,
                             "--space", space, "--cache-dir", folder)
        assert code == 0, err
        doc = json.loads(out)
        assert doc["from_cache"] and doc["winner"]["uid"] == uid, (templates, doc["winner"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert api.Dispatcher(folder).lookup_entry(PROBLEM, templates="triton::mm")[1].winner.uid == "triton::mm"


def test_show_lists_the_templates_of_every_entry_of_a_machine(cli, tmp_path):
    """The fingerprint line names what each entry under it was tuned with, not the last
    entry's set alone (the digest leaves the templates out)."""
    folder = tmp_path / "cache"
    space = tmp_path / "space.json"
    space.write_text(json.dumps(ONE_CONFIG))
    tune(cli, folder, "--templates", "aten,triton::mm", "--space", space)
    tune(cli, folder, "--templates", "aten", "--bias")
    code, out, err = cli("cache", "show", "--cache-dir", folder)
    assert code == 0, err
    line = " ".join(out[out.index("fingerprint "):].split())
    assert out.count("fingerprint ") == 1
    assert not [row for row in out.splitlines() if row.endswith(" ")]  # wrapped at words, no space left over
    for uid in ("aten::mm", "aten::addmm", "triton::mm"):
        assert f"{uid}=" in line, line


def stored_entry(fingerprint: Fingerprint, digest: str, tuned_at: str = "2026-11-30T00:00:00+00:00") -> dict:
    return {
        "problem": PROBLEM.to_dict(), "fingerprint": fingerprint.to_dict(), "fingerprint_digest": digest,
        "machine": fingerprint.machine_digest(),
        "winner": {"uid": "aten::mm", "params": {}, "ms": 0.01, "p20": None, "p80": None, "tflops": 1.0},
        "candidates": [{"uid": "aten::mm", "params": {}, "status": "ok", "ms": 0.01}],
        "tuned_at": tuned_at,
    }


def write(folder, entries: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CACHE_FILE).write_text(json.dumps({"schema": 1, "entries": entries}))


def test_a_template_changed_since_still_makes_the_winner_stale(tmp_path):
    folder = tmp_path / "cache"
    device = probe_device("cpu")
    fingerprint = fingerprint_for(PROBLEM, device, ("aten",))
    changed = Fingerprint.of(device, {"aten::mm": "0" * 16})  # as tuned with an older aten::mm
    key = key_for(PROBLEM, fingerprint.digest())
    write(folder, {key: stored_entry(changed, changed.digest())})
    found = look_up(Cache(folder), PROBLEM, device, ("aten",))
    assert found.key == key and found.hit is None and found.stored is None
    assert api.Dispatcher(folder).lookup_entry(PROBLEM) is None
    assert api.Dispatcher(folder).lookup_entry(PROBLEM, templates="aten") is None
    write(folder, {key: stored_entry(fingerprint, fingerprint.digest())})  # as it is now: a hit
    assert look_up(Cache(folder), PROBLEM, device, ("aten",)).hit is not None
    assert api.Dispatcher(folder).lookup_entry(PROBLEM)[0] == key


def test_entries_under_the_keys_of_before_are_read_and_used(cli, tmp_path):
    """Two entries of one problem stored as before (the digest held the templates: one
    tuned with aten, one with aten and triton::mm): the later is kept under the machine's
    key and answers a tune; the other is named once and dropped at the next write."""
    folder = tmp_path / "cache"
    device = probe_device("cpu")
    older = fingerprint_for(PROBLEM, device, ("aten",))
    later = fingerprint_for(PROBLEM, device, ("aten", "triton::mm"))
    old_keys = [key_for(PROBLEM, legacy_digest_of(fp.to_dict())) for fp in (older, later)]
    assert old_keys[0] != old_keys[1] != key_for(PROBLEM, later.digest())
    write(folder, {old_keys[0]: stored_entry(older, legacy_digest_of(older.to_dict())),
                   old_keys[1]: stored_entry(later, legacy_digest_of(later.to_dict()),
                                             tuned_at="2026-12-01T00:00:00+00:00")})
    cache = Cache(folder)
    entries = cache.load()
    new_key = key_for(PROBLEM, later.digest())
    assert list(entries) == [new_key] and set(entries[new_key].templates) == {"aten::mm", "triton::mm"}
    assert entries[new_key].fingerprint_digest == later.digest()
    assert len(cache.notices) == 1 and old_keys[0] in cache.notices[0]
    result = tune(cli, folder, "--templates", "aten")
    assert result["from_cache"] and result["key"] == new_key
    assert api.Dispatcher(folder).lookup_entry(PROBLEM)[0] == new_key
