"""A cache entry as typed values: `CacheKey`, `Winner`, `Entry`.

The cache file (cache.py) holds {key: entry} as JSON. This module is the one place that
knows an entry's fields and the key's format; everything else reads them by attribute.

- `CacheKey`: "<problem key>@<fingerprint digest>" (the machine's: the templates a tune
  considered are its entry's, in its fingerprint object's "templates"). `CacheKey.parse(text)` splits at the
  last "@" (a problem key holds none), `str(key)` formats it back.
- `Winner`: the picked candidate as stored: uid, params, median ms, p20/p80, TFLOP/s.
- `Entry`: the problem, the fingerprint it was measured under (kept as its JSON object: it
  is read, never rebuilt, and an entry from an older autotune may lack fields a
  `Fingerprint` has), the winner (None when every candidate failed, or while a run is
  partial), every candidate's result and what the tune recorded about itself.

`Entry.from_dict` validates on the way in: every field the tool reads back must have the type
it expects, or `DamagedCache` says which, in one line. An entry read from a file keeps the
JSON object it came from, and `to_dict` gives that object back (fields this version does not
know of included, in their order), so that a file rewritten with it is byte for byte what
was read; an entry built from values (the tuner's) gives its fields in the order the tuner
has always written them.

Plain Python: no torch, no triton (a cache hit is answered without either).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

from ..errors import UserError
from .fingerprint import digest_of, machine_digest_of
from ..problem import GemmProblem
from .entry_checks import (CANDIDATE_NUMBERS, PHASE_FIELDS, RECORDED, RECORDED_SHAPES, DamagedCache, is_non_negative,
                           is_number, json_kind, require, show_value)
from .results import STATUSES, Candidate, config_identity

KEY_SEPARATOR = "@"


class BadKey(ValueError):
    """A cache key that is not "<problem key>@<fingerprint digest>"."""


@dataclass(frozen=True, order=True)
class CacheKey:
    """Where an entry is stored: its problem's key and the fingerprint's digest."""

    problem: str  # GemmProblem.key()
    fingerprint: str  # Fingerprint.digest()

    @classmethod
    def of(cls, problem: GemmProblem, fingerprint_digest: str) -> "CacheKey":
        return cls(problem.key(), fingerprint_digest)

    @classmethod
    def parse(cls, text: Any) -> "CacheKey":
        """The key a stored string names; BadKey ("key has no fingerprint part", ...)."""
        if not isinstance(text, str):
            raise BadKey(f"key {show_value(text)} is not a string")
        if KEY_SEPARATOR not in text:
            raise BadKey("key has no fingerprint part")
        problem, _, digest = text.rpartition(KEY_SEPARATOR)
        return cls(problem, digest)

    @classmethod
    def try_parse(cls, text: Any) -> "CacheKey | None":
        try:
            return cls.parse(text)
        except BadKey:
            return None

    def __str__(self) -> str:
        return f"{self.problem}{KEY_SEPARATOR}{self.fingerprint}"

    def to_dict(self) -> dict[str, str]:
        return {"problem": self.problem, "fingerprint": self.fingerprint}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CacheKey":
        if not isinstance(data, Mapping) or not all(isinstance(data.get(f), str) for f in ("problem", "fingerprint")):
            raise BadKey(f"a cache key needs 'problem' and 'fingerprint' strings, got {show_value(data)}")
        if KEY_SEPARATOR in data["problem"]:
            raise BadKey(f"a problem key holds no {KEY_SEPARATOR!r}: {show_value(data['problem'])}")
        return cls(data["problem"], data["fingerprint"])


def tuned_time(entry: "Entry") -> datetime | None:
    """When `entry` was tuned, as a time (UTC where it names no zone), or None where it does
    not say: times written in other zones compare as times, not as text."""
    value = entry.tuned_at
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def key_for(problem: GemmProblem, fingerprint_digest: str) -> str:
    """The key string `problem` is stored under for a fingerprint."""
    return str(CacheKey.of(problem, fingerprint_digest))


@dataclass(frozen=True)
class Winner:
    """The candidate a tune picked, as stored."""

    uid: str
    params: dict[str, Any]
    ms: float
    tflops: float
    p20: float | None = None
    p80: float | None = None

    @classmethod
    def of(cls, candidate: Candidate, problem: GemmProblem) -> "Winner":
        return cls(candidate.uid, candidate.params, candidate.ms, problem.tflops(candidate.ms),
                   candidate.p20, candidate.p80)

    @property
    def identity(self) -> tuple:
        """Which config won (results.config_identity)."""
        return config_identity(self.uid, self.params)

    def to_dict(self) -> dict[str, Any]:
        return {"uid": self.uid, "params": self.params, "ms": self.ms,
                "p20": self.p20, "p80": self.p80, "tflops": self.tflops}

    @classmethod
    def from_dict(cls, data: Any, where: str = "entry") -> "Winner":
        require(isinstance(data, dict), f"{where}: 'winner' is not an object")
        require(isinstance(data.get("uid"), str), f"{where}: winner has no uid")
        require(isinstance(data.get("params"), dict), f"{where}: winner params not an object")
        for name, label in (("ms", "time"), ("tflops", "tflops")):
            value = data.get(name)
            require(is_number(value), f"{where}: winner {label} {show_value(value)} is not a number")
            require(value >= 0, f"{where}: winner {label} {show_value(value)} is negative")
        for name in ("p20", "p80"):
            value = data.get(name)
            require(value is None or is_number(value), f"{where}: winner {name} {show_value(value)} is not a number")
        return cls(data["uid"], data["params"], data["ms"], data["tflops"], data.get("p20"), data.get("p80"))


class StoredCandidates(Sequence):
    """The candidates of an entry read from a file (checked by Entry.from_dict), made into
    Candidates when first looked at: most readers (cache show, a hit) never look, and on a
    large cache making them all was a third of the read."""

    __slots__ = ("_data", "_made")

    def __init__(self, data: list[dict]) -> None:
        self._data = data
        self._made: tuple[Candidate, ...] | None = None

    def _all(self) -> tuple[Candidate, ...]:
        if self._made is None:
            self._made = tuple(Candidate.from_dict({"params": {}, **c}) for c in self._data)
        return self._made

    def __getitem__(self, index):
        return self._all()[index]

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self):
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (tuple, StoredCandidates)):
            return self._all() == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StoredCandidates({len(self)})"


@dataclass(frozen=True)
class Entry:
    """One cache entry. Optional fields are None where the entry does not hold them."""

    problem: GemmProblem
    fingerprint: Mapping[str, Any]  # Fingerprint.to_dict() of the machine that measured it
    winner: Winner | None
    candidates: Sequence[Candidate] = ()  # a tuple, or StoredCandidates when read from a file
    fingerprint_digest: str | None = None
    machine: str | None = None  # Fingerprint.machine_digest()
    pruned: Mapping[str, int] | None = None  # prune stage -> configs it removed
    considered: int | None = None  # configs listed before pruning
    search: str | None = None
    space: str | None = None  # the --space file the tune listed its configs from, if one
    tool_version: str | None = None
    tuned_at: str | None = None  # ISO date-time, UTC
    tune_seconds: float | None = None
    partial: bool = False  # an interrupted run's results so far: resumed, never a hit
    # --budget ended the tune before every candidate was timed: its winner serves, and a
    # tune without a budget resumes it (tune/hits.Lookup.hit)
    cut_short: bool = False
    resumed: int | None = None  # results kept from an interrupted run
    timeline: list | None = None  # [candidate, round, seconds since the start]
    compiles: list | None = None  # [sent, done, seconds compiling] per kernel
    compile_pool: Any = None  # the pool's description
    # where the tune's seconds went (phases.py): its phases, the timing process's steps
    # summed, candidates run per search round, the compile pool's seconds, worker starts
    phases: Mapping[str, float] | None = None
    worker_s: Mapping[str, float] | None = None
    rounds: Mapping[str, int] | None = None
    compile_pool_s: Mapping[str, Any] | None = None
    startups: list | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # fields this version does not know
    # the JSON object the entry was read from, given back by to_dict (see the module)
    _source: dict | None = field(default=None, init=False, repr=False, compare=False)

    # -- what the fingerprint says ---------------------------------------------------------------
    @property
    def device_name(self) -> str:
        return self.fingerprint["device_name"]

    @property
    def device_type(self) -> str | None:
        """The fingerprint's device type, else the problem's device."""
        return self.fingerprint.get("device_type") or self.problem.device

    @property
    def sm_count(self) -> Any:
        return self.fingerprint.get("sm_count")

    @property
    def torch_version(self) -> Any:
        return self.fingerprint.get("torch")

    @property
    def templates(self) -> Mapping[str, str]:
        """{template uid: source hash} of the templates it was tuned with."""
        return self.fingerprint.get("templates") or {}

    def phase_fields(self) -> dict[str, Any]:
        """{field: value} of the PHASE_FIELDS it holds (a tune records them; a hit shows none)."""
        return {name: getattr(self, name) for name in PHASE_FIELDS if getattr(self, name) is not None}

    def key(self) -> CacheKey | None:
        """The key it belongs under, when it records its fingerprint's digest."""
        return None if self.fingerprint_digest is None else CacheKey.of(self.problem, self.fingerprint_digest)

    def disagreement(self, key: str) -> str:
        """Why this entry does not belong under `key` ("" when it does). The key must name the
        entry's own problem and the digest of the fingerprint it holds, and the digests it
        records must be that fingerprint's: a winner is built for the problem a lookup asks
        about, so one tuned for another shape or machine would run where it was never checked."""
        parsed = CacheKey.try_parse(key)
        if parsed is None:
            return "its key has no fingerprint part"
        if parsed.problem != self.problem.key():
            return f"it holds the problem {self.problem.key()}, not the key's"
        digest = digest_of(self.fingerprint)
        if parsed.fingerprint != digest:
            return f"its fingerprint ({show_value(self.device_name)}) has the digest {digest}, not the key's"
        if self.fingerprint_digest not in (None, digest):
            return f"its fingerprint_digest {show_value(self.fingerprint_digest)} is not its fingerprint's {digest}"
        machine = machine_digest_of(self.fingerprint)
        if self.machine not in (None, machine):
            return f"its machine {show_value(self.machine)} is not its fingerprint's {machine}"
        if self.fingerprint.get("device_type", self.problem.device) != self.problem.device:
            return (f"its fingerprint is a {show_value(self.fingerprint['device_type'])} device's, "
                    f"its problem {self.problem.device}'s")
        return ""

    # -- to and from JSON ------------------------------------------------------------------------
    def to_dict(self, copy_: bool = True) -> dict[str, Any]:
        """The JSON object (a fresh one unless `copy_` is false: then never change it)."""
        if self._source is not None:
            return copy.deepcopy(self._source) if copy_ else self._source
        data: dict[str, Any] = {"problem": self.problem.to_dict(), "fingerprint": dict(self.fingerprint)}
        for name in ("fingerprint_digest", "machine"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        data["winner"] = None if self.winner is None else self.winner.to_dict()
        data["candidates"] = [c.to_dict() for c in self.candidates]
        for name in RECORDED:
            value = getattr(self, name)
            if value is not None and value is not False:
                data[name] = value
        data.update(self.extra)
        return data

    @classmethod
    def from_dict(cls, data: Any, key: Any = "?") -> "Entry":
        """The entry a JSON object holds, stored under `key` (named in messages); DamagedCache
        with a one-line reason if it is not what autotune writes."""
        require(isinstance(key, str), f"key {show_value(key)} is not a string")
        where = f"entry {show_value(key)}"
        require(isinstance(data, dict), f"{where} is {json_kind(data)}, not an object")
        for name, kind in (("problem", dict), ("fingerprint", dict), ("candidates", list)):
            require(isinstance(data.get(name), kind), f"{where}: {name!r} missing or not a {kind.__name__}")
        winner = None if data.get("winner") is None else Winner.from_dict(data["winner"], where)
        for i, cand in enumerate(data["candidates"]):
            require(isinstance(cand, dict) and isinstance(cand.get("uid"), str)
                     and isinstance(cand.get("status"), str) and isinstance(cand.get("params", {}), dict),
                     f"{where}: candidate {i} is malformed")
            # a time below 0 would win every pick that reads it (a narrower tune's merge, a
            # selection's answer) and write a winner no reader accepts
            ms = cand.get("ms")
            require(ms is None or is_non_negative(ms),
                     f"{where}: candidate {i} time {show_value(ms)} is not a number of 0 or more")
            require(cand["status"] != "ok" or ms is not None, f"{where}: candidate {i} is ok but has no time")
            require(cand["status"] in STATUSES, f"{where}: candidate {i} has an unknown status "
                     f"{show_value(cand['status'])}")
            for name in CANDIDATE_NUMBERS:
                value = cand.get(name)
                require(value is None or is_non_negative(value),
                         f"{where}: candidate {i} {name} {show_value(value)} is not a number of 0 or more")
        problem = _problem(where, data["problem"])
        fingerprint = data["fingerprint"]
        require(isinstance(fingerprint.get("device_name"), str), f"{where}: fingerprint has no device_name")
        templates = fingerprint.get("templates", {})
        require(isinstance(templates, dict) and all(isinstance(h, str) for h in templates.values()),
                 f"{where}: fingerprint templates are not {{uid: hash}}")
        for name in ("fingerprint_digest", "machine"):
            require(name not in data or isinstance(data[name], str), f"{where}: {name!r} is not a string")
        for name, (check, what) in RECORDED_SHAPES.items():
            value = data.get(name)
            require(value is None or check(value), f"{where}: {name} {show_value(value)} is not {what}")
        known = {"problem", "fingerprint", "winner", "candidates", "fingerprint_digest", "machine", *RECORDED}
        entry = cls(problem=problem, fingerprint=fingerprint, winner=winner,
                    candidates=StoredCandidates(data["candidates"]),
                    fingerprint_digest=data.get("fingerprint_digest"), machine=data.get("machine"),
                    **{name: data.get(name) for name in RECORDED if name not in ("partial", "cut_short")},
                    partial=bool(data.get("partial")), cut_short=bool(data.get("cut_short")),
                    extra={k: v for k, v in data.items() if k not in known})
        object.__setattr__(entry, "_source", data)
        return entry


def _problem(where: str, data: Any) -> GemmProblem:
    require(isinstance(data, dict), f"{where}: 'problem' missing or not a dict")
    try:
        return GemmProblem.from_dict(data)
    except (UserError, TypeError, ValueError) as exc:
        # the check speaks of the CLI's flags (--m, --bias-shape): here they are fields
        reason = re.sub(r"--([a-z][a-z0-9-]*)", lambda m: repr(m.group(1).replace("-", "_")), str(exc))
        reason = reason if len(reason) <= 120 else reason[:117] + "..."
        raise DamagedCache(f"{where}: problem is invalid ({reason})") from None


def check_problem(key: str, data: Any) -> GemmProblem:
    """The problem an entry stored under `key` holds; DamagedCache when it is not one."""
    return _problem(f"entry {show_value(key)}", data)
