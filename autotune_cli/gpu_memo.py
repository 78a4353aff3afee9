"""The visible GPUs' facts remembered between commands, so that a cache hit on a GPU host
answers without bringing the CUDA driver up (cuInit alone took 0.43 s on the H200 host,
more than all the rest of a hit).

A report is remembered under a signature of what identifies the GPUs without the driver:
the kernel module's version and each GPU's information file under /proc/driver/nvidia
(model, UUID, bus location), the GPU device nodes in /dev (a container sees its own only),
the variables that choose the visible GPUs, the boot, the driver library's CUDA version and
torch's CUDA build. A change to any of them makes a new signature and the driver is asked.
Without a signature (no /proc/driver/nvidia, or MIG instances, whose sizes those files do
not show) nothing is remembered. The file is a plain cache: unreadable means absent, and
failing to write it loses nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path

from .cuda_probe import DriverDevice, DriverReport, driver_version, torch_cuda_version

MEMO_FILE = "gpus.json"
KEEP = 8  # signatures kept (a host used with several CUDA_VISIBLE_DEVICES)
VISIBILITY_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES")


def _text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def _mig_instances(capabilities: Path) -> bool:
    """Whether any GPU has MIG instances (capabilities/gpu<N>/mig/gi<M>)."""
    try:
        gpus = os.listdir(capabilities)
    except OSError:
        return False
    for gpu in gpus:
        try:
            if any(name.startswith("gi") for name in os.listdir(capabilities / gpu / "mig")):
                return True
        except OSError:
            continue  # not a GPU's folder, or a GPU without MIG
    return False


def gpu_signature(proc: Path = Path("/proc"), dev: Path = Path("/dev")) -> str | None:
    """What identifies the visible GPUs, read without the driver; None where it cannot be
    read, or where it would not tell (MIG instances)."""
    nvidia = proc / "driver" / "nvidia"
    try:
        buses = sorted(os.listdir(nvidia / "gpus"))
        nodes = sorted(name for name in os.listdir(dev)
                       if name.startswith("nvidia") and name[6:].isdigit())
    except OSError:
        return None
    if not buses:
        return None
    if _mig_instances(nvidia / "capabilities"):
        return None
    infos = [_text(nvidia / "gpus" / bus / "information") for bus in buses]
    module = _text(nvidia / "version")
    if module is None or None in infos:
        return None
    parts = {
        "module": module, "gpus": dict(zip(buses, infos)), "nodes": nodes,
        "env": {name: os.environ.get(name) for name in VISIBILITY_ENV},
        "boot": _text(proc / "sys" / "kernel" / "random" / "boot_id"),
        "driver": driver_version(), "runtime": torch_cuda_version(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


def _load(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def recall(directory: Path, signature: str) -> DriverReport | None:
    """The report remembered under `signature`, or None (none, or not readable as one)."""
    found = _load(Path(directory) / MEMO_FILE).get(signature)
    try:
        devices = tuple(DriverDevice(**device) for device in found["devices"])
        report = DriverReport(devices, str(found["driver"]), str(found["runtime"]))
    except (TypeError, KeyError, ValueError):
        return None
    if not all(isinstance(d.name, str) and isinstance(d.sm_count, int) for d in devices):
        return None
    return report


def remember(directory: Path, signature: str, report: DriverReport) -> None:
    """Store `report` under `signature` (the newest KEEP signatures are kept); written to a
    temporary file and renamed over, so a reader sees the old file or the new one."""
    path = Path(directory) / MEMO_FILE
    memo = _load(path)
    memo.pop(signature, None)
    memo[signature] = {"devices": [asdict(d) for d in report.devices], "driver": report.driver,
                       "runtime": report.runtime}
    memo = dict(list(memo.items())[-KEEP:])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".gpus.", suffix=".tmp")
        with os.fdopen(fd, "w") as handle:
            json.dump(memo, handle)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except (OSError, UnboundLocalError):
            pass
