"""A graph autotune_cli.compile rewrites is one torch's compile caches can keep: every node a
rewrite adds carries its example value, as Dynamo's own do (AOTAutograd's cache reads it), so
a later compile of the same model, in a new process or after Dynamo forgets it, loads the
compiled graph instead of tracing it again. On the CPU: Triton under the interpreter."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

import autotune_cli
from autotune_cli import api
from autotune_cli.routing import backend
from autotune_cli.settings import TuneSettings

ONE_CONFIG = [{"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 2, "num_warps": 4}]
B, L, C, H, KV, S = 4, 2, 32, 8, 4, 16  # B x KV: the plain fold's least (gqa.MIN_HEADS)
D = C // H

pytestmark = pytest.mark.usefixtures("fresh_compile")


class Layer(torch.nn.Module):
    """What each rewrite meets: q, k and v of one input (a group), a rotary-style outer product
    (a matmul with K = 1), K and V repeated for the query heads before SDPA (the fold), and a
    projection after it (a routed linear)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.q = torch.nn.Linear(C, C, bias=False)
        self.k = torch.nn.Linear(C, KV * D, bias=False)
        self.v = torch.nn.Linear(C, KV * D, bias=False)
        self.o = torch.nn.Linear(C, C, bias=False)
        self.register_buffer("freq", torch.rand(1, D))
        self.requires_grad_(False)

    def forward(self, x, positions, k_cache, v_cache):
        angle = positions[:, None] @ self.freq  # [L, 1] @ [1, D]: K = 1
        q = (self.q(x).view(B, L, H, D) * angle.cos()[:, None]).transpose(1, 2)
        k = self.k(x).view(B, L, KV, D).transpose(1, 2)
        v = self.v(x).view(B, L, KV, D).transpose(1, 2)
        keys, values = torch.cat([k_cache, k], dim=2), torch.cat([v_cache, v], dim=2)
        n = H // KV
        keys = keys[:, :, None].expand(B, KV, n, S + L, D).reshape(B, H, S + L, D)
        values = values[:, :, None].expand(B, KV, n, S + L, D).reshape(B, H, S + L, D)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=torch.ones(B, 1, 1, S + L, dtype=torch.bool))
        return self.o(out.transpose(1, 2).reshape(B, L, C))


def inputs():
    g = torch.Generator().manual_seed(1)
    return (torch.randn(B, L, C, generator=g), torch.arange(L, dtype=torch.float32) + S,
            torch.randn(B, KV, S, D, generator=g), torch.randn(B, KV, S, D, generator=g))


@pytest.fixture
def tuning(tmp_path, cache_dir, monkeypatch):
    space = tmp_path / "space.json"
    space.write_text(json.dumps(ONE_CONFIG))
    monkeypatch.setattr(backend, "worth_grouping", lambda parts, one, margin: True)  # the CPU's times decide nothing
    return TuneSettings(device="cpu", cache_dir=cache_dir, templates=("triton::mm",), space_file=str(space),
                        workers=1)


def test_every_node_of_a_rewritten_graph_has_its_example_value(tuning, capfd):
    graphs = []

    def capture(gm, example_inputs):  # the graph as our backend hands it on
        graphs.append(gm)
        return gm.forward

    model = Layer()
    run = autotune_cli.compile(model, backend=capture, fullgraph=True, tune=tuning, group_linears=True)
    with torch.no_grad():
        want, got = model(*inputs()), run(*inputs())
    err = capfd.readouterr().err
    assert "3 as 1 grouped GEMM" in err and "1 attention over K and V unrepeated" in err
    assert "with K = 1 (a multiply)" in err
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    (gm,) = graphs
    targets = {str(n.target) for n in gm.graph.nodes}
    assert {"autotune.gemm_group.default", "autotune.gemm.default", "<built-in function mul>"} <= targets
    calls = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method")]
    assert [n.name for n in calls if "example_value" not in n.meta] == []
    assert gm.graph.output_node().args[0][0].meta["example_value"].shape == want.shape


def test_a_second_compile_of_the_routed_model_loads_torchs_cached_graph(tuning, tmp_path, monkeypatch, capfd):
    from torch._dynamo.utils import counters

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    model = Layer()
    outputs, seen = [], []
    for _ in range(2):
        counters.clear()
        run = autotune_cli.compile(model, mode="default", fullgraph=True, tune=tuning, group_linears=True)
        with torch.no_grad():
            outputs.append(run(*inputs()))
        seen.append(dict(counters["aot_autograd"]))
        api.reset()
        torch._dynamo.reset()  # as a new process: the graph is compiled again
    assert "routed 4 of 5 matmuls (3 as 1 grouped GEMM)" in capfd.readouterr().err
    assert seen[0].get("autograd_cache_bypass", 0) == 0 and seen[0].get("autograd_cache_saved") == 1
    assert seen[1].get("autograd_cache_hit") == 1
    torch.testing.assert_close(outputs[1], outputs[0], rtol=0, atol=0)


def test_only_the_nodes_a_rewrite_adds_are_given_values(capfd):
    """Dynamo's own nodes without a value (vmap's level, an assertion) are never run again: a
    vmap compiled twice (a second shape) keeps torch's values and functorch's level."""
    def f(x):
        return torch.vmap(lambda row: row.sin())(x)

    run = autotune_cli.compile(f, backend="eager", tune=False)
    for rows in (5, 6):
        x = torch.randn(rows, 3)
        torch.testing.assert_close(run(x), x.sin())
    assert torch._C._functorch.maybe_current_level() is None


def test_a_fold_inside_autocast_keeps_the_regions_dtype(tuning):
    """The fold's SDPA value is SDPA's own (bf16 under autocast), so the matmul after it is met
    with its real operands' dtypes: the float32 weight is cast as autocast casts it, and the
    bf16 product is routed, with torch's values."""
    weight = torch.randn(D, C)
    n = H // KV

    def attend(q, k, v):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            k = k[:, :, None].expand(B, KV, n, S, D).reshape(B, H, S, D)
            v = v[:, :, None].expand(B, KV, n, S, D).reshape(B, H, S, D)
            return F.scaled_dot_product_attention(q, k, v) @ weight

    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(B, H, 1, D, generator=g), torch.randn(B, KV, S, D, generator=g), \
        torch.randn(B, KV, S, D, generator=g)
    routes = []
    with torch.no_grad():
        want = attend(q, k, v)
        got = autotune_cli.compile(attend, backend="eager", fullgraph=True, tune=tuning, routes=routes)(q, k, v)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want)
    assert [(r.fallback, r.problem.dtype) for r in routes] == [(False, "bfloat16")]
