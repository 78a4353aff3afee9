"""The cache file's document: its bytes read safely (a regular file, at most MAX_FILE_BYTES),
its JSON read strictly (finite numbers, at most MAX_DEPTH deep), its schema checked and older
schemas migrated (parse_document), and the plain JSON an entry is stored as (json_value).
cache.py reads and writes the file through these.

Only a regular file is read (a FIFO would block, /dev/zero would never end), and at most
MAX_FILE_BYTES of it; nesting deeper than MAX_DEPTH is damage (no entry we write is more than a
few levels deep, and deeper documents overflow the recursion of the code that walks them).
The cache file itself must be a regular file of this user's, not a symbolic link
(read_cache_file's `ours`): cache.py replaces and moves aside only the file in its folder, so
a link to a file elsewhere is refused rather than followed to it.

Before the template set left the key, a key's digest was that of the entry's whole
fingerprint, templates included, so each template selection made its own entry. An entry
under such a key is re-keyed as it is read (its problem and its machine's digest): of several
for one problem and machine, one under the current key stays, else the latest tuned; the
others are refused like any entry that does not belong under its key.

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

A schema newer than SCHEMA is no damage: a newer autotune sharing the folder wrote it. It
raises NewerSchema (a DamagedCache, so that an import refuses it as it refuses any document it
cannot read), which cache.py never moves aside: its winners are that autotune's to use.

This module imports neither torch nor triton.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from typing import Any, Callable, NamedTuple

from ..safe_read import read_regular_file, too_deep
from .entry import Entry, check_problem, key_for, tuned_time
from .entry_checks import DamagedCache, require, show_value
from .fingerprint import digest_of, legacy_digest_of

SCHEMA = 1
MAX_FILE_BYTES = 256 * 2**20  # a cache of many thousands of entries is a few MB
MAX_DEPTH = 64  # containers within containers: our own entries need fewer than ten


class NewerSchema(DamagedCache):
    """The document is of a schema newer than this autotune reads (`schema`): written by a
    newer autotune, not damaged."""

    def __init__(self, schema: int) -> None:
        super().__init__(f"schema {show_value(schema)} is newer than this autotune understands ({SCHEMA}); "
                         "upgrade autotune to use it")
        self.schema = schema


def read_cache_file(path: str | os.PathLike, *, ours: bool = False) -> bytes:
    """The bytes of a cache file or an export, read as safe_read.read_regular_file reads (a
    regular file only; `ours`: not a link, and this user's), at most MAX_FILE_BYTES."""
    return read_regular_file(path, MAX_FILE_BYTES, ours=ours)


def json_value(value: Any, where: str) -> Any:
    """A copy of value as plain JSON: tuples become lists, NaN and infinity become null."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Integral):  # numpy's too
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        require(all(isinstance(k, str) for k in value), f"{where}: an object key is not a string")
        return {k: json_value(v, where) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v, where) for v in value]
    raise DamagedCache(f"{where}: a {type(value).__name__} cannot be stored in JSON")


def _reject_constant(name: str) -> Any:
    raise DamagedCache(f"not valid JSON ({name} is not a JSON number)")


def _finite_float(text: str) -> float:
    value = float(text)
    require(math.isfinite(value), f"the number {text[:20]} is out of range")
    return value


class _Repeated(dict):
    """A JSON object that gave a name more than once (two caches pasted into one file, a
    merge gone wrong): as JSON readers take it (the last copy of each), with every copy of
    each repeated name kept in `copies`, so that none is dropped unseen."""

    copies: dict[str, list[Any]]


def _object(pairs: list[tuple[str, Any]]) -> dict:
    """json's object_pairs_hook: a dict, or a _Repeated where a name came more than once."""
    obj: dict[str, Any] = {}
    copies: dict[str, list[Any]] = {}
    for name, value in pairs:
        if name in obj:
            copies.setdefault(name, [obj[name]]).append(value)
        obj[name] = value
    if not copies:
        return obj
    repeated = _Repeated(obj)
    repeated.copies = copies
    return repeated


def _repeats_within(value: Any) -> str | None:
    """The first name given twice in one object anywhere inside `value`, or None."""
    if isinstance(value, _Repeated):
        return next(iter(value.copies))
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for child in children:
        found = _repeats_within(child)
        if found is not None:
            return found
    return None


def _every_entry(document: dict) -> tuple[Any, dict[str, int]]:
    """The document's "entries" with every copy of a key that came more than once (in one
    "entries" object, or in "entries" given twice) as a list of its copies, and how many
    copies each such key had."""
    blocks = document.copies.get("entries") if isinstance(document, _Repeated) else None
    if blocks is None:
        blocks = [document.get("entries")]
    if not all(isinstance(block, dict) for block in blocks):
        return document.get("entries"), {}
    merged: dict[str, list[Any]] = {}
    for block in blocks:
        for key, value in block.items():
            merged.setdefault(key, []).extend(block.copies[key] if isinstance(block, _Repeated)
                                              and key in block.copies else [value])
    repeated = {key: len(copies) for key, copies in merged.items() if len(copies) > 1}
    return merged, repeated


def _migrate_0(document: dict) -> dict:
    from .fingerprint import Fingerprint  # plain Python: no torch

    old = document.get("entries")
    require(isinstance(old, dict), "schema 0: 'entries' is not an object")
    entries: dict[str, dict] = {}
    for old_key, entry in old.items():
        where = f"schema 0 entry {show_value(old_key)} cannot be migrated"
        require(isinstance(entry, dict), f"{where}: not an object")
        problem = check_problem(old_key, entry.get("problem"))
        require(isinstance(entry.get("fingerprint"), dict), f"{where}: no fingerprint object")
        missing = [name for name in Fingerprint.__dataclass_fields__
                   if name != "templates" and name not in entry["fingerprint"]]
        require(not missing, f"{where}: its fingerprint lacks {', '.join(missing)}")
        try:
            fingerprint = Fingerprint.from_dict(entry["fingerprint"])
            digest, machine = fingerprint.digest(), fingerprint.machine_digest()
        except (TypeError, ValueError) as exc:
            raise DamagedCache(f"{where}: its fingerprint is malformed ({show_value(str(exc))})") from None
        key = key_for(problem, digest)
        require(key not in entries, f"{where}: it and another entry both become {show_value(key)}")
        entries[key] = {**entry, "fingerprint_digest": digest, "machine": machine}
    return {**document, "schema": 1, "entries": entries}


# Older schemas that can be brought forward: {version: function(document) -> document}.
# The unversioned layout counts as schema 0 (see the module docstring).
MIGRATIONS: dict[int, Callable[[dict], dict]] = {0: _migrate_0}


class Document(NamedTuple):
    entries: dict[str, Entry]  # those that agree with their keys
    migrated_from: int | None  # the schema it was migrated from; None if it was current
    refused: dict[str, str]  # key -> why the entry under it does not belong there
    damaged: dict[str, str]  # key -> what in the entry under it is not what autotune writes
    # key -> how many copies of it the file held (the latest tuned of them is in `entries`)
    repeated: dict[str, int] = {}


def parse_document(text: str) -> Document:
    """The entries of a cache document, typed, and the schema it was migrated from (None if
    it was current). Raises DamagedCache with a one-line reason where the document itself is
    not one autotune writes; an entry of the wrong shape is left out and named in `damaged`
    (one bad entry does not take the others out of use).

    Every reader of entries (a hit, the API, torch.compile's routing, show, export, import)
    comes through here, so this is where an entry must agree with its key (Entry.disagreement):
    one that does not is left out of `entries` and named in `refused`, never used."""
    try:
        document = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float,
                              object_pairs_hook=_object)
    except json.JSONDecodeError as exc:
        raise DamagedCache(f"not valid JSON: {exc.msg}, line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise DamagedCache("not valid JSON (nested too deeply)") from None
    except DamagedCache:
        raise
    except ValueError:  # an integer of more digits than Python converts
        raise DamagedCache("not valid JSON (a number too long to read)") from None
    require(isinstance(document, dict), "the top level is not an object")
    require(not too_deep(document, MAX_DEPTH), f"nested more than {MAX_DEPTH} deep")
    if "schema" not in document and "entries" in document:
        schema, migrated_from = 0, 0
    else:
        schema, migrated_from = document.get("schema"), None
        require("schema" in document, "no schema version")
        require(isinstance(schema, int) and not isinstance(schema, bool),
                 f"schema {show_value(schema)} is not a version number (a whole number such as {SCHEMA})")
        if schema > SCHEMA:
            raise NewerSchema(schema)
        require(schema == SCHEMA, f"schema {show_value(schema)} is older than {SCHEMA} and cannot be migrated"
                 + (" (only a file without a schema field is read as schema 0)" if schema == 0 else ""))
    while schema < SCHEMA:
        document = MIGRATIONS[schema](document)
        schema = document["schema"]
    entries, repeated = _every_entry(document)
    require(isinstance(entries, dict), "'entries' is missing or not an object")
    kept: dict[str, Entry] = {}
    refused: dict[str, str] = {}
    damaged: dict[str, str] = {}
    older: dict[str, list[tuple[str, Entry]]] = {}  # new key -> [(old key, re-keyed entry)]
    for key, copies in entries.items():
        try:
            data, entry = _latest_copy(key, copies if isinstance(copies, list) else [copies])
            why = entry.disagreement(key)
            rekeyed = None if not why else _rekeyed(key, data, entry)
        except DamagedCache as exc:  # its reason, less the "entry '<key>'" that starts it
            damaged[key] = str(exc).removeprefix(f"entry {show_value(key)}").removeprefix(":").strip()
            continue
        if not why:
            kept[key] = entry
            continue
        if rekeyed is None:
            refused[key] = why
        else:
            older.setdefault(str(rekeyed.key()), []).append((key, rekeyed))
    for new_key, found in older.items():
        # One entry per problem and machine: one stored under the current key stays, else
        # the latest tuned of those stored under the template-dependent keys of before.
        found.sort(key=lambda item: (item[1].winner is not None, str(item[1].tuned_at or "")))
        if new_key not in kept:
            kept[new_key] = found.pop()[1]
        for old_key, _ in found:
            refused[old_key] = "another entry of its problem and machine, tuned later, is kept"
    return Document(kept, migrated_from, refused, damaged, repeated)


def _latest_copy(key: str, copies: list[Any]) -> tuple[Any, Entry]:
    """(data, Entry) of the copy of `key`'s entry tuned latest of those that read (the last
    given of equals); DamagedCache if none does. A name given twice inside an entry damages it."""
    best: tuple[tuple, Any, Entry] | None = None
    error: DamagedCache | None = None
    for order, data in enumerate(copies):
        try:
            twice = _repeats_within(data)
            require(twice is None, f"entry {show_value(key)}: {show_value(twice)} is given twice in it")
            entry = Entry.from_dict(data, key)
        except DamagedCache as exc:
            error = error or exc
            continue
        when = tuned_time(entry)
        rank = (when is not None, when.timestamp() if when is not None else 0.0, order)
        if best is None or rank > best[0]:
            best = (rank, data, entry)
    if best is None:
        raise error
    return best[1], best[2]


def _rekeyed(key: str, data: dict, entry: Entry) -> Entry | None:
    """The entry under its current key if `key` is the one it had before the template set
    left the key (its problem and the digest of its whole fingerprint, templates included);
    None otherwise. Such an entry is used again (hits.py still holds its winner to the
    templates it records), not tuned again."""
    legacy = legacy_digest_of(entry.fingerprint)
    if key != key_for(entry.problem, legacy) or entry.fingerprint_digest not in (None, legacy):
        return None
    digest = digest_of(entry.fingerprint)
    fields = dict(data, fingerprint_digest=digest) if "fingerprint_digest" in data else data
    rekeyed = Entry.from_dict(fields, key_for(entry.problem, digest))
    return None if rekeyed.disagreement(key_for(entry.problem, digest)) else rekeyed
