"""Reading files others can write: `read_regular_file` reads only a regular file, at most a
given number of bytes, and never waits on it (a FIFO would block, /dev/zero would never end);
`too_deep` says whether parsed JSON nests deeper than its reader should walk (deep nesting
overflows the recursion of the code that walks it).

The cache file and an export (store/cache_document.py), the GPU memo, a `--from` list and a
kernel source check read through here. Imports nothing of the package.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Any


class NotAFile(OSError):
    """What was to be read is not a regular file, or is larger than we read."""


def read_regular_file(path: str | os.PathLike, limit: int, *, ours: bool = False) -> bytes:
    """The bytes of `path`, following symbolic links, if it is a regular file of at most
    `limit` bytes; NotAFile otherwise (OSError as open raises it).
    Opened non-blocking, so a FIFO is refused rather than waited on. `ours`: `path` itself
    must be the regular file, not a link to one, and belong to this user (the cache file:
    what is read is what is later replaced, and only in its own folder)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (os.O_NOFOLLOW if ours else 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if ours and exc.errno == errno.ELOOP:
            raise NotAFile(f"{path} is a symbolic link, not a regular file") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotAFile(f"{path} is not a regular file")
        if ours and info.st_uid != os.geteuid():
            raise NotAFile(f"{path} belongs to another user (uid {info.st_uid})")
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


def too_deep(value: Any, limit: int) -> bool:
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
