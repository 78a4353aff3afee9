"""The visible GPUs' facts remembered between commands, so that a cache hit on a GPU host
answers without bringing the CUDA driver up (cuInit alone takes longer than all the rest
of a hit: bench/README.md, "A cached command's cost").

A report is remembered under a signature of what identifies the GPUs without the driver:
the kernel module's version and each GPU's information file under /proc/driver/nvidia
(model, UUID, bus location), the GPU device nodes in /dev (a container sees its own only),
the variables that choose the visible GPUs, the boot, the driver library's CUDA version and
torch's CUDA build. A change to any of them makes a new signature and the driver is asked.
Without a signature (no /proc/driver/nvidia, or MIG instances, whose sizes those files do
not show) nothing is remembered. The file is a plain cache: unreadable means absent, and
failing to write it loses nothing.

Anyone who can write the cache folder can write this file, and it is read by every command
on a GPU host, so it is read as the cache file is (safe_read.read_regular_file: a
regular file only, at most MAX_MEMO_BYTES, never waited on) and parsed only if it nests no
deeper than a memo does. A remembered report stands for the real devices only where what
can be read without cuInit agrees with it (`agrees`): torch built with CUDA, the driver
library's version, and one GPU named in /proc/driver/nvidia per device, in number as many
as the visible ones. A memo that says otherwise is ignored and the driver is asked.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path

from ..safe_read import read_regular_file, too_deep
from . import cuda_probe
from .cuda_probe import DriverDevice, DriverReport

MEMO_FILE = "gpus.json"
MAX_MEMO_BYTES = 1 << 20  # KEEP reports of a few GPUs each: a few KB
MAX_MEMO_DEPTH = 8  # {signature: {"devices": [{...}]}} is four deep
KEEP = 8  # signatures kept (a host used with several CUDA_VISIBLE_DEVICES)
VISIBILITY_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES")
_INT_FIELDS = ("index", "sm_count", "smem_per_block", "l2_bytes", "total_memory")
# Where the kernel's and the device nodes' files are read (tests lay out their own).
PROC = Path("/proc")
DEV = Path("/dev")


def _text(path: Path) -> str | None:
    try:
        return read_regular_file(path, MAX_MEMO_BYTES).decode(errors="replace")
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


def gpu_signature(proc: Path | None = None, dev: Path | None = None) -> str | None:
    """What identifies the visible GPUs, read without the driver; None where it cannot be
    read, or where it would not tell (MIG instances)."""
    proc, dev = proc or PROC, dev or DEV
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
        "driver": cuda_probe.driver_version(), "runtime": cuda_probe.torch_cuda_version(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


def _load(path: Path) -> dict:
    """The memo's document, or {} where it is not one (absent, not a regular file, too
    large, not JSON, nested too deeply)."""
    try:
        data = json.loads(read_regular_file(path, MAX_MEMO_BYTES))
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(data, dict) or too_deep(data, MAX_MEMO_DEPTH):
        return {}
    return data


def _gpu_models(proc: Path) -> list[str] | None:
    """The model of each GPU the kernel module lists (its information files), or None."""
    folder = proc / "driver" / "nvidia" / "gpus"
    try:
        buses = sorted(os.listdir(folder))
    except OSError:
        return None
    models = []
    for bus in buses:
        text = _text(folder / bus / "information") or ""
        found = [line.split(":", 1)[1].strip() for line in text.splitlines()
                 if line.startswith("Model:")]
        if not found:
            return None
        models.append(found[0])
    return models


def agrees(report: DriverReport, proc: Path | None = None) -> bool:
    """Whether `report` can stand for this host's GPUs, by what is read without cuInit:
    torch's CUDA build and the driver library's version are the report's, each device's
    name is one the kernel module lists, and there are as many devices as it lists (fewer
    where a variable chooses the visible ones)."""
    runtime = cuda_probe.torch_cuda_version()
    if runtime is None or report.runtime != runtime or report.driver != cuda_probe.driver_version():
        return False
    models = _gpu_models(proc or PROC)
    if not models or not report.devices:
        return False
    chosen = any(os.environ.get(name) is not None for name in VISIBILITY_ENV)
    if len(report.devices) > len(models) or (not chosen and len(report.devices) != len(models)):
        return False
    left = list(models)
    for device in report.devices:
        if device.name not in left:
            return False
        left.remove(device.name)
    return True


def recall(directory: Path, signature: str) -> DriverReport | None:
    """The report remembered under `signature`, or None (none, not readable as one, or not
    what this host's GPUs are: `agrees`)."""
    found = _load(Path(directory) / MEMO_FILE).get(signature)
    try:
        devices = tuple(DriverDevice(**device) for device in found["devices"])
        report = DriverReport(devices, str(found["driver"]), str(found["runtime"]))
    except (TypeError, KeyError, ValueError):
        return None
    if not all(isinstance(d.name, str) and isinstance(d.capability, str)
               and all(type(getattr(d, name)) is int for name in _INT_FIELDS) for d in devices):
        return None
    return report if agrees(report) else None


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
