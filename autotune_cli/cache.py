"""The cache: one JSON document of tuning results. This module alone knows the file.

Layout: {"schema": 1, "entries": {key: entry}}; key = "<problem key>@<fingerprint digest>".
Writes take an exclusive lock, re-read the file, merge, write a temporary file in the same
folder, fsync it and `os.replace` it over the old one: a reader sees the old document or the
new one, never a torn one, and a writer never drops what another wrote in between.
A file that cannot be read is moved aside (kept), the user is told, and work carries on
with an empty cache. This module imports neither torch nor triton.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

SCHEMA = 1
CACHE_FILE = "autotune-cache.json"
LOCK_FILE = ".autotune-cache.lock"


def entry_key(problem_key: str, fingerprint_digest: str) -> str:
    return f"{problem_key}@{fingerprint_digest}"


class DamagedCache(ValueError):
    pass


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise DamagedCache(message)


def validate_entry(key: str, entry: Any) -> None:
    """Raise DamagedCache with a one-line reason if the entry is not what we wrote."""
    _require(isinstance(entry, dict), f"entry {key!r} is a {type(entry).__name__}, not an object")
    for name, kind in (("problem", dict), ("fingerprint", dict), ("candidates", list)):
        _require(isinstance(entry.get(name), kind), f"entry {key!r}: {name!r} missing or not a {kind.__name__}")
    winner = entry.get("winner")
    _require(winner is None or isinstance(winner, dict), f"entry {key!r}: 'winner' is not an object")
    if winner is not None:
        _require(isinstance(winner.get("uid"), str), f"entry {key!r}: winner has no uid")
        _require(isinstance(winner.get("params"), dict), f"entry {key!r}: winner params not an object")
        ms = winner.get("ms")
        _require(isinstance(ms, (int, float)) and not isinstance(ms, bool) and ms >= 0,
                 f"entry {key!r}: winner time {ms!r} is not a number")
    for i, cand in enumerate(entry["candidates"]):
        _require(isinstance(cand, dict) and isinstance(cand.get("uid"), str)
                 and isinstance(cand.get("status"), str),
                 f"entry {key!r}: candidate {i} is malformed")


# Older schemas that can be brought forward: {version: function(document) -> document}.
# Version 1 is the first released schema, so there is nothing to migrate from yet.
MIGRATIONS: dict[int, Callable[[dict], dict]] = {}


class Cache:
    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self.path = self.directory / CACHE_FILE
        self.lock_path = self.directory / LOCK_FILE
        self.notices: list[str] = []  # what the user must be told (a file moved aside, …)

    # -- locking and raw I/O ----------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a+") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _parse(self, text: str) -> dict[str, dict]:
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DamagedCache(f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
        _require(isinstance(document, dict), "the top level is not an object")
        schema = document.get("schema")
        _require(isinstance(schema, int) and not isinstance(schema, bool), "no schema version")
        while schema < SCHEMA and schema in MIGRATIONS:
            document = MIGRATIONS[schema](document)
            schema = document["schema"]
        if schema > SCHEMA:
            raise DamagedCache(f"schema {schema} is newer than this autotune understands ({SCHEMA}); "
                               "upgrade autotune to use it")
        _require(schema == SCHEMA, f"schema {schema} is older than {SCHEMA} and cannot be migrated")
        entries = document.get("entries")
        _require(isinstance(entries, dict), "'entries' is missing or not an object")
        for key, entry in entries.items():
            validate_entry(key, entry)
        return entries

    def _read_unlocked(self) -> dict[str, dict]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            return self._parse(raw.decode("utf-8"))
        except (DamagedCache, UnicodeDecodeError) as exc:
            self._move_aside(str(exc))
            return {}

    def _move_aside(self, reason: str) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = self.path.with_name(f"{CACHE_FILE}.damaged-{stamp}-{os.getpid()}")
        try:
            os.replace(self.path, target)
        except FileNotFoundError:
            return
        self.notices.append(f"cache {self.path} is unusable ({reason}); moved it to {target} "
                            "and started an empty cache")

    def _write_unlocked(self, entries: dict[str, dict]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        document = {"schema": SCHEMA, "entries": dict(sorted(entries.items()))}
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".autotune-cache.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(document, handle, indent=1, allow_nan=False)
                handle.write("\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        with contextlib.suppress(OSError):
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    # -- the API ------------------------------------------------------------------------------
    def load(self) -> dict[str, dict]:
        """All entries. A damaged file is moved aside under the lock (see notices)."""
        if not self.path.exists():
            return {}
        try:
            return self._parse(self.path.read_text(encoding="utf-8"))
        except (DamagedCache, UnicodeDecodeError, FileNotFoundError):
            with self.locked():
                return self._read_unlocked()

    def get(self, key: str) -> dict | None:
        return self.load().get(key)

    def put(self, key: str, entry: dict) -> None:
        self.update({key: entry})

    def update(self, entries: dict[str, dict]) -> None:
        """Merge entries into the file (theirs replace ours for the same key)."""
        for key, entry in entries.items():
            validate_entry(key, entry)
        with self.locked():
            current = self._read_unlocked()
            current.update(entries)
            self._write_unlocked(current)

    def remove(self, predicate: Callable[[str, dict], bool]) -> int:
        with self.locked():
            current = self._read_unlocked()
            keep = {k: v for k, v in current.items() if not predicate(k, v)}
            removed = len(current) - len(keep)
            if removed:
                self._write_unlocked(keep)
            return removed

    def clear(self) -> int:
        return self.remove(lambda key, entry: True)

    def items(self) -> Iterable[tuple[str, dict]]:
        return self.load().items()
