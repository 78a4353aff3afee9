"""A cache writer run as its own process by tests/test_reliability.py.

    python helpers_cache_writer.py stress DIR WRITER COUNT
        put COUNT small entries, those of make_entry(m=i + 1, n=WRITER + 1) under their keys
        (stress_keys), one put at a time.
    python helpers_cache_writer.py forever DIR SLOTS PAYLOAD
        put large entries for ever, cycling over SLOTS keys (those of m = 1 .. SLOTS); each
        entry carries a sequence number (its "tuned_at"). After each put returns, print
        "<key> <seq>" and flush: a line on stdout means that put was committed.

Importing this file (as tests do) only gives make_entry, key_of and stress_keys.
"""

from __future__ import annotations

import sys
import time


def make_entry(m: int = 64, *, n: int = 8, uid: str = "aten::mm", ms: float = 1.0, candidates: int = 1,
               tuned_at: str = "2026-11-29T00:00:00+00:00") -> dict:
    """An entry of the shape the tuner writes, its digest its fingerprint's (so that it
    belongs under key_of(entry)); `candidates` pads it to make writes slow."""
    from autotune_cli.store.fingerprint import digest_of

    fingerprint = {"device_name": "cpu", "templates": {}}
    cands = [{"uid": uid, "params": {}, "status": "ok", "ms": ms}]
    cands += [{"uid": "triton::mm", "params": {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8,
                                               "num_stages": 3, "num_warps": 4},
               "status": "timeout", "ms": None, "error": f"candidate {i} took longer than 120 s"}
              for i in range(candidates - 1)]
    return {
        "problem": {"op": "mm", "m": m, "n": n, "k": 8, "b": 1, "dtype": "float16", "layout": "nn",
                    "bias": None, "allow_tf32": False, "device": "cpu"},
        "fingerprint": fingerprint,
        "fingerprint_digest": digest_of(fingerprint),
        "winner": {"uid": uid, "params": {}, "ms": ms, "tflops": 0.1},
        "candidates": cands,
        "tuned_at": tuned_at,
    }


def key_of(entry: dict) -> str:
    """The key an entry belongs under: its problem's key and its fingerprint's digest."""
    from autotune_cli.problem import GemmProblem

    return f"{GemmProblem.from_dict(entry['problem']).key()}@{entry['fingerprint_digest']}"


def stress_keys(writer: int, count: int) -> list[str]:
    return [key_of(make_entry(m=i + 1, n=writer + 1)) for i in range(count)]


def stress(directory: str, writer: int, count: int) -> None:
    from autotune_cli.store.cache import Cache

    cache = Cache(directory)
    for i in range(count):
        entry = make_entry(m=i + 1, n=writer + 1)
        cache.put(key_of(entry), entry)


def forever(directory: str, slots: int, payload: int) -> None:
    from autotune_cli.store.cache import Cache

    cache = Cache(directory)
    seq = time.time_ns()  # grows across writer processes, so the newest put has the largest
    while True:
        seq += 1
        entry = make_entry(m=seq % slots + 1, candidates=payload, tuned_at=str(seq))
        key = key_of(entry)
        cache.put(key, entry)
        sys.stdout.write(f"{key} {seq}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    mode, directory, *rest = sys.argv[1:]
    if mode == "stress":
        stress(directory, int(rest[0]), int(rest[1]))
    elif mode == "forever":
        forever(directory, int(rest[0]), int(rest[1]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
