"""The list a record writes: its counts added to those the file holds (shapes_file.py's
format), written to a temporary file and `os.replace`d under a lock beside it; a file there
that is not such a list is moved aside, never overwritten."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import uuid
from pathlib import Path

from ..errors import UserError
from ..model.shapes_file import counted_from_entry, entry_of
from ..problem import GemmProblem

__all__ = ["NAMED_SKIPS", "write_list"]

NAMED_SKIPS = 4  # the skipped problems named on the exit line; the rest are counted


def write_list(path: Path, problems: dict[GemmProblem, int], skipped: dict[str, int],
           groups: dict[GemmProblem, int] | None = None) -> str:
    """Add `problems` and the `groups`' one GEMMs to the list at `path`; the line that tells
    the user what happened."""
    calls = sum(problems.values())
    groups = groups or {}
    line = f"autotune record: {_count(len(problems), 'matmul problem')} ({_count(calls, 'call')})"
    if groups:
        line += (f" and {_count(len(groups), 'GEMM')} of linears of one input as one "
                 f"({_count(sum(groups.values()), 'group')}, for autotune_cli.compile)")
    if problems:
        try:
            line += _merge(path, problems, groups)
        except OSError as exc:
            line += f" NOT written: cannot write {path}: {exc.strerror or exc}"
    else:
        line += f", {path} left as it was"
    if skipped:
        names = sorted(skipped, key=lambda name: -skipped[name])
        shown = ", ".join(f"{name} x{skipped[name]}" for name in names[:NAMED_SKIPS])
        more = f" and {len(names) - NAMED_SKIPS} more" if len(names) > NAMED_SKIPS else ""
        line += f"; skipped {_count(sum(skipped.values()), 'call')} autotune cannot tune: {shown}{more}"
    return line


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _merge(path: Path, problems: dict[GemmProblem, int], groups: dict[GemmProblem, int]) -> str:
    """Under a lock beside the file: read it, add the counts, replace it atomically. A file
    that is not a list this module can read is moved aside (kept) and a new one started."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        counts, note = _existing(path)
        for group, counted in ((False, problems), (True, groups)):
            for problem, count in counted.items():
                key = _key(entry_of(problem, group=group))
                counts[key] = counts.get(key, 0) + count
        entries = [dict(json.loads(key), count=count) for key, count in counts.items()]
        _replace(path, '{"problems": [\n' + ",\n".join(json.dumps(entry) for entry in entries) + "\n]}\n")
    finally:
        os.close(fd)  # releases the lock
    return f" written to {path} ({len(entries)} in all){note}"


def _key(entry: dict) -> str:
    return json.dumps({name: value for name, value in entry.items() if name != "count"})


def _existing(path: Path) -> tuple[dict[str, int], str]:
    """{entry key: count} of the list at `path`, in its order ({} when there is none), and a
    note when a file there could not be read and was moved aside."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # as --from reads it: a byte-order mark or none
    except FileNotFoundError:
        return {}, ""
    try:
        data = json.loads(text)
        data = data["problems"] if isinstance(data, dict) else data
        if not isinstance(data, list):
            raise ValueError("not a list of problems")
        counts: dict[str, int] = {}
        for entry in data:
            problem, count = counted_from_entry(entry, "cpu")  # the file has no device
            key = _key(entry_of(problem, group=entry.get("group") is True))
            counts[key] = counts.get(key, 0) + count
        return counts, ""
    except (ValueError, KeyError, TypeError, UserError) as exc:
        aside, n = path.with_name(f"{path.name}.unreadable"), 0
        while aside.exists():
            n += 1
            aside = path.with_name(f"{path.name}.unreadable.{n}")
        os.replace(path, aside)
        return {}, f"; the file there was not a list of problems ({exc}): moved to {aside}"


def _replace(path: Path, text: str) -> None:
    """`text` as the file at `path`, written whole or not at all, with the file's own mode
    where there is one, else a new file's under the umask (mkstemp's 0600 would keep `mm
    --from` run by another user or container from reading the list; the umask is applied
    by the open itself, never changed: record runs inside the user's program)."""
    tmp = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.fchmod(fd, stat.S_IMODE(path.stat().st_mode))
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
