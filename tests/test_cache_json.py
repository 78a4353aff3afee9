"""`--json` on `autotune cache path / prune / import / export / clear` through the real CLI:
one JSON object on stdout saying what was done (or would be, under --dry-run), as `cache
show --json` prints it; stderr holds only notes about the cache file."""

from __future__ import annotations

import json

from autotune_cli.store.cache import CACHE_FILE
from test_cache_tools import entries_of, one_error_line, synthetic, write


def only_json(code: int, out: str, err: str) -> dict:
    assert code == 0, err
    assert err == ""  # what the command did is in the document, not on stderr
    return json.loads(out)


def test_path_json(cli, cache_dir):
    document = only_json(*cli("cache", "path", "--json"))
    assert document == {"path": str(cache_dir / CACHE_FILE), "exists": False}
    assert not cache_dir.exists()
    write(cache_dir, synthetic(m=16))
    assert only_json(*cli("cache", "path", "--json"))["exists"] is True


def test_prune_json_lists_removed_and_kept_keys(cli, cache_dir):
    old, new = synthetic(m=16, tuned_at="2026-01-01T00:00:00+00:00"), synthetic(m=32)
    write(cache_dir, old, new)
    dry = only_json(*cli("cache", "prune", "--older-than", "2026-06-01", "--dry-run", "--json"))
    assert dry == {"path": str(cache_dir / CACHE_FILE), "dry_run": True, "removed": [old[0]], "kept": [new[0]]}
    assert set(entries_of(cache_dir)) == {old[0], new[0]}
    done = only_json(*cli("cache", "prune", "--older-than", "2026-06-01", "--json"))
    assert done == {**dry, "dry_run": False}
    assert set(entries_of(cache_dir)) == {new[0]}


def test_import_json_says_what_and_why(cli, cache_dir, tmp_path):
    same, ours = synthetic(m=16), synthetic(m=32)
    newer = synthetic(m=32, tuned_at="2099-01-01T00:00:00+00:00")
    added = synthetic(m=48)
    write(cache_dir, same, ours)
    export = tmp_path / "exp.json"
    export.write_text(json.dumps({"schema": 1, "entries": dict([same, newer, added, ("k", {"problem": {}})])}))
    dry = only_json(*cli("cache", "import", export, "--dry-run", "--json"))
    assert dry == {"path": str(cache_dir / CACHE_FILE), "source": str(export), "dry_run": True,
                   "imported": [added[0]], "replaced": [newer[0]],
                   "skipped": {"k": "damaged ('fingerprint' missing or not a dict)",
                               same[0]: "already cached, identical"}}
    done = only_json(*cli("cache", "import", export, "--json"))
    assert done == {**dry, "dry_run": False}
    assert entries_of(cache_dir)[newer[0]] == newer[1] and added[0] in entries_of(cache_dir)


def test_export_json_needs_a_file_and_says_what_it_wrote(cli, cache_dir, tmp_path):
    cpu = [synthetic(m=16 * i, device="cpu", device_name="AMD EPYC") for i in (1, 2, 3)]
    write(cache_dir, *cpu)
    code, out, err = cli("cache", "export", "--format", "autotune", "--json")
    assert code == 2 and out == "" and "--json needs --output FILE" in one_error_line(err)
    target = tmp_path / "moved.json"
    moved = only_json(*cli("cache", "export", "--format", "autotune", "-o", target, "--json"))
    assert moved == {"path": str(cache_dir / CACHE_FILE), "format": "autotune", "output": str(target),
                     "entries": sorted(key for key, _ in cpu), "left_out": {}, "notes": []}
    assert sorted(json.loads(target.read_text())["entries"]) == moved["entries"]
    table = only_json(*cli("cache", "export", "--format", "inductor", "-o", tmp_path / "t.json", "--json"))
    assert table["lookup_table_keys"] == 0 and table["entries"] == []
    assert table["left_out"] == {key: "tuned on cpu (Inductor's lookup table is CUDA-only)" for key, _ in cpu}
    assert table["notes"] == ["3 entries skipped: tuned on cpu (Inductor's lookup table is CUDA-only)"]


def test_clear_json(cli, cache_dir):
    write(cache_dir, synthetic(m=16), synthetic(m=32))
    document = only_json(*cli("cache", "clear", "--yes", "--json"))
    assert document == {"path": str(cache_dir / CACHE_FILE), "removed": 2}
    assert entries_of(cache_dir) == {}
