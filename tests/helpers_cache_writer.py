"""A cache writer run as its own process by tests/test_reliability.py.

    python helpers_cache_writer.py stress DIR NAME COUNT
        put COUNT small entries, keys "<NAME>-<i>@stress", one put at a time.
    python helpers_cache_writer.py forever DIR SLOTS PAYLOAD
        put large entries for ever, cycling over SLOTS keys "slot<j>@crash"; each entry
        carries a sequence number (its "tuned_at"). After each put returns, print
        "<key> <seq>" and flush: a line on stdout means that put was committed.

Importing this file (as tests do) only gives make_entry.
"""

from __future__ import annotations

import sys
import time


def make_entry(m: int = 64, *, uid: str = "aten::mm", ms: float = 1.0, candidates: int = 1,
               tuned_at: str = "2026-11-29T00:00:00+00:00") -> dict:
    """An entry of the shape the tuner writes; `candidates` pads it to make writes slow."""
    cands = [{"uid": uid, "params": {}, "status": "ok", "ms": ms}]
    cands += [{"uid": "triton::mm", "params": {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8,
                                               "num_stages": 3, "num_warps": 4},
               "status": "timeout", "ms": None, "error": f"candidate {i} took longer than 120 s"}
              for i in range(candidates - 1)]
    return {
        "problem": {"op": "mm", "m": m, "n": 8, "k": 8, "b": 1, "dtype": "float16", "layout": "nn",
                    "bias": None, "allow_tf32": False, "device": "cpu"},
        "fingerprint": {"device_name": "cpu", "templates": {}},
        "fingerprint_digest": "f" * 16,
        "winner": {"uid": uid, "params": {}, "ms": ms, "tflops": 0.1},
        "candidates": cands,
        "tuned_at": tuned_at,
    }


def stress(directory: str, name: str, count: int) -> None:
    from autotune_cli.cache import Cache

    cache = Cache(directory)
    for i in range(count):
        cache.put(f"{name}-{i}@stress", make_entry(m=i + 1))


def forever(directory: str, slots: int, payload: int) -> None:
    from autotune_cli.cache import Cache

    cache = Cache(directory)
    seq = time.time_ns()  # grows across writer processes, so the newest put has the largest
    while True:
        seq += 1
        key = f"slot{seq % slots}@crash"
        cache.put(key, make_entry(m=seq % slots + 1, candidates=payload, tuned_at=str(seq)))
        sys.stdout.write(f"{key} {seq}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    mode, directory, *rest = sys.argv[1:]
    if mode == "stress":
        stress(directory, rest[0], int(rest[1]))
    elif mode == "forever":
        forever(directory, int(rest[0]), int(rest[1]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
