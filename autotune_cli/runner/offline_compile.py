"""Compiling Triton kernels for a GPU without bringing CUDA up: what a compile-pool process does.

A compile process only needs the binary to land in Triton's cache; it never launches. Yet
Triton's JIT asks the active driver for the current device, stream and target on every call,
and the operands made to compile for are GPU tensors: bringing CUDA up (a context on the GPU,
hundreds of MB of its memory) delayed each of the pool's processes before its first compile,
eight or sixteen at once contending for the driver (bench/README.md, "Cold tuning").

Here the process instead
  - installs, as Triton's active driver, a stand-in that answers the target (backend "cuda",
    the device's compute capability, warp size 32) from the `DeviceInfo` the main process
    probed, device 0 and stream 0; anything else it is asked (the launcher class, its
    utilities) comes from Triton's real CUDA driver, made on first use, which loads its
    library without initialising CUDA;
  - tells the persistent TMA template the SM count (a constexpr of that kernel) from the
    same `DeviceInfo`;
  - compiles for operands on torch's "meta" device: the shapes, strides and dtypes Triton
    specializes on, no memory. A meta tensor's data pointer is 0, which Triton takes as
    16-byte aligned, as the caching allocator's real ones are (and the timing process's
    kept operands are whole allocations or views at offset 0 of one).
The binary and its cache key are those of a compile on the GPU: the key holds the source, the
specialization, the options and the target, nothing of the process. Were anything to differ,
the timing process would compile what it misses itself: slower, never wrong.

Triton's internals move between releases, so `install` is best effort: where it cannot set
this up it says why and the process brings CUDA up as before.
"""

from __future__ import annotations

from typing import Any

from ..hardware.device import DeviceInfo

OPERAND_DEVICE = "meta"


class CompileOnlyDriver:
    """Stands in for Triton's active CUDA driver in a process that compiles and never launches."""

    def __init__(self, real_driver_class, target) -> None:
        self._real_driver_class = real_driver_class
        self._real = None
        self.target = target

    def get_current_target(self):
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def __getattr__(self, name: str) -> Any:  # only for what the class does not define
        if self._real is None:
            self._real = self._real_driver_class()
        return getattr(self._real, name)


def target_arch(capability: str) -> int:
    """"9.0" -> 90, Triton's CUDA arch number."""
    major, _, minor = capability.partition(".")
    return int(major) * 10 + int(minor or 0)


def install(device: DeviceInfo) -> str | None:
    """Make this process's Triton compile for `device` without CUDA. Returns None where it
    did, else why not (then nothing was changed)."""
    if device.device_type != "cuda":
        return "not a CUDA device"
    if not device.capability or not device.sm_count:
        return "the device's capability or SM count is unknown"
    if not device.runtime or "AMD" in device.name.upper().split():
        # ROCm torch reports its GPUs as cuda too; its probe has no CUDA runtime version
        return "not an NVIDIA GPU (no CUDA runtime: ROCm torch reports its GPUs as cuda too)"
    try:
        from triton.backends import backends
        from triton.backends.compiler import GPUTarget
        from triton.runtime.driver import driver

        nvidia = backends.get("nvidia")
        if nvidia is None:
            return "this Triton has no NVIDIA backend"
        # asked of the class: reading `driver.active` would make the real driver
        if not all(hasattr(type(driver), name) for name in ("set_active", "active")):
            return "this Triton's driver cannot be replaced"
        arch = target_arch(device.capability)
        stand_in = CompileOnlyDriver(nvidia.driver, GPUTarget("cuda", arch, 32))
    except Exception as exc:  # noqa: BLE001 - another Triton's layout: bring CUDA up instead
        return f"{type(exc).__name__}: {exc}"
    from ..templates import triton_persistent_tma

    driver.set_active(stand_in)
    triton_persistent_tma.assume_sm_count(device.sm_count)
    return None
