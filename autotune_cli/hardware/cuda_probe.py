"""The visible GPUs, read from NVIDIA's driver library without importing torch.

The command's main process needs only each GPU's identity and limits (the fingerprint, the
prune stages); its workers do the CUDA work. Importing torch to read them held the main
process for over a second before any worker could start; the driver API answers the same
questions in milliseconds (bench/README.md, "Cold tuning").

What is read, per device, is what `torch.cuda.get_device_properties` reports (both ask
the same driver): name, compute capability, SM count, the shared memory a block may opt in
to, L2 size, total memory; and the driver's version (`cuDriverGetVersion`, which the
torch path reads here too).
The CUDA runtime torch was built with is read from torch's `version.py` as a file.
Whenever anything here cannot be had (no libcuda, a driver error, torch built without CUDA,
an unreadable version file), `read_devices` returns None and the caller asks torch instead.
Nothing here creates a CUDA context; `cuInit` in this process does not stop the workers,
which never start by plain fork (runner/processes.worker_context).
"""

from __future__ import annotations

import ast
import ctypes
import importlib.util
from dataclasses import dataclass
from pathlib import Path

# CUdevice_attribute values (cuda.h)
_MULTIPROCESSOR_COUNT = 16
_L2_CACHE_SIZE = 38
_CAPABILITY_MAJOR = 75
_CAPABILITY_MINOR = 76
_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
_NO_DEVICE = 100  # CUDA_ERROR_NO_DEVICE


@dataclass(frozen=True)
class DriverDevice:
    """One GPU as the driver reports it (field names as in device.DeviceInfo)."""

    index: int
    name: str
    capability: str
    sm_count: int
    smem_per_block: int
    l2_bytes: int
    total_memory: int


@dataclass(frozen=True)
class DriverReport:
    devices: tuple[DriverDevice, ...]
    driver: str  # cuDriverGetVersion as text, e.g. "12080"
    runtime: str  # torch.version.cuda, e.g. "12.8"


def torch_cuda_version() -> str | None:
    """torch.version.cuda read from torch's version.py without importing torch: None for a
    build without CUDA, or when the file cannot be found or read."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / "version.py"
        try:
            tree = ast.parse(path.read_text())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            target = value = None
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                target, value = node.target.id, node.value
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                target, value = node.targets[0].id, node.value
            if target == "cuda" and value is not None:
                try:
                    found = ast.literal_eval(value)
                except ValueError:
                    return None
                return found if isinstance(found, str) and found else None
    return None


def _load_driver():
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def read_devices() -> DriverReport | None:
    """Every visible GPU (CUDA_VISIBLE_DEVICES applies, as for torch), or None when the
    driver cannot tell or torch could not use the GPUs (a build without CUDA)."""
    runtime = torch_cuda_version()
    if runtime is None:
        return None
    lib = _load_driver()
    if lib is None:
        return None
    try:
        report = _query(lib, runtime)
    except (AttributeError, OSError, UnicodeDecodeError, _DriverError):
        return None
    # A driver older than torch's CUDA major version: torch would find no GPU.
    try:
        if int(report.driver) // 1000 < int(runtime.split(".")[0]):
            return None
    except ValueError:
        return None
    return report


def driver_version() -> str | None:
    """The driver's CUDA version as an integer text ("13000"), or None without a driver:
    the same field whichever way a GPU is read (torch 2.11 has no `_cuda_getDriverVersion`)."""
    lib = _load_driver()
    if lib is None:
        return None
    version = ctypes.c_int()
    try:
        if lib.cuDriverGetVersion(ctypes.byref(version)) != 0:
            return None
    except AttributeError:
        return None
    return str(version.value)


class _DriverError(Exception):
    pass


def _query(lib, runtime: str) -> DriverReport:
    def check(code: int) -> None:
        if code != 0:
            raise _DriverError(code)

    version = ctypes.c_int()
    check(lib.cuDriverGetVersion(ctypes.byref(version)))
    status = lib.cuInit(0)
    if status == _NO_DEVICE:  # a driver and no GPU visible (CUDA_VISIBLE_DEVICES="", say)
        return DriverReport((), str(version.value), runtime)
    check(status)
    count = ctypes.c_int()
    check(lib.cuDeviceGetCount(ctypes.byref(count)))
    get_total = getattr(lib, "cuDeviceTotalMem_v2", None) or lib.cuDeviceTotalMem
    devices = []
    for ordinal in range(count.value):
        handle = ctypes.c_int()
        check(lib.cuDeviceGet(ctypes.byref(handle), ordinal))

        def attribute(which: int, handle: ctypes.c_int = handle) -> int:
            value = ctypes.c_int()
            check(lib.cuDeviceGetAttribute(ctypes.byref(value), which, handle))
            return value.value

        name = ctypes.create_string_buffer(256)
        check(lib.cuDeviceGetName(name, 256, handle))
        total = ctypes.c_size_t()
        check(get_total(ctypes.byref(total), handle))
        devices.append(DriverDevice(
            index=ordinal, name=name.value.decode(),
            capability=f"{attribute(_CAPABILITY_MAJOR)}.{attribute(_CAPABILITY_MINOR)}",
            sm_count=attribute(_MULTIPROCESSOR_COUNT),
            smem_per_block=attribute(_SHARED_MEMORY_PER_BLOCK_OPTIN),
            l2_bytes=attribute(_L2_CACHE_SIZE), total_memory=int(total.value)))
    return DriverReport(tuple(devices), str(version.value), runtime)
