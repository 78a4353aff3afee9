"""The device a tune runs on: `probe_device` reads its name, limits, driver and runtime
(the prune stages and the fingerprint need them), `cuda_device_count` how many GPUs there are.
"""

from __future__ import annotations

import functools
import platform
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .cuda_probe import DriverReport, driver_version, read_devices
from ..errors import UserError


@dataclass(frozen=True)
class DeviceInfo:
    device_type: str  # "cuda" or "cpu"
    name: str
    capability: str = ""
    sm_count: int = 0
    smem_per_block: int = 0  # bytes a block may opt in to (0: no limit, the interpreter)
    l2_bytes: int = 0
    total_memory: int = 0
    driver: str = ""
    runtime: str = ""
    index: int = 0

    @property
    def is_amd(self) -> bool:
        """An AMD GPU, which torch also calls "cuda" (ROCm): NVIDIA-only kernels skip it."""
        return "AMD" in (self.name or "").upper().split()

    @property
    def compute_capability(self) -> tuple[int, int] | None:
        """(major, minor) of a CUDA device's capability ("9.0" -> (9, 0)); None if unknown."""
        match = re.match(r"^\s*(\d+)\.(\d+)", self.capability or "")
        return (int(match.group(1)), int(match.group(2))) if match else None


def package_version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "missing"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


@functools.lru_cache(maxsize=1)
def _driver_report() -> DriverReport | None:
    """The driver's view of the GPUs, read once per process (cuda_probe.py)."""
    return read_devices()


@functools.lru_cache(maxsize=None)
def _remembered_report(directory: str) -> DriverReport | None:
    """The driver's report as remembered in `directory` under the GPUs' signature
    (gpu_memo.py: no cuInit), else read from the driver and remembered there."""
    from .gpu_memo import gpu_signature, recall, remember

    signature = gpu_signature()
    if signature is not None:
        found = recall(Path(directory), signature)
        if found is not None:
            return found
    report = _driver_report()
    if report is not None and signature is not None:
        remember(Path(directory), signature, report)
    return report


def _report(remembered_in: Path | None) -> DriverReport | None:
    return _driver_report() if remembered_in is None else _remembered_report(str(remembered_in))


def cuda_device_count(remembered_in: Path | None = None) -> int:
    """How many GPUs torch would see, asked of the driver (no torch import), else of torch.
    `remembered_in`: a folder where the driver's answers may be remembered (gpu_memo.py)."""
    report = _report(remembered_in)
    if report is not None:
        return len(report.devices)
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def probe_device(device_type: str, index: int = 0, via: str = "driver",
                 remembered_in: Path | None = None) -> DeviceInfo:
    """Read the device's identity and limits. CPU needs no torch import; a GPU is read from
    the driver (cuda_probe.py: milliseconds, no torch import), or from torch when the driver
    cannot be read or `via="torch"` (the GPU tests compare the two). `remembered_in`: a
    folder where the driver's answers may be remembered between commands (gpu_memo.py)."""
    if device_type == "cpu":
        return DeviceInfo(device_type="cpu", name=_cpu_name(), runtime="triton-interpreter")
    report = _report(remembered_in) if via == "driver" else None
    if report is not None:
        if not report.devices:
            raise UserError("--device cuda: no CUDA GPU is visible (use --device cpu)")
        if index >= len(report.devices):
            raise UserError(f"GPU {index} asked for, {len(report.devices)} visible")
        found = report.devices[index]
        return DeviceInfo(device_type="cuda", name=found.name, capability=found.capability,
                          sm_count=found.sm_count, smem_per_block=found.smem_per_block,
                          l2_bytes=found.l2_bytes, total_memory=found.total_memory,
                          driver=report.driver, runtime=report.runtime, index=index)
    import torch

    if not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA GPU is visible (use --device cpu)")
    if index >= torch.cuda.device_count():
        raise UserError(f"GPU {index} asked for, {torch.cuda.device_count()} visible")
    props = torch.cuda.get_device_properties(index)
    driver = driver_version()  # from the driver library, as on the driver path
    if driver is None:
        try:
            driver = str(torch._C._cuda_getDriverVersion())
        except Exception:  # noqa: BLE001 - private API (gone in torch 2.11): absence only loses a field
            driver = ""
    smem = getattr(props, "shared_memory_per_block_optin", 0) or 0
    return DeviceInfo(
        device_type="cuda",
        name=props.name,
        capability=f"{props.major}.{props.minor}",
        sm_count=props.multi_processor_count,
        smem_per_block=int(smem),
        l2_bytes=int(getattr(props, "L2_cache_size", 0) or 0),
        total_memory=int(props.total_memory),
        driver=driver,
        runtime=str(torch.version.cuda or ""),
        index=index,
    )
