"""The cache's files as a hostile or careless user leaves them: FIFOs, devices, symbolic
links, deep nesting, empty folder names, and an import racing a tune of the same key."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import autotune_cli.store.cache as cache_module
import autotune_cli.store.cache_document as cache_document
from autotune_cli.safe_read import too_deep
from autotune_cli.store.cache import CACHE_FILE, Cache, CacheUnavailable
from autotune_cli.store.entry import Entry
from helpers_cache_writer import key_of, make_entry

ROOT = Path(__file__).resolve().parents[1]
A, B = key_of(make_entry(m=1)), key_of(make_entry(m=2))  # where make_entry(m=1), (m=2) belong


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("autotune: error:"), err
    return lines[0]


def run_cli(*args, cwd=None, env=None, memory=2 * 2**30):
    """The CLI in its own process, bounded in time and memory: a regression that waits on a
    FIFO or reads /dev/zero fails the test instead of stalling or starving the machine."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return subprocess.run([sys.executable, "-m", "autotune_cli", *map(str, args)], cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                          capture_output=True, text=True, timeout=60, preexec_fn=limit)


# -- files that are not regular files ---------------------------------------------------------

def test_fifo_as_cache_file_is_refused_in_one_line(tmp_path):
    folder = tmp_path / "cache"
    folder.mkdir()
    os.mkfifo(folder / CACHE_FILE)
    proc = run_cli("cache", "show", "--cache-dir", folder)
    assert proc.returncode == 2
    assert "not a regular file" in one_error_line(proc.stderr)
    with pytest.raises(CacheUnavailable, match="not a regular file"):
        Cache(folder).load()


def test_cache_linked_to_dev_zero_is_refused_without_reading_it(tmp_path):
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / CACHE_FILE).symlink_to("/dev/zero")
    proc = run_cli("cache", "show", "--cache-dir", folder)
    assert proc.returncode == 2
    assert "not a regular file" in one_error_line(proc.stderr)


@pytest.mark.parametrize("planted", ["link", "fifo"])
def test_planted_lock_file_is_refused_and_nothing_elsewhere_is_touched(tmp_path, planted):
    """A link at the lock's name is not followed (it would create or open its target) and a
    FIFO there is not waited on: the write is refused in one line and nothing changes."""
    from autotune_cli.store.cache import LOCK_FILE

    folder, victim = tmp_path / "cache", tmp_path / "victim"
    folder.mkdir()
    if planted == "link":
        (folder / LOCK_FILE).symlink_to(victim)
    else:
        os.mkfifo(folder / LOCK_FILE)
    with pytest.raises(CacheUnavailable, match="cannot lock the cache"):
        Cache(folder).put(A, make_entry(m=1))
    assert not victim.exists() and not (folder / CACHE_FILE).exists()
    # no cache file: nothing to clear, so the lock is not even taken
    proc = run_cli("cache", "clear", "--yes", "--cache-dir", folder)
    assert proc.returncode == 0 and "removed 0 entries" in proc.stderr and not victim.exists()
    (folder / CACHE_FILE).write_text('{"schema": 1, "entries": {}}')
    proc = run_cli("cache", "clear", "--yes", "--cache-dir", folder)
    assert proc.returncode == 2 and "cannot lock the cache" in one_error_line(proc.stderr)
    assert not victim.exists()


def test_fifo_as_import_file_is_refused_in_one_line(tmp_path):
    fifo = tmp_path / "export.json"
    os.mkfifo(fifo)
    proc = run_cli("cache", "import", fifo, "--cache-dir", tmp_path / "cache")
    assert proc.returncode == 2
    assert "not a regular file" in one_error_line(proc.stderr)
    assert not (tmp_path / "cache" / CACHE_FILE).exists()


def test_file_larger_than_the_cap_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    Cache(folder).put(A, make_entry(m=1))
    size = (folder / CACHE_FILE).stat().st_size
    monkeypatch.setattr(cache_document, "MAX_FILE_BYTES", size - 1)
    with pytest.raises(CacheUnavailable, match=f"more than the {size - 1}"):
        Cache(folder).load()
    assert (folder / CACHE_FILE).stat().st_size == size  # refused, not moved aside or cut


# -- nesting ----------------------------------------------------------------------------------

def nested(depth: int):
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def test_deeply_nested_import_is_one_line_exit_2(cli, tmp_path):
    entry = make_entry()
    entry["extra"] = nested(900)
    export = tmp_path / "deep.json"
    export.write_text(json.dumps({"schema": 1, "entries": {key_of(entry): entry}}))
    code, out, err = cli("cache", "import", export, "--cache-dir", tmp_path / "cache")
    assert code == 2 and out == ""
    assert "nested more than" in one_error_line(err)
    assert not (tmp_path / "cache" / CACHE_FILE).exists()


def test_depth_limit_is_exact():
    limit = cache_document.MAX_DEPTH
    assert not too_deep({"a": nested(limit - 2)}, limit)  # the dict and 63 lists
    assert too_deep({"a": nested(limit - 1)}, limit)
    assert not too_deep({}, limit) and not too_deep({"a": 1}, limit)


def test_deeply_nested_cache_file_is_moved_aside(tmp_path):
    folder = tmp_path / "cache"
    entry = make_entry()
    entry["extra"] = nested(900)
    folder.mkdir()
    (folder / CACHE_FILE).write_text(json.dumps({"schema": 1, "entries": {"k@f": entry}}))
    cache = Cache(folder)
    assert cache.load() == {}
    assert any("nested more than" in notice for notice in cache.notices)
    cache.put(B, make_entry(m=2))  # and the cache works on
    assert list(Cache(folder).load()) == [B]


# -- symbolic links and empty folder names ------------------------------------------------------

NOTES = "my notes, not JSON\n"


def linked_to_notes(tmp_path):
    """(cache folder, the user's file): the cache file is a link to a file of the user's."""
    folder, notes = tmp_path / "cache", tmp_path / "home" / "notes.txt"
    folder.mkdir()
    notes.parent.mkdir()
    notes.write_text(NOTES)
    (folder / CACHE_FILE).symlink_to(notes)
    return folder, notes


def nothing_moved_or_written(folder: Path, notes: Path) -> None:
    assert notes.read_text() == NOTES and (folder / CACHE_FILE).is_symlink()
    assert sorted(p.name for p in notes.parent.iterdir()) == ["notes.txt"]
    assert not list(folder.glob(f"{CACHE_FILE}.*"))


def test_symlinked_cache_file_is_refused_and_its_target_left_alone(tmp_path):
    folder, notes = linked_to_notes(tmp_path)
    for args in (["cache", "show"], ["cache", "clear", "--yes"],
                 ["mm", "--device", "cpu", "--templates", "aten", "--m", 4, "--n", 4, "--k", 4]):
        proc = run_cli(*args, "--cache-dir", folder)
        assert proc.returncode == 2, proc.stderr
        assert "is a symbolic link" in one_error_line(proc.stderr)
    with pytest.raises(CacheUnavailable, match="symbolic link"):
        Cache(folder).put(A, make_entry(m=1))
    nothing_moved_or_written(folder, notes)


@pytest.mark.parametrize("target", ["cache", "dangling"])
def test_link_to_a_cache_elsewhere_is_refused_too(tmp_path, target):
    elsewhere = tmp_path / "shared"
    elsewhere.mkdir()
    if target == "cache":
        Cache(elsewhere).put(A, make_entry(m=1))
    before = (elsewhere / CACHE_FILE).read_bytes() if target == "cache" else None
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / CACHE_FILE).symlink_to(elsewhere / CACHE_FILE)
    with pytest.raises(CacheUnavailable, match="symbolic link"):
        Cache(folder).put(B, make_entry(m=2))
    with pytest.raises(CacheUnavailable, match="symbolic link"):
        Cache(folder).load()
    if target == "cache":
        assert (elsewhere / CACHE_FILE).read_bytes() == before
    else:
        assert not (elsewhere / CACHE_FILE).exists()
    assert not list(folder.glob(f"{CACHE_FILE}.*"))  # nothing moved aside


def test_a_link_swapped_in_mid_write_is_replaced_not_followed(tmp_path):
    """Between the writer's read and its write (under the lock) the file becomes a link to
    the user's file: the write replaces the link in the cache folder, never its target."""
    folder, notes = tmp_path / "cache", tmp_path / "notes.txt"
    notes.write_text(NOTES)
    cache = Cache(folder)
    cache.put(A, make_entry(m=1))

    def swap(current):
        (folder / CACHE_FILE).unlink()
        (folder / CACHE_FILE).symlink_to(notes)
        return {B: make_entry(m=2)}

    cache.merge(swap)
    assert notes.read_text() == NOTES
    assert not (folder / CACHE_FILE).is_symlink() and set(Cache(folder).load()) == {A, B}


def test_a_cache_file_of_another_user_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    Cache(folder).put(A, make_entry(m=1))
    before = (folder / CACHE_FILE).read_bytes()
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(folder / CACHE_FILE).st_uid + 1)
    with pytest.raises(CacheUnavailable, match="belongs to another user"):
        Cache(folder).load()
    with pytest.raises(CacheUnavailable, match="belongs to another user"):
        Cache(folder).put(B, make_entry(m=2))
    assert (folder / CACHE_FILE).read_bytes() == before


def test_empty_cache_dir_is_refused_and_nothing_is_written(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    export = tmp_path / "export.json"
    export.write_text(json.dumps({"schema": 1, "entries": {key_of(make_entry()): make_entry()}}))
    proc = run_cli("cache", "import", export, "--cache-dir", "", cwd=work)
    assert proc.returncode == 2
    assert "--cache-dir" in one_error_line(proc.stderr)
    proc = run_cli("cache", "show", cwd=work, env={"AUTOTUNE_CACHE_DIR": ""})
    assert proc.returncode == 2
    assert "AUTOTUNE_CACHE_DIR" in one_error_line(proc.stderr)
    assert list(work.iterdir()) == []
    with pytest.raises(CacheUnavailable, match="empty"):
        Cache("")


# -- an import beside a tune of the same key --------------------------------------------------

def test_import_plans_under_the_lock_against_what_is_on_disk(tmp_path, monkeypatch, capsys):
    """The import takes the lock before it looks at the cache: a newer entry that a tune
    writes while the import waits for the lock is kept, not replaced by the older import.
    The test holds the lock, lets the import reach it, then writes the tune's entry."""
    from autotune_cli.cli import main

    key = key_of(make_entry())
    folder = tmp_path / "cache"
    Cache(folder).put(key, make_entry(tuned_at="2026-11-01T00:00:00+00:00"))
    export = tmp_path / "export.json"
    export.write_text(json.dumps({"schema": 1, "entries": {key: make_entry(tuned_at="2026-11-10T00:00:00+00:00")}}))

    waiting = threading.Event()
    real = cache_module.fcntl

    class Flock:  # signals when the importing thread asks for the lock
        LOCK_EX, LOCK_UN = real.LOCK_EX, real.LOCK_UN

        @staticmethod
        def flock(fd, op):
            if op == real.LOCK_EX and threading.current_thread().name == "importer":
                waiting.set()
            return real.flock(fd, op)

    monkeypatch.setattr(cache_module, "fcntl", Flock)
    codes = []
    importer = threading.Thread(name="importer", target=lambda: codes.append(
        main(["cache", "import", str(export), "--cache-dir", str(folder)])))

    def tune_writes(current):  # called under the lock, which the import then waits for
        importer.start()
        assert waiting.wait(60)
        return {key: Entry.from_dict(make_entry(tuned_at="2026-11-20T00:00:00+00:00"), key)}  # the tune's, newest

    Cache(folder).merge(tune_writes)
    importer.join(60)
    assert codes == [0]
    assert Cache(folder).load()[key].tuned_at == "2026-11-20T00:00:00+00:00"
    assert "imported 0, replaced 0, skipped 1 of 1" in capsys.readouterr().err
