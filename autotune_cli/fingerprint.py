"""Fingerprint: what must be the same for a cached winner to be reused.

The machine part (device name, compute capability, SM count, driver, CUDA runtime, torch
and triton versions, read from device.py's DeviceInfo) and the hash of each template's source.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from .device import DeviceInfo, package_version


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
    templates: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # (uid, source hash)

    @classmethod
    def of(cls, info: DeviceInfo, templates: dict[str, str]) -> "Fingerprint":
        return cls(
            device_type=info.device_type, device_name=info.name, capability=info.capability,
            sm_count=info.sm_count, driver=info.driver, runtime=info.runtime,
            torch=package_version("torch"), triton=package_version("triton"),
            templates=tuple(sorted(templates.items())),
        )

    def machine_digest(self) -> str:
        """The machine alone, without templates: entries from another machine never match."""
        data = self.to_dict()
        data.pop("templates")
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

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
