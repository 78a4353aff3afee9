"""A cache file written by a newer autotune (a higher "schema") through the real CLI: it is
not damage, so nothing moves it aside or writes over it. Read-only commands read it as
empty with one note; commands that would write refuse it in one line (exit 2) before any work.
"""

from __future__ import annotations

import json
import warnings

import pytest

from autotune_cli.store.cache import CACHE_FILE
from conftest import messages
from test_cache_tools import one_error_line, synthetic, write

NEWER = json.dumps({"schema": 99, "entries": {"mm/m1@x": {"from": "a newer autotune"}}})


@pytest.fixture
def newer(cache_dir):
    cache_dir.mkdir(parents=True)
    (cache_dir / CACHE_FILE).write_text(NEWER)
    return cache_dir


def untouched(folder) -> None:
    assert (folder / CACHE_FILE).read_text() == NEWER
    assert not list(folder.glob("*.damaged-*")) and not list(folder.glob("*.schema-*"))


def newer_note(err: str) -> None:
    notes = [line for line in messages(err) if line.startswith("note:")]
    assert len(notes) == 1, err
    assert "written by a newer autotune (schema 99; this one reads 1)" in notes[0]
    assert "left as it is and read as empty" in notes[0]


@pytest.mark.parametrize("args", [
    ("cache", "show"),
    ("cache", "show", "--json"),
    ("cache", "show", "--filter", "mm"),
    ("cache", "export", "--format", "autotune", "-o", "OUT"),
    ("cache", "export", "--format", "inductor", "-o", "OUT"),
], ids=["show", "show-json", "show-filter", "export-autotune", "export-inductor"])
def test_read_only_commands_read_it_as_empty_and_leave_it(cli, newer, tmp_path, args):
    args = [str(tmp_path / "out.json") if a == "OUT" else a for a in args]
    code, out, err = cli(*args)
    assert code == 0, err
    newer_note(err)
    untouched(newer)
    if "--json" in args:
        assert json.loads(out)["entries"] == {}
    code, out, err = cli("cache", "path")
    assert code == 0 and out.strip() == str(newer / CACHE_FILE) and err == ""


def test_api_lookup_reads_it_as_empty_and_leaves_it(newer):
    from autotune_cli import api

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert api.Dispatcher(newer).lookup(m=32, n=32, k=32, dtype="float16", device="cpu") is None
    assert any("written by a newer autotune (schema 99" in str(w.message) for w in caught)
    untouched(newer)


@pytest.mark.parametrize("args", [
    ("cache", "import", "EXPORT"),
    ("cache", "import", "EXPORT", "--dry-run"),
    ("cache", "prune", "--older-than", "2099-01-01"),
    ("cache", "prune", "--older-than", "2099-01-01", "--dry-run"),
    ("cache", "clear", "--yes"),
    ("cache", "clear"),
    ("mm", "--device", "cpu", "--m", "16", "--n", "16", "--k", "16", "--templates", "aten", "--workers", "1"),
    ("mm", "--device", "cpu", "--from", "LIST", "--templates", "aten", "--workers", "1"),
], ids=["import", "import-dry-run", "prune", "prune-dry-run", "clear-yes", "clear", "mm", "mm-from"])
def test_commands_that_would_write_refuse_it_in_one_line(cli, newer, tmp_path, args):
    export = tmp_path / "export.json"
    export.write_text(json.dumps({"schema": 1, "entries": dict([synthetic(m=48, device="cpu")])}))
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps([{"m": 16, "n": 16, "k": 16}]))
    args = [str(export) if a == "EXPORT" else str(listed) if a == "LIST" else a for a in args]
    code, _, err = cli(*args)
    assert code == 2, err
    line = one_error_line(err)
    assert f"cache {newer / CACHE_FILE} was written by a newer autotune (schema 99; this one writes 1)" in line
    assert "upgrade autotune, or use another --cache-dir" in line
    untouched(newer)
    assert "removed" not in err and "imported" not in err


def test_a_damaged_file_is_still_moved_aside(cli, cache_dir):
    """The older behaviour stays for a file that is damaged, not newer."""
    write(cache_dir, synthetic(m=16))
    (cache_dir / CACHE_FILE).write_text('{"schema": 1, "entries": {')
    code, _, err = cli("cache", "show")
    assert code == 0 and any("is unusable (not valid JSON" in line for line in messages(err))
    assert len(list(cache_dir.glob(f"{CACHE_FILE}.damaged-*"))) == 1
