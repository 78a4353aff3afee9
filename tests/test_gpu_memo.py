"""The GPUs' facts remembered between commands (gpu_memo.py): the signature that keys them,
and a hit's device read from the memo without the driver being brought up."""

import pytest

from autotune_cli.hardware import cuda_probe, device, gpu_memo

from test_cuda_probe import H200, FakeDriver

INFO = "Model: \t\t NVIDIA H200\nGPU UUID: \t GPU-1234\nBus Location: \t 0000:18:00.0\n"


def fake_host(root, gpus=("0000:18:00.0",), nodes=("nvidia0", "nvidiactl"), info=INFO):
    """A /proc and /dev laid out as NVIDIA's kernel module lays them out."""
    proc, dev = root / "proc", root / "dev"
    (proc / "driver" / "nvidia").mkdir(parents=True)
    (proc / "driver" / "nvidia" / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86\n")
    for bus in gpus:
        (proc / "driver" / "nvidia" / "gpus" / bus).mkdir(parents=True)
        (proc / "driver" / "nvidia" / "gpus" / bus / "information").write_text(info)
    (proc / "sys" / "kernel" / "random").mkdir(parents=True)
    (proc / "sys" / "kernel" / "random" / "boot_id").write_text("b0\n")
    dev.mkdir()
    for node in nodes:
        (dev / node).write_text("")
    return proc, dev


@pytest.fixture
def driver(monkeypatch):
    monkeypatch.setattr(cuda_probe, "torch_cuda_version", lambda: "12.8")
    for name in gpu_memo.VISIBILITY_ENV:
        monkeypatch.delenv(name, raising=False)

    def install(lib):
        monkeypatch.setattr(cuda_probe, "_load_driver", lambda: lib)
        device._driver_report.cache_clear()
        device._remembered_report.cache_clear()

    yield install
    device._driver_report.cache_clear()
    device._remembered_report.cache_clear()


def test_the_signature_follows_what_identifies_the_gpus(tmp_path, driver, monkeypatch):
    driver(FakeDriver([H200]))
    base = gpu_memo.gpu_signature(*fake_host(tmp_path / "a"))
    assert base is not None and base == gpu_memo.gpu_signature(*fake_host(tmp_path / "b"))
    assert gpu_memo.gpu_signature(*fake_host(tmp_path / "c", info=INFO.replace("1234", "5678"))) != base
    assert gpu_memo.gpu_signature(*fake_host(tmp_path / "d", nodes=("nvidia1", "nvidiactl"))) != base
    assert gpu_memo.gpu_signature(*fake_host(tmp_path / "e", gpus=("0000:18:00.0", "0000:2a:00.0"))) != base
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert gpu_memo.gpu_signature(*fake_host(tmp_path / "f")) != base
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    driver(FakeDriver([H200], version=13000))  # another driver library
    assert gpu_memo.gpu_signature(*fake_host(tmp_path / "g")) != base


def test_no_signature_without_the_module_files_or_with_mig(tmp_path, driver):
    driver(FakeDriver([H200]))
    assert gpu_memo.gpu_signature(tmp_path / "none", tmp_path / "none") is None
    proc, dev = fake_host(tmp_path / "mig")
    (proc / "driver" / "nvidia" / "capabilities" / "mig").mkdir(parents=True)  # not a GPU's
    (proc / "driver" / "nvidia" / "capabilities" / "gpu1" / "mig" / "gi1").mkdir(parents=True)
    assert gpu_memo.gpu_signature(proc, dev) is None
    proc, dev = fake_host(tmp_path / "mig-off")
    (proc / "driver" / "nvidia" / "capabilities" / "gpu0" / "mig").mkdir(parents=True)
    assert gpu_memo.gpu_signature(proc, dev) is not None


class NoDriver:
    """A driver library that may tell its version (no cuInit: what a memo is checked by)
    and must not be asked anything else."""

    def __init__(self, version=12080):
        self.version = version

    def cuDriverGetVersion(self, out):
        out._obj.value = self.version
        return 0

    def __getattr__(self, name):
        raise AssertionError(f"the driver was asked ({name})")


@pytest.fixture
def host(tmp_path, monkeypatch):
    """This process's /proc and /dev as on a host with one H200."""
    proc, dev = fake_host(tmp_path / "host")
    monkeypatch.setattr(gpu_memo, "PROC", proc)
    monkeypatch.setattr(gpu_memo, "DEV", dev)
    return proc, dev


def test_a_remembered_report_needs_no_driver(tmp_path, driver, monkeypatch, host):
    monkeypatch.setattr(gpu_memo, "gpu_signature", lambda: "sig-a")
    driver(FakeDriver([H200]))
    first = device.probe_device("cuda", remembered_in=tmp_path)
    assert (tmp_path / gpu_memo.MEMO_FILE).is_file()
    driver(NoDriver())
    again = device.probe_device("cuda", remembered_in=tmp_path)
    assert again == first and again.name == "NVIDIA H200" and again.sm_count == 132
    assert device.cuda_device_count(tmp_path) == 1
    # another signature: the memo does not apply, the driver is asked
    monkeypatch.setattr(gpu_memo, "gpu_signature", lambda: "sig-b")
    device._remembered_report.cache_clear()
    with pytest.raises(AssertionError, match="the driver was asked"):
        device.probe_device("cuda", remembered_in=tmp_path)


def test_without_a_signature_nothing_is_remembered(tmp_path, driver, monkeypatch):
    monkeypatch.setattr(gpu_memo, "gpu_signature", lambda: None)
    driver(FakeDriver([H200]))
    assert device.probe_device("cuda", remembered_in=tmp_path).name == "NVIDIA H200"
    assert not (tmp_path / gpu_memo.MEMO_FILE).exists()


def test_a_damaged_memo_is_as_none(tmp_path, driver, monkeypatch, host):
    monkeypatch.setattr(gpu_memo, "gpu_signature", lambda: "sig-a")
    (tmp_path / gpu_memo.MEMO_FILE).write_text('{"sig-a": {"devices": [{"name": 3}]}}')
    assert gpu_memo.recall(tmp_path, "sig-a") is None
    driver(FakeDriver([H200]))
    assert device.probe_device("cuda", remembered_in=tmp_path).sm_count == 132
    assert gpu_memo.recall(tmp_path, "sig-a").devices[0].name == "NVIDIA H200"  # rewritten
