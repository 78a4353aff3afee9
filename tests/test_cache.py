import json

import pytest

from autotune_cli.cache import SCHEMA, Cache, DamagedCache
from autotune_cli.entry import CacheKey


def make_entry(m=64, uid="aten::mm", ms=1.0):
    return {
        "problem": {"op": "mm", "m": m, "n": 8, "k": 8, "b": 1, "dtype": "float16", "layout": "nn",
                    "bias": None, "allow_tf32": False, "device": "cpu"},
        "fingerprint": {"device_name": "cpu", "templates": {}},
        "fingerprint_digest": "f" * 16,
        "winner": {"uid": uid, "params": {}, "ms": ms, "tflops": 0.1},
        "candidates": [{"uid": uid, "params": {}, "status": "ok", "ms": ms}],
        "tuned_at": "2026-11-29T00:00:00+00:00",
    }


def test_round_trip_and_schema(tmp_path):
    cache = Cache(tmp_path)
    cache.put("a@1", make_entry())
    document = json.loads(cache.path.read_text())
    assert document["schema"] == SCHEMA and list(document["entries"]) == ["a@1"]
    assert Cache(tmp_path).get("a@1").winner.uid == "aten::mm"
    assert not list(tmp_path.glob("*.tmp"))  # the temporary file was renamed, not left


def test_writers_merge_instead_of_overwriting(tmp_path):
    first, second = Cache(tmp_path), Cache(tmp_path)
    first.load()
    second.load()
    first.put("a@1", make_entry(m=1))
    second.put("b@1", make_entry(m=2))  # second never saw a@1 in memory
    assert set(Cache(tmp_path).load()) == {"a@1", "b@1"}


@pytest.mark.parametrize("text, reason", [
    ('{"schema": 1, "entries": {"a": ', "not valid JSON"),
    ('{"schema": 99, "entries": {}}', "newer than this autotune"),
    ('{"schema": 0, "entries": {}}', "cannot be migrated"),
    ('[1, 2]', "top level"),
    ('{"schema": 1, "entries": {"a": {"problem": 3}}}', "'problem'"),
    ('{"schema": 1, "entries": {"a": {"problem": {}, "fingerprint": {}, "candidates": [],'
     ' "winner": {"uid": "x", "params": {}, "ms": "fast"}}}}', "winner time"),
])
def test_damaged_file_is_moved_aside_and_reported(tmp_path, text, reason):
    cache = Cache(tmp_path)
    tmp_path.mkdir(exist_ok=True)
    cache.path.write_text(text)
    assert cache.load() == {}
    assert len(cache.notices) == 1 and reason in cache.notices[0]
    (aside,) = tmp_path.glob("autotune-cache.json.damaged-*")
    assert aside.read_text() == text  # kept byte for byte
    cache.put("a@1", make_entry())
    assert set(Cache(tmp_path).load()) == {"a@1"}


def test_invalid_entry_is_refused_on_write(tmp_path):
    with pytest.raises(DamagedCache):
        Cache(tmp_path).put("x", {"problem": {}})


def test_remove_and_clear(tmp_path):
    cache = Cache(tmp_path)
    cache.update({"a@1": make_entry(m=1), "b@1": make_entry(m=2), "c@1": make_entry(m=3)})
    assert cache.remove(lambda key, entry: entry.problem.m == 2) == 1
    assert set(cache.load()) == {"a@1", "c@1"}
    assert cache.clear() == 2 and cache.load() == {}


def test_entry_key():
    assert str(CacheKey("mm/m1", "abc")) == "mm/m1@abc"
