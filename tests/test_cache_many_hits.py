"""A list of cached problems is answered in linear time: the cache file is parsed once per
reader, not once per lookup, and read again only when it changed."""

from __future__ import annotations

import json

import autotune_cli.store.cache as cache_module
from autotune_cli.store.cache import Cache
from autotune_cli.hardware.device import probe_device
from autotune_cli.store.entry import key_for
from autotune_cli.tune.hits import fingerprint_for
from autotune_cli.problem import make_problem
from helpers_cache_writer import key_of, make_entry


def cached_list(folder, count: int) -> list[dict]:
    """`count` problems cached in `folder` as an aten-only tune stores them; their list."""
    device = probe_device("cpu")
    entries, listed = {}, []
    for i in range(count):
        problem = make_problem(m=8 + i, n=16, k=16, dtype="float32", device="cpu")
        fingerprint = fingerprint_for(problem, device, ("aten",))
        entries[key_for(problem, fingerprint.digest())] = {
            "problem": problem.to_dict(), "fingerprint": fingerprint.to_dict(),
            "fingerprint_digest": fingerprint.digest(), "machine": fingerprint.machine_digest(),
            "winner": {"uid": "aten::mm", "params": {}, "ms": 0.01, "tflops": 1.0},
            "candidates": [{"uid": "aten::mm", "params": {}, "status": "ok", "ms": 0.01}],
            "tuned_at": "2026-12-01T00:00:00+00:00"}
        listed.append({"m": 8 + i, "n": 16, "k": 16, "dtype": "float32"})
    Cache(folder).update(entries)
    return listed


def counting_parses(monkeypatch) -> list:
    calls: list = []
    parse = cache_module.parse_document

    def counted(text):
        calls.append(len(text))
        return parse(text)

    monkeypatch.setattr(cache_module, "parse_document", counted)
    return calls


def test_a_list_of_hits_parses_the_cache_a_fixed_number_of_times(cli, tmp_path, monkeypatch):
    folder, count = tmp_path / "cache", 60
    path = tmp_path / "list.json"
    path.write_text(json.dumps(cached_list(folder, count)))
    parses = counting_parses(monkeypatch)
    code, out, err = cli("mm", "--from", path, "--device", "cpu", "--templates", "aten", "--json",
                         "--cache-dir", folder)
    assert code == 0, err
    rows = json.loads(out)["problems"]
    assert len(rows) == count and all(row["from_cache"] for row in rows)
    assert len(parses) <= 2, len(parses)  # one per Cache that reads it, not one per problem


def test_a_cache_reads_the_file_again_only_when_it_changed(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    first, second = make_entry(m=1), make_entry(m=2)
    Cache(folder).put(key_of(first), first)
    parses = counting_parses(monkeypatch)
    reader = Cache(folder)
    assert reader.get(key_of(first)) is not None and reader.get(key_of(second)) is None
    assert reader.get(key_of(first)) is not None and len(reader.load()) == 1
    assert len(parses) == 1
    Cache(folder).put(key_of(second), second)  # another writer: the file changed
    assert reader.get(key_of(second)) is not None
    writes_before = len(parses)
    reader.remove(lambda key, entry: key == key_of(first))  # its own write is remembered
    assert reader.get(key_of(first)) is None and set(reader.load()) == {key_of(second)}
    assert len(parses) == writes_before + 1  # the read under the lock, none after the write
    loaded = reader.load()
    loaded.clear()  # a caller's copy: the remembered entries are not changed through it
    assert set(reader.load()) == {key_of(second)}


def test_the_api_finds_each_problem_without_a_pass_over_every_entry(tmp_path, monkeypatch):
    from autotune_cli import api

    folder, count = tmp_path / "cache", 40
    cached_list(folder, count)
    passes: list = []

    class Counted(dict):
        def items(self):
            passes.append(1)
            return super().items()

    load = Cache.load
    monkeypatch.setattr(Cache, "load", lambda self: Counted(load(self)))
    dispatcher = api.Dispatcher(folder)
    for i in range(count):
        found = dispatcher.lookup_entry(make_problem(m=8 + i, n=16, k=16, dtype="float32", device="cpu"))
        assert found is not None and found[1].problem.m == 8 + i
    assert len(passes) == 1  # when the file was read, not once per problem
