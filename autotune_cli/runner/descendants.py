"""A worker's descendants, found and killed: what a candidate started that left the worker's
process group (its own group, a `setsid` daemon) is not reached by killing that group, and
it would keep the command's stdout and stderr open after the command ends (a reader of
`autotune ... --json | jq` waits on it).

A worker makes itself a child subreaper (Linux: PR_SET_CHILD_SUBREAPER), so an orphaned
descendant (a daemon whose parent exited) becomes its child instead of init's and stays in
its tree. The tree is read from /proc (each task's `children` file, else every process's
parent from its `stat`). Best effort: where /proc or prctl is missing nothing is found,
and a process forked while the tree is read may be missed.
"""

from __future__ import annotations

import os
import signal

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Adopt this process's orphaned descendants (Linux); a no-op elsewhere."""
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _children(pid: int) -> list[int] | None:
    """The children of `pid` from /proc/PID/task/*/children; None where the kernel has no
    such file."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []  # gone
    found: list[int] = []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found.extend(int(word) for word in handle.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task"):
                return []
            return None
        except (OSError, ValueError):
            continue
    return found


def _parents() -> dict[int, list[int]]:
    """Every process's children, from each /proc/PID/stat's parent field."""
    below: dict[int, list[int]] = {}
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return below
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            below.setdefault(int(fields[1]), []).append(pid)
        except (OSError, IndexError, ValueError):
            continue
    return below


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children first), as /proc shows them now."""
    found: list[int] = []
    table: dict[int, list[int]] | None = None
    queue = [pid]
    while queue:
        parent = queue.pop(0)
        children = _children(parent) if table is None else table.get(parent, [])
        if children is None:  # no children files: read every process's parent once
            table = _parents()
            children = table.get(parent, [])
        for child in children:
            if child not in found and child != pid:
                found.append(child)
                queue.append(child)
    return found


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def kill_descendants(pid: int, escaped_only: bool = False) -> int:
    """SIGKILL each descendant of `pid` (a worker; its own pid where it asks for itself), or
    with `escaped_only` those outside its process group (the group is killed as a whole
    elsewhere). Returns how many were signalled. Zombies are left to their parent's wait."""
    try:
        group = os.getpgid(pid)
    except OSError:
        group = None
    killed = 0
    for child in descendants(pid):
        if _state(child) in ("Z", "X"):
            continue
        try:
            if escaped_only and group is not None and os.getpgid(child) == group:
                continue
            os.kill(child, signal.SIGKILL)
            killed += 1
        except OSError:
            continue
    return killed

