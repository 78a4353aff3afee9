"""Routed GEMVs as programmatic dependent launches where Inductor launches its own kernels so
(routing/backend.py: `inductor_pdl`; routing/pdl.py: `pdl_form`)."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

import autotune_cli
from autotune_cli.api import Built, Dispatch, Dispatcher
from autotune_cli.api.problems import Adapt
from autotune_cli.hardware.device import DeviceInfo
from autotune_cli.problem import make_problem
from autotune_cli.routing import backend, pdl
from autotune_cli.settings import TuneSettings
from autotune_cli.templates import get_template

GEMV = {"BLOCK_M": 1, "BLOCK_N": 4, "BLOCK_K": 256, "SPLIT_K": 1, "num_stages": 1, "num_warps": 4}
CUDA0 = SimpleNamespace(type="cuda", index=0)


def hopper(capability: str = "9.0"):
    return lambda device_type, index=0: DeviceInfo(device_type="cuda", name="NVIDIA H200", capability=capability)


def gemv_winner(tmp_path, uid: str = "triton::gemv"):
    """A routed GEMV's (Dispatch, Built) as the dispatcher plans it for a GPU problem (built
    here without one: a Triton kernel compiles at its first launch)."""
    problem = make_problem(m=1, n=64, k=256, dtype="bfloat16", device="cuda", layout="nt")
    template = get_template(uid)
    params = template.full_params(problem, GEMV)
    built = Built(problem, Adapt(), template.build(problem, params, str(tmp_path)), None, template.keeps_buffers)
    return Dispatch("mm", uid, problem, "key", params), built


def test_a_gemv_takes_its_pdl_form_on_hopper_and_nothing_else_changes(tmp_path, monkeypatch):
    import autotune_cli.hardware.device as device

    monkeypatch.setattr(device, "probe_device", hopper())
    pdl._pdl_kernel.cache_clear()
    info, built = gemv_winner(tmp_path)
    dispatcher = Dispatcher(tmp_path / "cache")
    pdl_info, pdl_built = pdl.pdl_form(dispatcher, info, built, CUDA0)
    assert pdl_info.params["PDL"] == 1
    assert {k: v for k, v in pdl_info.params.items() if k != "PDL"} == {k: v for k, v in info.params.items()
                                                                         if k != "PDL"}
    assert pdl_built.kernel.launch_parts[3].get("launch_pdl") is True
    assert "launch_pdl" not in built.kernel.launch_parts[3]
    assert (pdl_built.problem, pdl_built.how, pdl_built.pitch) == (built.problem, built.how, built.pitch)
    source = (tmp_path / "cache" / "kernels")
    assert any("gdc_wait()" in f.read_text() for f in source.glob("*.py"))

    # made once per winner and GPU: the same kernel again
    assert pdl.pdl_form(dispatcher, info, built, CUDA0)[1].kernel is pdl_built.kernel

    # before Hopper, on the CPU, for another template, or already PDL: as given
    pdl._pdl_kernel.cache_clear()  # what it remembers of a GPU: another GPU here
    monkeypatch.setattr(device, "probe_device", hopper("8.0"))
    assert pdl.pdl_form(dispatcher, info, built, CUDA0) == (info, built)
    monkeypatch.setattr(device, "probe_device", hopper())
    assert pdl.pdl_form(dispatcher, info, built, SimpleNamespace(type="cpu", index=None)) == (info, built)
    assert pdl.pdl_form(dispatcher, pdl_info, pdl_built, CUDA0) == (pdl_info, pdl_built)
    other = Dispatch("mm", "triton::mm", info.problem, "key", {})
    assert pdl.pdl_form(dispatcher, other, built, CUDA0) == (other, built)
    assert pdl.pdl_form(dispatcher, info, None, CUDA0) == (info, None)


def test_inductors_pdl_switch_is_read_from_the_options_then_its_config(monkeypatch):
    import torch._inductor.config as inductor

    dispatcher = Dispatcher()
    monkeypatch.setattr(inductor.triton, "enable_pdl", False)
    routing = backend.routing_backend(dispatcher, options={"triton.enable_pdl": True})
    assert routing.inductor_pdl(routing.inductor_config())
    routing = backend.routing_backend(dispatcher, mode="reduce-overhead")
    assert not routing.inductor_pdl(routing.inductor_config())
    monkeypatch.setattr(inductor.triton, "enable_pdl", True)  # TORCHINDUCTOR_ENABLE_PDL=1
    assert routing.inductor_pdl(routing.inductor_config())
    assert not backend.routing_backend(dispatcher, inner="eager").inductor_pdl({})


@pytest.mark.gpu
def test_gpu_gemvs_launch_as_pdl_beside_inductors_pdl_kernels(cache_dir):
    """A decode MLP under CUDA graphs with Inductor's PDL on: the routed GEMVs take their PDL
    form and the outputs are the eager model's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024, bias=False), torch.nn.SiLU(),
                                torch.nn.Linear(1024, 512, bias=False)).to("cuda", torch.bfloat16)
    model.requires_grad_(False)
    x = torch.randn(1, 512, device="cuda", dtype=torch.bfloat16)
    want = copy.deepcopy(model).double()(x.double())
    routes = []
    run = autotune_cli.compile(model, fullgraph=True, routes=routes, options={"triton.enable_pdl": True},
                               tune=TuneSettings(device="cuda", cache_dir=cache_dir, templates=("triton::gemv",)))
    with torch.no_grad():
        for _ in range(3):  # CUDA graphs: warm-up, record, replay
            got = run(x)
    assert [r.params.get("PDL") for r in routes] == [1, 1], routes
    torch.testing.assert_close(got.double(), want, rtol=3e-2, atol=3e-2 * want.abs().max().item())
