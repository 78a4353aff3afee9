"""Fingerprint: what must be the same for a cached winner to be reused.

The machine (device name, compute capability, SM count, driver, CUDA runtime, torch and
triton versions, read from device.py's DeviceInfo), whose digest is the cache key's, and the
hash of each template's source the tune considered: that set is the entry's (a tune with
--templates stores no second entry for the problem), and hits.py holds a winner to it, so a
template changed since still makes the winner stale.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from ..hardware.device import DeviceInfo, package_version


@functools.lru_cache(maxsize=None)
def _installed(package: str) -> str:
    """The installed version, read once per process: reading a package's metadata costs
    ~1 ms, and every lookup of a list of thousands of problems makes a fingerprint."""
    return package_version(package)


def _sha(data: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(dict(data), sort_keys=True).encode()).hexdigest()


def _machine(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != "templates"}


def digest_of(data: Mapping[str, Any]) -> str:
    """The digest of a fingerprint's JSON object, as stored in an entry: Fingerprint.digest
    of the fingerprint it holds (the machine's fields: its templates are not part of it),
    computed from the object itself so that an entry's key can be checked against what the
    entry says (a field this version does not know counts too)."""
    return _sha(_machine(data))[:16]


def legacy_digest_of(data: Mapping[str, Any]) -> str:
    """The digest keys had before the template set moved to the entry: every field,
    templates included (cache_document re-keys entries stored under it)."""
    return _sha(data)[:16]


def machine_digest_of(data: Mapping[str, Any]) -> str:
    """Fingerprint.machine_digest of a fingerprint's JSON object."""
    return _sha(_machine(data))[:12]


@dataclass(frozen=True)
class Fingerprint:
    device_type: str
    device_name: str
    capability: str
    sm_count: int
    driver: str
    runtime: str
    torch: str
    triton: str
    # (uid, source hash) of the templates a tune considers: recorded in its entry, not
    # part of the digest
    templates: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    @classmethod
    def of(cls, info: DeviceInfo, templates: dict[str, str]) -> "Fingerprint":
        return cls(
            device_type=info.device_type, device_name=info.name, capability=info.capability,
            sm_count=info.sm_count, driver=info.driver, runtime=info.runtime,
            torch=_installed("torch"), triton=_installed("triton"),
            templates=tuple(sorted(templates.items())),
        )

    def machine_digest(self) -> str:
        """The machine, shorter (an entry's "machine", what `cache prune` compares)."""
        return machine_digest_of(self.to_dict())

    def digest(self) -> str:
        """The machine's digest, the cache key's: entries from another machine never match."""
        return digest_of(self.to_dict())

    @property
    def template_hashes(self) -> dict[str, str]:
        return dict(self.templates)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["templates"] = dict(self.templates)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Fingerprint":
        fields = dict(data)
        fields["templates"] = tuple(sorted(dict(fields.get("templates", {})).items()))
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in fields.items() if k in known})

    def describe(self) -> str:
        extra = f" cc{self.capability} {self.sm_count} SMs" if self.capability else ""
        return f"{self.device_name}{extra}, torch {self.torch}, triton {self.triton}"
