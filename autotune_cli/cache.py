"""The cache: one JSON document of tuning results. This module alone knows the file.

Layout (schema 1): {"schema": 1, "entries": {key: entry}}; key = "<problem key>@<fingerprint
digest>" (entry.CacheKey); each entry is read into, and written from, an entry.Entry, which
checks its fields on the way in. Other top-level fields (an export's "exported_at", ...) are accepted on reading and
not written back. Writes take an exclusive lock, re-read the file, merge, write a temporary
file in the same folder, fsync it and `os.replace` it over the old one: a reader sees the old
document or the new one, never a torn one, and a writer never drops what another wrote in
between. Temporary files exist only while a writer holds the lock, so any that a writer
holding it finds were left by a writer killed mid-write; it deletes them.

A file that cannot be used (not JSON, not UTF-8, a schema it cannot read, an entry of the wrong
shape) is moved aside under a name that is never reused (kept byte for byte), the
user is told in one line, and work carries on with an empty cache. Numbers must be finite:
JSON has no NaN or infinity, so a non-finite number in an entry being stored (a candidate's
error of inf when it wrote NaN) is stored as null. A cache folder that cannot be read or
written at all raises CacheUnavailable, a UserError: one line, exit 2.

Only a regular file is read (a FIFO would block, /dev/zero would never end), and at most
MAX_FILE_BYTES of it; nesting deeper than MAX_DEPTH is damage (no entry we write is more than a
few levels deep, and deeper documents overflow the recursion of the code that walks them).
A cache file that is a symbolic link is written through it: the new file replaces the link's
target, in the target's folder, where the lock is taken too, so the link stays a link.

Schema 0 is the unversioned layout: {"entries": {problem key: entry}}, no "schema" field,
entries keyed by the problem key alone and without "fingerprint_digest" and "machine". No
released autotune wrote it; this module defines it so that such a file is brought forward
instead of thrown away, and as the pattern later migrations follow. Migrating 0 -> 1
rebuilds each entry's Fingerprint from its "fingerprint" object, sets "fingerprint_digest"
and "machine" from it and re-keys the entry "<problem key>@<digest>" (the problem rebuilt
from its "problem" object), which is the key the tuner looks up. An entry that lacks what
that needs makes the whole file unusable (moved aside as above): nothing is dropped. A
migrated file is first copied to "autotune-cache.json.schema-0[.N]", then rewritten as
schema 1, and the user is told. An explicit "schema": 0 was never written by anyone and is
refused like any other unknown older schema.

This module imports neither torch nor triton.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import numbers
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from .entry import DamagedCache, Entry, _require, _show, check_problem, key_for
from .errors import UserError

SCHEMA = 1
CACHE_FILE = "autotune-cache.json"
LOCK_FILE = ".autotune-cache.lock"
TMP_PREFIX, TMP_SUFFIX = ".autotune-cache.", ".tmp"
MAX_FILE_BYTES = 256 * 2**20  # a cache of many thousands of entries is a few MB
MAX_DEPTH = 64  # containers within containers: our own entries need fewer than ten


class CacheUnavailable(UserError):
    """The cache folder or file cannot be read or written at all (a permission, a file
    where the folder should be, a full disk, a FIFO or a device in the file's place)."""


class NotAFile(OSError):
    """What was to be read is not a regular file, or is larger than we read."""


def read_regular_file(path: str | os.PathLike, limit: int | None = None) -> bytes:
    """The bytes of `path`, following symbolic links, if it is a regular file of at most
    `limit` bytes (default MAX_FILE_BYTES); NotAFile otherwise (OSError as open raises it).
    Opened non-blocking, so a FIFO is refused rather than waited on."""
    limit = MAX_FILE_BYTES if limit is None else limit
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotAFile(f"{path} is not a regular file")
        if info.st_size > limit:
            raise NotAFile(f"{path} is {info.st_size} bytes, more than the {limit} read")
        os.set_blocking(fd, True)
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:  # grew while being read
                raise NotAFile(f"{path} is more than the {limit} bytes read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether containers nest deeper than `limit` (the top one is depth 1), walked a level
    at a time without recursion: a fifth of what parsing the text costs."""
    level = [value]
    for _ in range(limit):
        below: list = []
        add = below.append
        for item in level:
            for child in (item.values() if type(item) is dict else item):
                if type(child) is dict or type(child) is list:
                    add(child)
        if not below:
            return False
        level = below
    return True


def _json_value(value: Any, where: str) -> Any:
    """A copy of value as plain JSON: tuples become lists, NaN and infinity become null."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Integral):  # numpy's too
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        _require(all(isinstance(k, str) for k in value), f"{where}: an object key is not a string")
        return {k: _json_value(v, where) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v, where) for v in value]
    raise DamagedCache(f"{where}: a {type(value).__name__} cannot be stored in JSON")


def _reject_constant(name: str) -> Any:
    raise DamagedCache(f"not valid JSON ({name} is not a JSON number)")


def _finite_float(text: str) -> float:
    value = float(text)
    _require(math.isfinite(value), f"the number {text[:20]} is out of range")
    return value


def _migrate_0(document: dict) -> dict:
    from .fingerprint import Fingerprint  # plain Python: no torch

    old = document.get("entries")
    _require(isinstance(old, dict), "schema 0: 'entries' is not an object")
    entries: dict[str, dict] = {}
    for old_key, entry in old.items():
        where = f"schema 0 entry {_show(old_key)} cannot be migrated"
        _require(isinstance(entry, dict), f"{where}: not an object")
        problem = check_problem(old_key, entry.get("problem"))
        _require(isinstance(entry.get("fingerprint"), dict), f"{where}: no fingerprint object")
        missing = [name for name in Fingerprint.__dataclass_fields__
                   if name != "templates" and name not in entry["fingerprint"]]
        _require(not missing, f"{where}: its fingerprint lacks {', '.join(missing)}")
        try:
            fingerprint = Fingerprint.from_dict(entry["fingerprint"])
            digest, machine = fingerprint.digest(), fingerprint.machine_digest()
        except (TypeError, ValueError) as exc:
            raise DamagedCache(f"{where}: its fingerprint is malformed ({_show(str(exc))})") from None
        key = key_for(problem, digest)
        _require(key not in entries, f"{where}: it and another entry both become {_show(key)}")
        entries[key] = {**entry, "fingerprint_digest": digest, "machine": machine}
    return {**document, "schema": 1, "entries": entries}


# Older schemas that can be brought forward: {version: function(document) -> document}.
# The unversioned layout counts as schema 0 (see the module docstring).
MIGRATIONS: dict[int, Callable[[dict], dict]] = {0: _migrate_0}


def parse_document(text: str) -> tuple[dict[str, Entry], int | None]:
    """The entries of a cache document, typed, and the schema it was migrated from (None if
    it was current). Raises DamagedCache with a one-line reason."""
    try:
        document = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise DamagedCache(f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise DamagedCache("not valid JSON (nested too deeply)") from None
    except DamagedCache:
        raise
    except ValueError:  # an integer of more digits than Python converts
        raise DamagedCache("not valid JSON (a number too long to read)") from None
    _require(isinstance(document, dict), "the top level is not an object")
    _require(not _too_deep(document), f"nested more than {MAX_DEPTH} deep")
    if "schema" not in document and "entries" in document:
        schema, migrated_from = 0, 0
    else:
        schema, migrated_from = document.get("schema"), None
        _require(isinstance(schema, int) and not isinstance(schema, bool), "no schema version")
        if schema > SCHEMA:
            raise DamagedCache(f"schema {_show(schema)} is newer than this autotune understands ({SCHEMA}); "
                               "upgrade autotune to use it")
        _require(schema == SCHEMA, f"schema {_show(schema)} is older than {SCHEMA} and cannot be migrated"
                 + (" (only a file without a schema field is read as schema 0)" if schema == 0 else ""))
    while schema < SCHEMA:
        document = MIGRATIONS[schema](document)
        schema = document["schema"]
    entries = document.get("entries")
    _require(isinstance(entries, dict), "'entries' is missing or not an object")
    return {key: Entry.from_dict(entry, key) for key, entry in entries.items()}, migrated_from


def _unavailable(what: str, path: Path, exc: OSError) -> CacheUnavailable:
    return CacheUnavailable(f"cannot {what} the cache at {path}: {exc.strerror or exc}")


class Cache:
    def __init__(self, directory: str | os.PathLike) -> None:
        if not str(os.fspath(directory)).strip():  # Path("") would be the current directory
            raise CacheUnavailable("the cache folder is an empty path; give a folder")
        self.directory = Path(directory)
        self.path = self.directory / CACHE_FILE
        self.notices: list[str] = []  # what the user must be told (a file moved aside, …)

    def _target(self) -> Path:
        """The file written: the cache file, or the file it is a symbolic link to (a link
        stays a link). Its folder holds the lock and the temporary files."""
        return Path(os.path.realpath(self.path))

    @property
    def lock_path(self) -> Path:
        return self._target().parent / LOCK_FILE

    # -- locking and raw I/O ----------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        # The lock file is never followed through a link nor waited on as a FIFO: a file
        # planted at its name must not make a writer create or truncate something elsewhere.
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_path, flags, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise CacheUnavailable(f"cannot lock the cache at {self.directory}: "
                                       f"{self.lock_path} is a symbolic link") from None
            raise _unavailable("lock", self.directory, exc) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise CacheUnavailable(f"cannot lock the cache at {self.directory}: "
                                       f"{self.lock_path} is not a regular file")
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _read_bytes(self) -> bytes | None:
        try:
            return read_regular_file(self.path)
        except FileNotFoundError:
            return None
        except NotAFile as exc:
            raise CacheUnavailable(f"cannot read the cache: {exc}") from None
        except OSError as exc:
            raise _unavailable("read", self.path, exc) from None

    def _read_unlocked(self) -> dict[str, Entry]:
        raw = self._read_bytes()
        if raw is None:
            return {}
        try:
            entries, migrated_from = parse_document(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            self._move_aside(f"not UTF-8 text (byte {exc.start})")
            return {}
        except DamagedCache as exc:
            self._move_aside(str(exc))
            return {}
        if migrated_from is not None:
            kept = self._unused_name(f"{CACHE_FILE}.schema-{migrated_from}")
            try:
                kept.write_bytes(raw)
            except OSError as exc:
                raise _unavailable("write", kept, exc) from None
            self._write_unlocked(entries)
            self.notices.append(f"cache {self.path} used schema {migrated_from}; migrated it to schema "
                                f"{SCHEMA} (the original is kept at {kept})")
        return entries

    def _unused_name(self, name: str) -> Path:
        """A path in the cache folder that does not exist yet (call under the lock)."""
        folder = self._target().parent
        target, n = folder / name, 0
        while target.exists() or target.is_symlink():
            n += 1
            target = folder / f"{name}.{n}"
        return target

    def _move_aside(self, reason: str) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = self._unused_name(f"{CACHE_FILE}.damaged-{stamp}-{os.getpid()}")
        try:
            os.replace(self._target(), target)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise _unavailable("move aside", self.path, exc) from None
        reason = " ".join(reason.split())
        self.notices.append(f"cache {self.path} is unusable ({reason}); moved it to {target} "
                            "and started an empty cache")

    def _remove_stale_temporaries(self) -> None:
        """Call under the lock: a temporary file present now was left by a killed writer."""
        for stale in self._target().parent.glob(f"{TMP_PREFIX}*{TMP_SUFFIX}"):
            with contextlib.suppress(OSError):
                stale.unlink()

    def _write_unlocked(self, entries: dict[str, Entry]) -> None:
        self._remove_stale_temporaries()
        document = {"schema": SCHEMA,
                    "entries": {key: entry.to_dict(copy_=False) for key, entry in sorted(entries.items())}}
        target = self._target()
        try:
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=TMP_PREFIX, suffix=TMP_SUFFIX)
        except OSError as exc:
            raise _unavailable("write", target.parent, exc) from None
        try:
            with contextlib.suppress(FileNotFoundError):  # keep a mode the user gave the file
                os.fchmod(fd, target.stat().st_mode & 0o7777)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(document, handle, indent=1, allow_nan=False)
                handle.write("\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        except BaseException as exc:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            if isinstance(exc, OSError):
                raise _unavailable("write", self.path, exc) from None
            raise
        with contextlib.suppress(OSError):
            dir_fd = os.open(target.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    # -- the API ------------------------------------------------------------------------------
    def load(self) -> dict[str, Entry]:
        """All entries. A damaged file is moved aside, an older one migrated, under the lock
        (see notices)."""
        raw = self._read_bytes()
        if raw is None:
            return {}
        try:
            entries, migrated_from = parse_document(raw.decode("utf-8"))
            if migrated_from is None:
                return entries
        except (DamagedCache, UnicodeDecodeError):
            pass
        with self.locked():  # another process may have fixed it meanwhile: look again
            return self._read_unlocked()

    def get(self, key: str) -> Entry | None:
        return self.load().get(key)

    def put(self, key: str, entry: Entry | dict) -> None:
        self.update({key: entry})

    def update(self, entries: dict[str, Entry | dict]) -> None:
        """Merge entries into the file (theirs replace ours for the same key)."""
        self.merge(lambda current: entries)

    def merge(self, change: Callable[[dict[str, Entry]], dict[str, Entry | dict]]) -> dict[str, Entry | dict]:
        """Under the lock: `change(entries on disk now)` returns the entries to write (each
        replaces ours under its key), which are written if there are any; returns them. A
        decision that depends on what is stored (keep the later of two) is made here, so that
        no writer can come in between the look and the write."""
        with self.locked():
            current = self._read_unlocked()
            writes = change(dict(current))
            clean = {}
            for key, entry in writes.items():
                data = entry.to_dict(copy_=False) if isinstance(entry, Entry) else entry
                clean[key] = Entry.from_dict(_json_value(data, f"entry {_show(key)}"), key)
            if clean:
                current.update(clean)
                self._write_unlocked(current)
            return writes

    def remove(self, predicate: Callable[[str, Entry], bool]) -> int:
        with self.locked():
            current = self._read_unlocked()
            keep = {k: v for k, v in current.items() if not predicate(k, v)}
            removed = len(current) - len(keep)
            if removed:
                self._write_unlocked(keep)
            return removed

    def clear(self) -> int:
        return self.remove(lambda key, entry: True)

    def items(self) -> Iterable[tuple[str, Entry]]:
        return self.load().items()
