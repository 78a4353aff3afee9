"""The GPUs read from the driver without torch (cuda_probe.py), and the fall-back to torch.

On the CPU a stand-in driver library answers the calls; on a GPU (marked) the driver's
answers must equal torch's for every visible device, field by field, so that a GPU's
fingerprint is the same whichever way it was read."""

import ctypes
import subprocess
import sys

import pytest

from autotune_cli.hardware import cuda_probe, device
from autotune_cli.store import fingerprint
from autotune_cli.errors import UserError


class FakeDriver:
    """The driver calls cuda_probe makes, answering for `devices` (name, attributes, memory)."""

    def __init__(self, devices, version=12080, fail=None):
        self.devices = devices
        self.version = version
        self.fail = fail or set()  # names of calls that return an error code

    @staticmethod
    def _set(ref, value):
        ref._obj.value = value

    def _code(self, name):
        return 999 if name in self.fail else 0  # an error (not CUDA_ERROR_NO_DEVICE)

    def cuInit(self, flags):
        return 100 if not self.devices and "cuInit" not in self.fail else self._code("cuInit")

    def cuDriverGetVersion(self, out):
        self._set(out, self.version)
        return self._code("cuDriverGetVersion")

    def cuDeviceGetCount(self, out):
        self._set(out, len(self.devices))
        return self._code("cuDeviceGetCount")

    def cuDeviceGet(self, out, ordinal):
        self._set(out, ordinal)
        return 0

    def cuDeviceGetName(self, buf, size, handle):
        name = self.devices[handle.value]["name"].encode() + b"\0"
        ctypes.memmove(buf, name, len(name))
        return 0

    def cuDeviceGetAttribute(self, out, which, handle):
        self._set(out, self.devices[handle.value]["attributes"][which])
        return self._code("cuDeviceGetAttribute")

    def cuDeviceTotalMem_v2(self, out, handle):
        self._set(out, self.devices[handle.value]["memory"])
        return 0


H200 = {"name": "NVIDIA H200", "memory": 150_000_000_000,
        "attributes": {75: 9, 76: 0, 16: 132, 97: 232448, 38: 52428800}}
A100 = {"name": "NVIDIA A100-SXM4-80GB", "memory": 85_000_000_000,
        "attributes": {75: 8, 76: 0, 16: 108, 97: 166912, 38: 41943040}}


@pytest.fixture
def fake_driver(monkeypatch):
    """Install a stand-in driver and a CUDA build of torch for cuda_probe; returns a setter."""
    device._driver_report.cache_clear()
    monkeypatch.setattr(cuda_probe, "torch_cuda_version", lambda: "12.8")

    def install(driver):
        monkeypatch.setattr(cuda_probe, "_load_driver", lambda: driver)
        device._driver_report.cache_clear()

    yield install
    device._driver_report.cache_clear()


def test_driver_answers_become_device_infos(fake_driver):
    fake_driver(FakeDriver([H200, A100]))
    assert device.cuda_device_count() == 2
    first, second = device.probe_device("cuda", 0), device.probe_device("cuda", 1)
    assert first == device.DeviceInfo(
        device_type="cuda", name="NVIDIA H200", capability="9.0", sm_count=132, smem_per_block=232448,
        l2_bytes=52428800, total_memory=150_000_000_000, driver="12080", runtime="12.8", index=0)
    assert (second.name, second.capability, second.sm_count, second.index) == ("NVIDIA A100-SXM4-80GB", "8.0", 108, 1)
    # GPUs with different names never share a fingerprint
    digest = lambda info: fingerprint.Fingerprint.of(info, {}).machine_digest()  # noqa: E731
    assert digest(first) != digest(second)


def test_driver_says_how_many_are_visible(fake_driver):
    fake_driver(FakeDriver([H200]))
    with pytest.raises(UserError, match="GPU 1 asked for, 1 visible"):
        device.probe_device("cuda", 1)
    fake_driver(FakeDriver([]))  # cuInit says CUDA_ERROR_NO_DEVICE: no GPU, no torch asked
    assert cuda_probe.read_devices().devices == ()
    assert device.cuda_device_count() == 0
    with pytest.raises(UserError, match="no CUDA GPU is visible"):
        device.probe_device("cuda", 0)


@pytest.mark.parametrize("trouble", [
    {"fail": {"cuInit"}},                 # no usable driver
    {"fail": {"cuDeviceGetAttribute"}},   # an attribute it does not know
    {"version": 11080},                   # a driver older than torch's CUDA
])
def test_driver_trouble_means_asking_torch(fake_driver, trouble):
    """Whatever goes wrong in the driver, the report is None and torch is asked: on this CPU
    build of torch, no GPU, as torch itself would say."""
    fake_driver(FakeDriver([H200], **trouble))
    assert cuda_probe.read_devices() is None
    import torch

    assert device.cuda_device_count() == (torch.cuda.device_count() if torch.cuda.is_available() else 0)


def test_no_driver_library_means_asking_torch(fake_driver):
    fake_driver(None)
    assert cuda_probe.read_devices() is None
    assert cuda_probe.driver_version() is None


def test_the_driver_version_is_read_alike_on_both_paths(fake_driver, monkeypatch):
    """The torch path takes the driver's version from the driver library too (torch 2.11
    dropped the private call it came from): one GPU, one fingerprint."""
    fake_driver(FakeDriver([H200], version=13000))
    assert cuda_probe.driver_version() == "13000" == device.probe_device("cuda").driver
    import types

    import torch

    props = types.SimpleNamespace(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132,
                                  shared_memory_per_block_optin=232448, L2_cache_size=52428800,
                                  total_memory=150_000_000_000)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    by_torch = device.probe_device("cuda", via="torch")
    assert by_torch.driver == "13000"
    assert by_torch == device.probe_device("cuda")  # the same GPU, the same fields


def test_torch_cuda_version_is_read_without_importing_torch():
    """torch.version.cuda from the file, in a process that never imports torch."""
    code = ("import sys; from autotune_cli.hardware.cuda_probe import torch_cuda_version; "
            "print(repr(torch_cuda_version())); assert 'torch' not in sys.modules")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    import torch

    assert run.stdout.strip() == repr(torch.version.cuda or None)


def test_a_cpu_build_of_torch_reports_no_gpu_whatever_the_driver(monkeypatch):
    """torch built without CUDA cannot use a GPU the driver sees: no report, torch decides."""
    device._driver_report.cache_clear()
    monkeypatch.setattr(cuda_probe, "torch_cuda_version", lambda: None)
    monkeypatch.setattr(cuda_probe, "_load_driver", lambda: FakeDriver([H200]))
    try:
        assert cuda_probe.read_devices() is None
    finally:
        device._driver_report.cache_clear()


@pytest.mark.gpu
def test_driver_and_torch_agree_on_every_gpu():
    """The fast path is taken on a GPU host, and gives each GPU's fingerprint exactly as
    torch's properties do."""
    import torch

    device._driver_report.cache_clear()
    assert cuda_probe.read_devices() is not None
    assert device.cuda_device_count() == torch.cuda.device_count() > 0
    for index in range(torch.cuda.device_count()):
        assert device.probe_device("cuda", index) == device.probe_device("cuda", index, via="torch")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_command_process_never_imports_torch(tmp_path, device):
    """`autotune mm` tunes in its workers: the command's own process reads the device and
    writes the cache without importing torch (its import held the command 1.3-1.6 s on a
    GPU host before any worker started)."""
    code = ("import sys, atexit\n"
            "atexit.register(lambda: print('TORCH', 'torch' in sys.modules, file=sys.stderr))\n"
            f"sys.argv = ['autotune', 'mm', '--m', '32', '--n', '48', '--k', '64', '--device', '{device}',"
            " '--templates', 'aten', '--json']\n"
            "from autotune_cli.cli import run\nrun()\n")
    env = {**__import__("os").environ, "AUTOTUNE_CACHE_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "TORCH False" in run.stderr
