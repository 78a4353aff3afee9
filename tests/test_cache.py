import json

import pytest

from autotune_cli.store.cache import SCHEMA, Cache, DamagedCache
from autotune_cli.store.entry import CacheKey
from helpers_cache_writer import key_of, make_entry


A, B, C = (key_of(make_entry(m)) for m in (1, 2, 3))


def test_round_trip_and_schema(tmp_path):
    cache = Cache(tmp_path)
    cache.put(A, make_entry(1))
    document = json.loads(cache.path.read_text())
    assert document["schema"] == SCHEMA and list(document["entries"]) == [A]
    assert Cache(tmp_path).get(A).winner.uid == "aten::mm"
    assert not list(tmp_path.glob("*.tmp"))  # the temporary file was renamed, not left


def test_writers_merge_instead_of_overwriting(tmp_path):
    first, second = Cache(tmp_path), Cache(tmp_path)
    first.load()
    second.load()
    first.put(A, make_entry(m=1))
    second.put(B, make_entry(m=2))  # second never saw A in memory
    assert set(Cache(tmp_path).load()) == {A, B}


@pytest.mark.parametrize("text, reason", [
    ('{"schema": 1, "entries": {"a": ', "not valid JSON"),
    ('{"schema": 0, "entries": {}}', "cannot be migrated"),
    ('{"schema": 1.0, "entries": {}}', "schema 1.0 is not a version number (a whole number such as 1)"),
    ('{"schema": "1", "entries": {}}', "schema '1' is not a version number"),
    ('{"entry": {}}', "no schema version"),
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
    cache.put(A, make_entry(1))
    assert set(Cache(tmp_path).load()) == {A}


def test_a_newer_schema_is_no_damage_readers_leave_it_writers_refuse_it(tmp_path):
    from autotune_cli.store.cache import NewerCache

    text = '{"schema": 99, "entries": {"x": {"from": "a newer autotune"}}}'
    cache = Cache(tmp_path)
    cache.path.write_text(text)
    assert cache.load() == {} and cache.newer_schema == 99
    (notice,) = cache.notices
    assert "written by a newer autotune (schema 99; this one reads 1)" in notice
    for write in (lambda c: c.put(A, make_entry(1)), lambda c: c.remove(lambda k, e: True),
                  lambda c: c.clear(), lambda c: c.check_writable()):
        with pytest.raises(NewerCache, match="schema 99; this one writes 1"):
            write(Cache(tmp_path))
    assert cache.path.read_text() == text and sorted(p.name for p in tmp_path.iterdir()) == [
        ".autotune-cache.lock", "autotune-cache.json"]


def test_invalid_entry_is_refused_on_write(tmp_path):
    with pytest.raises(DamagedCache):
        Cache(tmp_path).put("x", {"problem": {}})


def test_remove_and_clear(tmp_path):
    cache = Cache(tmp_path)
    cache.update({A: make_entry(m=1), B: make_entry(m=2), C: make_entry(m=3)})
    assert cache.remove(lambda key, entry: entry.problem.m == 2) == 1
    assert set(cache.load()) == {A, C}
    assert cache.clear() == 2 and cache.load() == {}


def test_entry_key():
    assert str(CacheKey("mm/m1", "abc")) == "mm/m1@abc"
