"""The compile pool compiles for a GPU without bringing CUDA up (runner/offline_compile.py).

On this GPU-less machine that is the whole proof: the pool's processes build real sm_90
binaries (Triton's bundled ptxas) for the Triton templates from the device the main process
described, with no CUDA driver to ask. The GPU test in test_gpu_tune.py checks that a timing
process then finds those binaries instead of compiling again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune_cli.runner.offline_compile import CompileOnlyDriver, install, target_arch
from autotune_cli.hardware.device import DeviceInfo
from autotune_cli.problem import make_problem
from helpers_kernels import POOL_CONFIGS, compile_through_pool


def _ptxas_missing() -> bool:
    try:
        import triton
    except ImportError:
        return True
    return not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists()


H200 = DeviceInfo(device_type="cuda", name="NVIDIA H200 (described, not present)", capability="9.0",
                  sm_count=132, smem_per_block=232448, l2_bytes=50 << 20, runtime="12.8")

def test_target_and_refusals():
    assert target_arch("9.0") == 90 and target_arch("10.0") == 100 and target_arch("8.9") == 89
    assert install(DeviceInfo(device_type="cpu", name="cpu")) == "not a CUDA device"
    assert "unknown" in install(DeviceInfo(device_type="cuda", name="gpu"))  # no capability, no SMs
    # ROCm torch calls its GPUs cuda too: never an NVIDIA target for them
    mi300 = DeviceInfo(device_type="cuda", name="AMD Instinct MI300X", capability="9.4", sm_count=304)
    assert "not an NVIDIA GPU" in install(mi300)
    assert "not an NVIDIA GPU" in install(DeviceInfo(**{**mi300.__dict__, "runtime": "6.2"}))


def test_stand_in_answers_the_target_and_delegates_the_rest():
    made = []

    class RealDriver:
        def __init__(self):
            made.append(self)
            self.launcher_cls = "the real launcher"

    stand_in = CompileOnlyDriver(RealDriver, target="cuda:90")
    assert (stand_in.get_current_target(), stand_in.get_current_device(), stand_in.get_current_stream(0)) \
        == ("cuda:90", 0, 0)
    assert made == []  # nothing real was made for those
    assert stand_in.launcher_cls == "the real launcher" and len(made) == 1
    assert stand_in.launcher_cls and len(made) == 1  # made once


@pytest.mark.skipif(_ptxas_missing(), reason="needs Triton's NVIDIA backend (its bundled ptxas)")
def test_pool_compiles_sm90_binaries_without_a_gpu(tmp_path, monkeypatch):
    triton_cache = tmp_path / "triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(triton_cache))  # the processes get this environment
    problem = make_problem(m=256, n=1024, k=4096, dtype="bfloat16", device="cuda")
    misaligned = make_problem(m=256, n=1001, k=100, dtype="float16", device="cuda")  # padded buffers
    cases = [(uid, problem, config) for uid, config in POOL_CONFIGS.items()]
    cases.append(("triton::mm_padded", misaligned, POOL_CONFIGS["triton::mm"]))
    answers, pool = compile_through_pool(H200, cases, tmp_path / "kernels")
    assert all(payload["ok"] for payload in answers.values()), answers
    assert pool.offline_modes == {"offline": 2}  # both processes compiled without CUDA
    cubins = sorted(p.name for p in triton_cache.rglob("*.cubin"))
    # one binary per kernel: triton::mm, the persistent kernel, split-K's two passes, mm_padded's
    assert len(cubins) == 5, cubins
    assert any(name.startswith("mm_padded") for name in cubins)
    assert any(name.startswith("mm_persistent_tma") for name in cubins)
    assert sum(name.startswith("mm_splitk") for name in cubins) == 2
