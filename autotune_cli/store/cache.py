"""The cache: one JSON document of tuning results. This module and cache_document.py alone know
the file.

Layout (schema 1): {"schema": 1, "entries": {key: entry}}; key = "<problem key>@<fingerprint
digest>" (entry.CacheKey); each entry is read into, and written from, an entry.Entry, which
checks its fields on the way in. Other top-level fields (an export's "exported_at", ...) are accepted on reading and
not written back. Writes take an exclusive lock, re-read the file, merge, write a temporary
file in the same folder, fsync it and `os.replace` it over the old one: a reader sees the old
document or the new one, never a torn one, and a writer never drops what another wrote in
between. Temporary files exist only while a writer holds the lock, so any that a writer
holding it finds were left by a writer killed mid-write; it deletes them.

An entry that does not agree with its key (another problem, another fingerprint: see
Entry.disagreement) is not used: readers never see it, the user is told once, and the next
write leaves it out; nothing is written under a key its entry does not agree with.

A file of a newer schema (cache_document.NewerSchema) is a newer autotune's sharing the
folder: never moved aside, rewritten nor merged into, which would lose its winners. A reader
reads it as empty and is told once (`newer_schema`); a writer raises NewerCache (one line,
exit 2) before it changes anything; `check_writable` lets a command refuse before its work.

A file that cannot be used (not JSON, not UTF-8, an older schema it cannot read) is moved
aside under a name that is never reused (kept byte for byte), the user is told in one line,
and work carries on with an empty cache. An entry of the wrong shape takes only itself out of use: the
file is copied aside as it is (the same name), then rewritten without it, and the user is
told in one line; the other entries are used as before. Numbers must be finite:
JSON has no NaN or infinity, so a non-finite number in an entry being stored (a candidate's
error of inf when it wrote NaN) is stored as null. A cache folder that cannot be read or
written at all raises CacheUnavailable, a UserError: one line, exit 2; so does a cache file
that is a symbolic link or another user's. Every file this module writes, renames or deletes
is in the cache folder (a link there is replaced, never followed): a link to a user's file
must not get that file moved aside or overwritten.

How the document is read (bounded, strict JSON, schema and migrations) is
cache_document.py's.

This module imports neither torch nor triton.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ..safe_read import NotAFile
from . import CacheStore
from .cache_document import SCHEMA, NewerSchema, json_value, parse_document, read_cache_file
from .entry import Entry
from .entry_checks import DamagedCache, require, show_value
from ..errors import UserError
from ..text import not_utf8, printable

CACHE_FILE = "autotune-cache.json"
LOCK_FILE = ".autotune-cache.lock"
TMP_PREFIX, TMP_SUFFIX = ".autotune-cache.", ".tmp"


_TOLD: set[tuple[str, str, str]] = set()  # (cache file, key or "", why) of notices told already


class CacheUnavailable(UserError):
    """The cache folder or file cannot be read or written at all (a permission, a file
    where the folder should be, a full disk, a FIFO or a device in the file's place).
    `errno`: the OSError's, where one was the cause."""

    def __init__(self, message: str, errno_: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno_


class NewerCache(CacheUnavailable):
    """The cache file was written by a newer autotune (`schema`): this one must not write it."""

    def __init__(self, path: Path, schema: int) -> None:
        super().__init__(f"cache {path} was written by a newer autotune (schema {show_value(schema)}; this one "
                         f"writes {SCHEMA}): it is left as it is; upgrade autotune, or use another --cache-dir "
                         "or AUTOTUNE_CACHE_DIR")
        self.schema = schema


# a folder the user may read but not write (a deployed cache, a read-only mount): a reader
# leaves a damaged file as it is and works from what it can use
READ_ONLY_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def _damaged_name() -> str:
    """The name a damaged file's bytes are kept under (made unique by Cache._unused_name)."""
    return f"{CACHE_FILE}.damaged-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


LEFT_AS_IT_IS = "the folder cannot be written, so the file is left as it is"


def _damage_text(damaged: dict[str, str]) -> str:
    """The first damaged entry and why, and how many more."""
    key, why = next(iter(damaged.items()))
    more = f" and {len(damaged) - 1} more" if len(damaged) > 1 else ""
    return f"entry {show_value(key)} is damaged ({' '.join(why.split())}){more}"


def _repeat_text(repeated: dict[str, int]) -> str:
    """The first key the file held more than once, how many times, and how many more such."""
    key, copies = next(iter(repeated.items()))
    more = f" (and {len(repeated) - 1} more keys)" if len(repeated) > 1 else ""
    return f"entry {show_value(key)} is in the file {copies} times{more}"


def _others(entries: dict) -> str:
    return f"{len(entries)} other entr{'y' if len(entries) == 1 else 'ies'}"


def _unavailable(what: str, path: Path, exc: OSError) -> CacheUnavailable:
    return CacheUnavailable(f"cannot {what} the cache at {path}: {exc.strerror or exc}", exc.errno)


class Cache(CacheStore):
    """The cache file (see the module): a CacheStore, and what the cache commands use of
    the file besides (merge, remove, clear, items)."""

    def __init__(self, directory: str | os.PathLike) -> None:
        if not str(os.fspath(directory)).strip():  # Path("") would be the current directory
            raise CacheUnavailable("the cache folder is an empty path; give a folder")
        self.directory = Path(directory)
        self.path = self.directory / CACHE_FILE
        self.notices: list[str] = []  # what the user must be told (a file moved aside, …)
        # {key: why} of the entries the file held at its last read that are not used (not
        # under their key): the next write drops them
        self.unused: dict[str, str] = {}
        # the schema of the file at its last read where a newer autotune wrote it (read as empty)
        self.newer_schema: int | None = None
        # (the file's stamp, its entries) as last read or written: a list of problems looks
        # each one up, and parsing the whole file per lookup made a list of hits quadratic
        self._memo: tuple[tuple, dict[str, Entry]] | None = None

    def _refuse(self, refused: dict[str, str]) -> None:
        """Tell of entries that do not belong under their keys, each once in this process
        (a command reads the file several times, through several Cache objects)."""
        self.unused = dict(refused)
        for key, why in refused.items():
            self._tell_once((key, why), printable(f"cache entry {key} is not used: {why}; "
                                                  "it is dropped at the next write"))

    @property
    def lock_path(self) -> Path:
        return self.directory / LOCK_FILE

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
            if isinstance(exc, (FileExistsError, NotADirectoryError)):
                # a file where the folder (or one above it) should be: said as a read says it
                raise _unavailable("read", self.path, NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
                                   ) from None
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
            return read_cache_file(self.path, ours=True)
        except FileNotFoundError:
            return None
        except NotAFile as exc:
            raise CacheUnavailable(f"cannot read the cache: {exc}") from None
        except OSError as exc:
            raise _unavailable("read", self.path, exc) from None

    def _newer(self, exc: NewerSchema, writing: bool) -> dict[str, Entry]:
        """A newer autotune's file: NewerCache for a writer; for a reader, no entries and a
        notice (once), the file left as it is."""
        self.newer_schema = exc.schema
        if writing:
            raise NewerCache(self.path, exc.schema)
        self._tell_once(("", "newer"), f"cache {self.path} was written by a newer autotune (schema "
                                       f"{show_value(exc.schema)}; this one reads {SCHEMA}): left as it is "
                                       "and read as empty; upgrade autotune to use its entries")
        return {}

    def _read_unlocked(self, repair: bool = True, writing: bool = False) -> dict[str, Entry]:
        """The file's entries; a damaged or older file is set right on disk (see the module),
        or, `repair` False (a folder this user cannot write), only in what is returned.
        `writing`: the caller writes what it read back (a newer autotune's file refuses it)."""
        self.unused = {}
        self.newer_schema = None
        raw = self._read_bytes()
        if raw is None:
            return {}
        try:
            entries, migrated_from, refused, damaged, repeated = parse_document(raw.decode("utf-8"))
        except NewerSchema as exc:
            return self._newer(exc, writing)
        except (UnicodeDecodeError, DamagedCache) as exc:
            reason = not_utf8(exc) if isinstance(exc, UnicodeDecodeError) else str(exc)
            if repair:
                self._move_aside(reason)
            else:
                self._tell_once(("", "unusable"), f"cache {self.path} is unusable ({' '.join(reason.split())}); "
                                            f"{LEFT_AS_IT_IS}, read as empty")
            return {}
        self._refuse(refused)
        if migrated_from is None and not damaged and not repeated:
            return entries
        if not repair:
            if damaged:
                self._tell_once(("", "damaged"), printable(f"cache {self.path}: {_damage_text(damaged)}; left out, "
                                                     f"{_others(entries)} used ({LEFT_AS_IT_IS})"))
            if repeated:
                self._tell_once(("", "repeated"), printable(f"cache {self.path}: {_repeat_text(repeated)}; the copy "
                                                      f"tuned latest is used ({LEFT_AS_IT_IS})"))
            return entries
        # rewritten as this autotune writes it, the file as it was kept beside it first
        kept = self._keep_copy(raw, f"{CACHE_FILE}.schema-{migrated_from}" if migrated_from is not None
                               else _damaged_name())
        self._write_unlocked(entries)
        if migrated_from is not None:
            self.notices.append(f"cache {self.path} used schema {migrated_from}; migrated it to schema "
                                f"{SCHEMA} (the original is kept at {kept})")
        if damaged:
            self.notices.append(printable(f"cache {self.path}: {_damage_text(damaged)}; left out, the "
                                          f"{_others(entries)} kept (the file as it was is at {kept})"))
        if repeated:
            self.notices.append(printable(f"cache {self.path}: {_repeat_text(repeated)}; the copy tuned "
                                          f"latest is kept (the file as it was is at {kept})"))
        return entries

    def _tell_once(self, what: tuple[str, str], notice: str) -> None:
        """A notice said once per process for this file and `what` (a command reads the file
        several times, through several Cache objects; a reader that cannot set the file
        right reads it again at each lookup)."""
        told = (str(self.path), *what)
        if told not in _TOLD:
            _TOLD.add(told)
            self.notices.append(notice)

    def _keep_copy(self, raw: bytes, name: str) -> Path:
        """Write `raw` to a new file of the cache folder named `name` (or `name`.N); its path.
        A new file (O_EXCL): never one planted at the name, nor a link's target."""
        kept = self._unused_name(name)
        try:  # as private as the file it copies (a cache file is made 0600)
            mode = stat.S_IMODE(self.path.lstat().st_mode) if self.path.exists() else 0o600
            fd = os.open(kept, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), mode)
            with os.fdopen(fd, "wb") as handle:
                handle.write(raw)
        except OSError as exc:
            raise _unavailable("write", kept, exc) from None
        return kept

    def _unused_name(self, name: str) -> Path:
        """A path in the cache folder that does not exist yet (call under the lock)."""
        folder = self.directory
        target, n = folder / name, 0
        while target.exists() or target.is_symlink():
            n += 1
            target = folder / f"{name}.{n}"
        return target

    def _move_aside(self, reason: str) -> None:
        target = self._unused_name(_damaged_name())
        try:
            os.replace(self.path, target)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise _unavailable("move aside", self.path, exc) from None
        reason = " ".join(reason.split())
        self.notices.append(f"cache {self.path} is unusable ({reason}); moved it to {target} "
                            "and started an empty cache")

    def _remove_stale_temporaries(self) -> None:
        """Call under the lock: a temporary file present now was left by a killed writer."""
        for stale in self.directory.glob(f"{TMP_PREFIX}*{TMP_SUFFIX}"):
            with contextlib.suppress(OSError):
                stale.unlink()

    def _write_unlocked(self, entries: dict[str, Entry]) -> None:
        self._remove_stale_temporaries()
        document = {"schema": SCHEMA,
                    "entries": {key: entry.to_dict(copy_=False) for key, entry in sorted(entries.items())}}
        # The new file replaces the name in the cache folder (os.replace never follows a link
        # there): a file elsewhere is never written, whatever was put at the name meanwhile.
        target = self.path
        try:
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=TMP_PREFIX, suffix=TMP_SUFFIX)
        except OSError as exc:
            raise _unavailable("write", self.directory, exc) from None
        try:
            with contextlib.suppress(FileNotFoundError):  # keep a mode the user gave the file
                mode = target.lstat().st_mode
                if stat.S_ISREG(mode):
                    os.fchmod(fd, mode & 0o7777)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(document, handle, indent=1, allow_nan=False)
                handle.write("\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
            self._memo = None
        except BaseException as exc:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            if isinstance(exc, OSError):
                raise _unavailable("write", self.path, exc) from None
            raise
        stamp = self._stamp()  # under the lock: what was just written, no other writer's
        self._memo = None if stamp is None else (stamp, dict(entries))
        with contextlib.suppress(OSError):
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    def _stamp(self) -> tuple | None:
        """What changes when the file is replaced or written (every write replaces it: a new
        inode), or None where there is no regular file to remember."""
        try:
            info = os.lstat(self.path)
        except OSError:
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)

    def _entries(self) -> dict[str, Entry]:
        """The file's entries (never to be changed: callers copy), read and parsed again only
        when the file changed since the last read or write of this Cache."""
        stamp = self._stamp()
        if stamp is not None and self._memo is not None and self._memo[0] == stamp:
            return self._memo[1]
        entries = self._read()
        # remembered only when nothing replaced the file while it was read
        self._memo = (stamp, entries) if stamp is not None and self._stamp() == stamp else None
        return entries

    # -- the API ------------------------------------------------------------------------------
    def load(self) -> dict[str, Entry]:
        """All entries. A damaged file is moved aside, an older one migrated, under the lock
        (see notices)."""
        return dict(self._entries())

    def _read(self) -> dict[str, Entry]:
        self.unused = {}
        self.newer_schema = None
        raw = self._read_bytes()
        if raw is None:
            return {}
        try:
            entries, migrated_from, refused, damaged, repeated = parse_document(raw.decode("utf-8"))
            if migrated_from is None and not damaged and not repeated:
                self._refuse(refused)
                return entries
        except NewerSchema as exc:  # nothing to set right: no lock taken
            return self._newer(exc, writing=False)
        except (DamagedCache, UnicodeDecodeError):
            pass
        try:
            with self.locked():  # another process may have fixed it meanwhile: look again
                return self._read_unlocked()
        except CacheUnavailable as exc:
            if exc.errno not in READ_ONLY_ERRNOS:
                raise
        return self._read_unlocked(repair=False)

    def check_writable(self) -> None:
        """NewerCache where this autotune must not write the file (a newer autotune's): for a
        command to refuse before its work (a tune, an import, a prune, their dry runs), not
        after it. Reads only."""
        self._entries()
        if self.newer_schema is not None:
            raise NewerCache(self.path, self.newer_schema)

    def get(self, key: str) -> Entry | None:
        return self._entries().get(key)

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
            current = self._read_unlocked(writing=True)
            writes = change(dict(current))
            clean = {}
            for key, entry in writes.items():
                data = entry.to_dict(copy_=False) if isinstance(entry, Entry) else entry
                clean[key] = Entry.from_dict(json_value(data, f"entry {show_value(key)}"), key)
                why = clean[key].disagreement(key)
                require(not why, f"entry {show_value(key)} cannot be stored under its key: {why}")
            if clean:
                current.update(clean)
                self._write_unlocked(current)
            return writes

    def put_with(self, key: str, make: Callable[[Entry | None], Entry | None]) -> Entry | None:
        made: list[Entry] = []

        def change(current: dict[str, Entry]) -> dict[str, Entry]:
            entry = make(current.get(key))
            if entry is None:
                return {}
            made.append(entry)
            return {key: entry}

        self.merge(change)
        return made[0] if made else None

    def _absent(self) -> bool:
        """Whether nothing is at the file's name (CacheUnavailable where that cannot be told:
        a file where the folder should be). Removing from an absent cache removes nothing, so
        it creates neither the folder nor the lock file, as a reader does not."""
        try:
            os.lstat(self.path)
        except FileNotFoundError:
            return True
        except OSError as exc:
            raise _unavailable("read", self.path, exc) from None
        return False

    def remove(self, predicate: Callable[[str, Entry], bool]) -> int:
        if self._absent():
            return 0
        with self.locked():
            current = self._read_unlocked(writing=True)
            keep = {k: v for k, v in current.items() if not predicate(k, v)}
            removed = len(current) - len(keep)
            if removed:
                self._write_unlocked(keep)
            return removed

    def clear(self) -> int:
        """Empty the file, entries not used included (`remove` writes only where it removes
        a used one); how many entries it held."""
        if self._absent():
            return 0
        with self.locked():
            held = len(self._read_unlocked(writing=True)) + len(self.unused)
            if held:
                self._write_unlocked({})
            return held

    def items(self) -> Iterable[tuple[str, Entry]]:
        return self.load().items()
