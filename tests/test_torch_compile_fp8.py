"""autotune_cli.compile with torch._scaled_mm calls on the CPU: float8 problems tuned by the
CLI into a temporary cache with one template each, a model of float8 Linears compiled with
its scaled GEMMs routed to the winners (Triton under the interpreter, through the opaque
`autotune::scaled_gemm`), in one graph, checked against the float64 product of the
dequantized operands."""

from __future__ import annotations

import json

import pytest
import torch

import autotune_cli
from autotune_cli import api
from autotune_cli.problem import make_problem
from autotune_cli.runner.verify import check, reference_of

M, K = 16, 128


pytestmark = pytest.mark.usefixtures("fresh_compile")


def tune(cli, n, scale, template, *extra) -> dict:
    code, out, err = cli("mm", "--m", M, "--n", n, "--k", K, "--dtype", "float8_e4m3fn", "--scale", scale,
                         "--device", "cpu", "--json", "--workers", "1", "--templates", template, *extra)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["winner"]["uid"] == template
    return doc


class Float8Linears(torch.nn.Module):
    """Three Linears in float8 as inference code writes them: rowwise (bf16 out), tensorwise
    with a bias (fp16 out), and one more rowwise of another width."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        w = lambda n: torch.nn.Parameter((torch.randn(n, K, generator=g) * 8).to(torch.float8_e4m3fn),  # noqa: E731
                                         requires_grad=False)
        self.w1, self.w2, self.w3 = w(64), w(48), w(32)
        self.s1 = torch.nn.Parameter(torch.rand(1, 64, generator=g) / 16 + 1e-3, requires_grad=False)
        self.s3 = torch.nn.Parameter(torch.rand(1, 32, generator=g) / 16 + 1e-3, requires_grad=False)
        self.s2 = torch.nn.Parameter(torch.tensor(0.05), requires_grad=False)
        self.b2 = torch.nn.Parameter(torch.randn(48, generator=g).to(torch.float16), requires_grad=False)

    def forward(self, x, sx, st):
        y1 = torch._scaled_mm(x, self.w1.t(), scale_a=sx, scale_b=self.s1, out_dtype=torch.bfloat16)
        y2 = torch._scaled_mm(x, self.w2.t(), st, self.s2, bias=self.b2, out_dtype=torch.float16)
        y3 = torch._scaled_mm(x, self.w3.t(), scale_a=sx, scale_b=self.s3, out_dtype=torch.bfloat16)
        return y1, y2, y3


def inputs():
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(M, K, generator=g) * 8).to(torch.float8_e4m3fn)
    return x, torch.rand(M, 1, generator=g) / 16 + 1e-3, torch.tensor(0.03)


def reference(model, x, sx, st):
    d = lambda t: t.double()  # noqa: E731
    y1 = reference_of(d(x) * d(sx), (d(model.w1) * d(model.s1).t()).t())
    y2 = reference_of(d(x) * d(st), (d(model.w2) * d(model.s2)).t(), d(model.b2))
    y3 = reference_of(d(x) * d(sx), (d(model.w3) * d(model.s3).t()).t())
    return y1, y2, y3


def problems():
    return (make_problem(m=M, n=64, k=K, dtype="float8_e4m3fn", scale="row", device="cpu"),
            make_problem(m=M, n=48, k=K, dtype="float8_e4m3fn", scale="tensor", bias="n", out_dtype="float16",
                         device="cpu"),
            make_problem(m=M, n=32, k=K, dtype="float8_e4m3fn", scale="row", device="cpu"))


def assert_right(got, want):
    for problem, value, ref in zip(problems(), got, want):
        assert value.dtype == getattr(torch, problem.result_dtype) and value.shape == ref.exact.shape
        verdict = check(problem, value, ref)
        assert verdict.ok, (problem.describe(), verdict.reason)


def scaled_ops(gm) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"
            and ("autotune" in str(n.target) or n.target is torch._scaled_mm)]


@pytest.mark.parametrize("first, second", [("triton::scaled_mm", "triton::scaled_mm_splitk"),
                                           ("triton::scaled_mm_persistent_tma", "aten::_scaled_mm")])
def test_scaled_mm_calls_run_their_winners_in_one_graph(cli, cache_dir, first, second):
    """The rowwise and the tensorwise call are tuned (each with one template), the third is
    not: the Triton winners become our op, an aten winner stays torch._scaled_mm, the
    untuned call stays torch's; one graph; the dequantized product's values."""
    one = tune(cli, 64, "row", first)
    two = tune(cli, 48, "tensor", second, "--bias", "--out-dtype", "float16")
    model = Float8Linears()
    args = inputs()
    want = reference(model, *args)
    graphs = []

    def capture(gm, example_inputs):  # the graph as our backend hands it on
        graphs.append(gm)
        return gm.forward

    for inner in ("eager", "aot_eager", capture):  # AOT traces through our op's fake implementation
        torch._dynamo.reset()
        routes: list = []
        compiled = autotune_cli.compile(model, backend=inner, routes=routes, fullgraph=True)  # no graph break
        with torch.no_grad():
            got = compiled(*args)
        assert sorted(r.uid for r in routes if not r.fallback) == sorted([first, second]), inner
        assert {r.key for r in routes if not r.fallback} == {one["key"], two["key"]}
        assert_right(got, want)
    (gm,) = graphs
    expected = ["autotune.scaled_gemm.default", "autotune.scaled_gemm.default" if second != "aten::_scaled_mm"
                else str(torch._scaled_mm), str(torch._scaled_mm)]
    assert scaled_ops(gm) == expected


def test_an_aten_winner_is_pinned_under_max_autotune(cli, cache_dir):
    """Under max-autotune Inductor would tune torch._scaled_mm again: the aten winner goes
    through our opaque op, which calls torch._scaled_mm itself."""
    from autotune_cli.routing import routing_backend

    tune(cli, 48, "tensor", "aten::_scaled_mm", "--bias", "--out-dtype", "float16")
    model = Float8Linears()
    args = inputs()
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    backend = routing_backend(api.default_dispatcher, capture)
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(model, backend=lambda gm, ex: (backend._rewrite(gm, pin_aten=True), capture(gm, ex))[1],
                            fullgraph=True)(*args)
    assert scaled_ops(graphs[0]) == [str(torch._scaled_mm), "autotune.scaled_gemm.default", str(torch._scaled_mm)]
    assert_right(got, reference(model, *args))


def test_scaled_winners_under_inductor(cli, cache_dir):
    """Inductor compiles the graph with our op in it (on the CPU: the opaque op), with
    torch._scaled_mm's results for the call left to it."""
    tune(cli, 64, "row", "triton::scaled_mm")
    model = Float8Linears()
    args = inputs()
    routes: list = []
    with torch.no_grad():
        got = autotune_cli.compile(model, routes=routes, fullgraph=True)(*args)
    assert [r.uid for r in routes if not r.fallback] == ["triton::scaled_mm"]
    assert_right(got, reference(model, *args))


def test_calls_the_route_does_not_take_are_left_to_the_compiler(cli, cache_dir):
    """A traced use_fast_accum, scale_result, or a problem with no entry: torch._scaled_mm stays."""
    from autotune_cli.routing.sites import match_scaled

    tune(cli, 64, "row", "triton::scaled_mm")
    model = Float8Linears()
    x, sx, st = inputs()

    class Other(torch.nn.Module):
        def forward(self, x, sx):
            fast = torch._scaled_mm(x, model.w1.t(), scale_a=sx, scale_b=model.s1, out_dtype=torch.bfloat16,
                                    use_fast_accum=True)  # tuned without fast accumulation
            return fast, torch._scaled_mm(x, model.w1.t(), sx, model.s1, None, None, torch.bfloat16)

    graphs, routes = [], []
    with torch.no_grad():
        autotune_cli.compile(Other(), backend=lambda gm, ex: graphs.append(gm) or gm.forward, routes=routes,
                             fullgraph=True)(x, sx)
    assert [r.uid for r in routes if not r.fallback] == ["triton::scaled_mm"]  # the positional call is routed
    assert scaled_ops(graphs[0]) == [str(torch._scaled_mm), "autotune.scaled_gemm.default"]

    class Node:  # what match_scaled reads of an fx node
        op, target = "call_function", torch._scaled_mm

        def __init__(self, args, kwargs):
            self.args, self.kwargs = args, kwargs

    tensor = type("T", (), {"meta": {"example_value": torch.zeros(1)}})()
    assert match_scaled(Node((tensor,) * 4, {})) is not None
    assert match_scaled(Node((tensor,) * 4, {"scale_result": tensor})) is None
    assert match_scaled(Node((tensor,) * 4, {"use_fast_accum": tensor})) is None
    assert match_scaled(Node((tensor,) * 4, {"out": tensor})) is None
    assert match_scaled(Node((tensor,) * 3, {})) is None
