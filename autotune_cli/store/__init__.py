"""store/: the persistent cache and what an entry records. results.py is a candidate's
outcome and the pick among them; fingerprint.py what must match for a winner to be reused;
phases.py where a tune's seconds went; entry.py the entry and its key; cache_document.py the
file's JSON and schema; cache.py the file itself (lock, merge, atomic replace). The
`CacheStore` seam (here) is what the tuner, the lookup and scale-out use of a cache.

Imports the package root and hardware/ only; plain Python (no torch, no triton), so a cache
hit is answered without either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    from .entry import Entry


class CacheStore(Protocol):
    """Everything the tuner (tune/tuner.py, tune/progress.py), the lookup (tune/hits.py) and
    scale-out use of a cache: the file (cache.Cache), or entries held in memory
    (scaleout/common.MemoryCache: a Ray actor's, handed to the driver, which alone writes)."""

    # What reading found that the user must be told (a damaged file moved aside, an entry
    # refused), oldest first: whoever tells them pops them.
    notices: list[str]

    def get(self, key: str) -> Entry | None:
        """The entry stored under `key` (a CacheKey's text), or None."""
        ...

    def put(self, key: str, entry: Entry) -> None:
        """Store `entry` under `key`, replacing what was there."""
        ...

    def put_with(self, key: str, make: Callable[[Entry | None], Entry | None]) -> Entry | None:
        """Store under `key` what `make(the entry stored there now, or None)` returns (None:
        leave it as it is), the look and the write one step that no other writer comes
        between; returns what was stored."""
        ...

    def load(self) -> dict[str, Entry]:
        """Every entry, by key (a copy: changing it changes nothing stored)."""
        ...
