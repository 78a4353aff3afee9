"""autotune_cli.compile on the CPU: problems tuned by the CLI into a temporary cache, a small
model compiled with its matmuls routed to the winners (Triton under the interpreter, where
they go through the opaque `autotune::gemm`), in one graph, with torch's results."""

from __future__ import annotations

import copy
import dataclasses
import json
import operator

import pytest
import torch

import autotune_cli
from autotune_cli import api
from autotune_cli.routing.sites import NEEDS_GRADIENTS
from conftest import recorded_and_compiled

ONE_CONFIG = [{"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 2, "num_warps": 4}]
T, C, H, V = 16, 32, 64, 48  # tokens, width, hidden, vocabulary


pytestmark = pytest.mark.usefixtures("fresh_compile")


@pytest.fixture
def space(tmp_path):
    path = tmp_path / "space.json"
    path.write_text(json.dumps(ONE_CONFIG))
    return path


def tune(cli, *args) -> dict:
    code, out, err = cli("mm", "--device", "cpu", "--json", "--workers", "1", *args)
    assert code == 0, err
    return json.loads(out)


class Block(torch.nn.Module):
    """LayerNorm, fc1 (bias) -> GELU -> fc2 (bias), a bias-free head, and a plain x @ W."""

    def __init__(self, vocab=V):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.ln = torch.nn.LayerNorm(C)
        self.fc1 = torch.nn.Linear(C, H)
        self.fc2 = torch.nn.Linear(H, C)
        self.head = torch.nn.Linear(C, vocab, bias=False)
        self.w = torch.nn.Parameter(torch.randn(C, C, generator=g) / C ** 0.5)
        for p in self.parameters():
            p.requires_grad_(False)

    def forward(self, x):
        h = self.fc2(torch.nn.functional.gelu(self.fc1(self.ln(x))))
        return self.head(x + h), torch.mm(x.reshape(-1, C), self.w)


def reference(model, x):
    """The model in float64."""
    double = Block(model.head.out_features).double()
    double.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
    return double(x.double())


def routed(routes) -> list:
    """The matmuls routed to a winner (`routes` also lists those left to the compiler)."""
    return [r for r in routes if not r.fallback]


def ops_in(gm) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function" and "autotune" in str(n.target)]


def capturing(graphs: list):
    """A backend that keeps each graph as our backend hands it on, and runs it as it is."""
    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return capture


def test_routed_matmuls_run_their_winners_in_one_graph(cli, cache_dir, space):
    """fc1 and fc2 (addmm, layout nt, [n] bias) tuned with triton::mm, the head (mm nt) with
    aten alone, x @ W (mm nn) not tuned: the first three are routed (the head's winner is
    torch's own op, left in place), the last stays torch's; one graph; float64's results."""
    fc1 = tune(cli, "--m", T, "--n", H, "--k", C, "--layout", "nt", "--bias", "--dtype", "float32",
               "--templates", "triton::mm", "--space", space)
    fc2 = tune(cli, "--m", T, "--n", C, "--k", H, "--layout", "nt", "--bias", "--dtype", "float32",
               "--templates", "triton::mm", "--space", space)
    head = tune(cli, "--m", T, "--n", V, "--k", C, "--layout", "nt", "--dtype", "float32",
                "--templates", "aten")
    winners = (fc1["winner"]["uid"], fc2["winner"]["uid"], head["winner"]["uid"])
    assert winners == ("triton::mm", "triton::mm", "aten::mm")
    model = Block()
    x = torch.randn(T, C, generator=torch.Generator().manual_seed(1))
    want_head, want_mm = reference(model, x)

    for inner in ("eager", "aot_eager"):  # AOT traces through our op's fake implementation
        torch._dynamo.reset()
        routes: list = []
        # fullgraph=True: a graph break would raise
        compiled = autotune_cli.compile(model, backend=inner, routes=routes, fullgraph=True)
        with torch.no_grad():
            got_head, got_mm = compiled(x)
        assert sorted(r.uid for r in routed(routes)) == ["aten::mm", "triton::mm", "triton::mm"], inner
        assert {r.key for r in routed(routes)} == {fc1["key"], fc2["key"], head["key"]}
        (left,) = [r for r in routes if r.fallback]  # x @ W: reported, with why
        assert left.uid == "torch.mm" and left.reason.startswith("nothing cached"), left
        torch.testing.assert_close(got_head.double(), want_head, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got_mm.double(), want_mm, rtol=1e-4, atol=1e-4)


def test_a_deep_copy_of_a_compiled_model_runs_and_routes_alike(cli, cache_dir, space):
    """copy.deepcopy of what autotune_cli.compile returns, as of torch.compile's: the copy
    has its own weights and compiles through the same backend (one dispatcher, one lock)."""
    tune(cli, "--m", T, "--n", H, "--k", C, "--layout", "nt", "--bias", "--dtype", "float32",
         "--templates", "triton::mm", "--space", space)
    model = Block()
    x = torch.randn(T, C, generator=torch.Generator().manual_seed(1))
    torch._dynamo.reset()
    routes: list = []
    compiled = autotune_cli.compile(model, backend="eager", routes=routes)
    copied = copy.deepcopy(compiled)
    with torch.no_grad():
        copied.fc1.weight.mul_(2)  # its own weights: the original's stay
        got = copied(x)
        assert routed(routes) and {r.uid for r in routed(routes)} == {"triton::mm"}  # the copy's routes
        want = compiled(x)
    assert not torch.equal(got[0], want[0])
    twin = Block()
    twin.load_state_dict(copied._orig_mod.state_dict())
    torch.testing.assert_close(got[0].double(), reference(twin, x)[0], rtol=1e-4, atol=1e-4)


def test_the_graph_calls_our_op_where_a_winner_is_cached(cli, cache_dir, space):
    tune(cli, "--m", T, "--n", H, "--k", C, "--layout", "nt", "--bias", "--dtype", "float32",
         "--templates", "triton::mm", "--space", space)
    model = Block()
    x = torch.randn(T, C)
    graphs: list = []
    capture = capturing(graphs)

    with torch.no_grad():
        out, _ = autotune_cli.compile(model, backend=capture, fullgraph=True)(x)
        out2, _ = autotune_cli.compile(model, backend=capture, fullgraph=True)(x + 1)
    assert len(graphs) == 2  # one graph per compile: no break
    # The route's name is what it runs (Inductor caches graphs on disk by their text): the
    # same winner gets the same name in both graphs.
    (first,) = [n.args[3] for n in graphs[0].graph.nodes if "autotune" in str(n.target)]
    (second,) = [n.args[3] for n in graphs[1].graph.nodes if "autotune" in str(n.target)]
    assert isinstance(first, str) and first == second
    names = ops_in(graphs[0])
    assert names == ["autotune.gemm.default"]  # fc1 alone: its winner, opaque under the interpreter
    torch.testing.assert_close(out.double(), reference(model, x)[0], rtol=1e-4, atol=1e-4)


def test_nothing_cached_leaves_the_graph_as_it_was(cache_dir):
    model = Block()
    x = torch.randn(T, C)
    routes: list = []
    with torch.no_grad():
        out, _ = autotune_cli.compile(model, backend="eager", routes=routes)(x)
    assert len(routes) == 4 and all(r.fallback and r.reason.startswith("nothing cached") for r in routes)
    torch.testing.assert_close(out, model(x)[0])


def test_a_winner_of_another_fingerprint_is_not_used(cli, cache_dir, space):
    """An entry whose fingerprint is not this machine's (here: a template source that has
    changed since) is never routed to."""
    tune(cli, "--m", T, "--n", H, "--k", C, "--layout", "nt", "--bias", "--dtype", "float32",
         "--templates", "triton::mm", "--space", space)
    from autotune_cli.store.cache import CACHE_FILE

    path = cache_dir / CACHE_FILE
    doc = json.loads(path.read_text())
    for entry in doc["entries"].values():
        for uid in entry["fingerprint"]["templates"]:
            entry["fingerprint"]["templates"][uid] = "0" * 16
    moved = {}
    for key, entry in doc["entries"].items():
        moved[key.split("@")[0] + "@" + "e" * 16] = entry
    doc["entries"] = moved
    path.write_text(json.dumps(doc))
    routes: list = []
    with torch.no_grad():
        autotune_cli.compile(Block(), backend="eager", routes=routes)(torch.randn(T, C))
    assert routed(routes) == []


def test_a_view_past_32_bit_offsets_is_left_to_the_compiler(cli, cache_dir, space, monkeypatch):
    """The compile plans a route from the graph's fake tensors with the eager call's rule
    (api/problems.wide_view): an input whose rows are so far apart that its matrix spans
    INDEX_LIMIT elements (lowered here from 2**31) is left to torch, with why, and the same
    product of dense rows is routed."""
    from autotune_cli.api import problems

    tune(cli, "--m", T, "--n", C, "--k", C, "--dtype", "float32", "--templates", "triton::mm", "--space", space)
    monkeypatch.setattr(problems, "INDEX_LIMIT", T * C + 16)
    w = torch.randn(C, C)
    for x, served in ((torch.randn(T, C + 4)[:, :C], False), (torch.randn(T, C), True)):
        torch._dynamo.reset()
        routes: list = []
        out = autotune_cli.compile(lambda x: torch.mm(x, w), backend="eager", routes=routes, fullgraph=True)(x)
        (route,) = routes
        assert route.fallback is not served, route
        assert served or "A spans 572 elements (strides (36, 1)), past 32-bit offsets" in route.reason
        torch.testing.assert_close(out, x @ w)


def test_padded_winner_under_inductor(cli, cache_dir, space):
    """aten::mm_aligned on a head whose width is not 16-byte aligned (fp16, V = 50): the
    opaque op under Inductor itself (on the CPU), output with padded rows, right values."""
    vocab = 50
    aligned = tune(cli, "--m", T, "--n", vocab, "--k", C, "--layout", "nt", "--dtype", "float16",
                   "--templates", "aten::mm_aligned")
    assert aligned["winner"]["uid"] == "aten::mm_aligned"
    model = Block(vocab).half()
    x = torch.randn(T, C).half()
    routes: list = []
    try:
        with torch.no_grad():
            got, _ = autotune_cli.compile(model, routes=routes, fullgraph=True)(x)
    except Exception as exc:  # no C++ compiler, or an Inductor that cannot lower on the CPU
        if routed(routes):
            raise
        pytest.skip(f"Inductor could not compile on this CPU: {type(exc).__name__}: {exc}")
    assert [r.uid for r in routed(routes)] == ["aten::mm_aligned"]
    torch.testing.assert_close(got.double(), reference(model, x)[0], rtol=2e-2, atol=2e-2)


def test_under_max_autotune_an_aten_winner_is_pinned(cli, cache_dir, monkeypatch):
    """Inductor's max-autotune would tune an aten winner's matmul again: there the winner
    goes through our opaque op, which runs torch's own call."""
    tune(cli, "--m", T, "--n", V, "--k", C, "--layout", "nt", "--dtype", "float32", "--templates", "aten")
    from autotune_cli.routing import routing_backend

    graphs: list = []
    capture = capturing(graphs)

    backend = routing_backend(api.default_dispatcher, capture)
    monkeypatch.setattr(backend, "inductor_config", lambda: {"max_autotune": True})
    model, x = Block(), torch.randn(T, C)
    with torch.no_grad():
        head, _ = torch.compile(model, backend=backend, fullgraph=True)(x)
    assert ops_in(graphs[0]) == ["autotune.gemm.default"]
    torch.testing.assert_close(head, model(x)[0])


def test_tensors_that_need_gradients_stay_on_torch(cli, cache_dir, space):
    tune(cli, "--m", T, "--n", H, "--k", C, "--layout", "nt", "--bias", "--dtype", "float32",
         "--templates", "triton::mm", "--space", space)
    model = Block()
    model.fc1.weight.requires_grad_(True)
    routes: list = []
    x = torch.randn(T, C)
    out, _ = autotune_cli.compile(model, backend="aot_eager", routes=routes)(x)
    assert routed(routes) == []
    assert any(r.reason.startswith("needs gradients") for r in routes)
    out.sum().backward()
    assert model.fc1.weight.grad is not None


def test_grad_mode_is_the_graphs_at_each_matmul(cli, cache_dir, space):
    """Called under no_grad, a function that enables grad around one linear and disables it
    around another: the first needs gradients (left to torch, and its backward runs), the
    second is routed though its weight requires grad."""
    tune(cli, "--m", T, "--n", H, "--k", C, "--layout", "nt", "--bias", "--dtype", "float32",
         "--templates", "triton::mm", "--space", space)
    lin = torch.nn.Linear(C, H)

    def f(x):
        with torch.enable_grad():
            kept = lin(x)
        with torch.no_grad():
            routed_out = lin(x)
        return kept, routed_out

    routes: list = []
    x = torch.randn(T, C)
    with torch.no_grad():
        kept, routed_out = autotune_cli.compile(f, backend="aot_eager", routes=routes)(x)
    want = torch.nn.functional.linear(x, lin.weight.detach(), lin.bias.detach())
    torch.testing.assert_close(kept, want)
    torch.testing.assert_close(routed_out, want)
    assert kept.requires_grad and not routed_out.requires_grad
    assert [r.uid for r in routed(routes)] == ["triton::mm"]
    assert [r.reason for r in routes if r.fallback] == ["needs gradients (our kernels have no backward)"]
    kept.sum().backward()
    assert lin.weight.grad is not None


def test_an_attention_module_is_said_to_stay_torchs(cache_dir, capfd):
    """nn.MultiheadAttention in inference: Dynamo keeps its function whole, its matmuls out of
    routing's reach; the compile says so rather than nothing, with torch's values."""
    mha = torch.nn.MultiheadAttention(C, 2, batch_first=True).eval()
    x = torch.randn(2, 5, C)
    routes: list = []
    with torch.no_grad():
        got, _ = autotune_cli.compile(mha, backend="eager", tune=False, routes=routes)(x, x, x)
        torch.testing.assert_close(got, mha(x, x, x)[0])
    assert [(r.fallback, r.reason.startswith("matmuls inside one op of torch's")) for r in routes] == [(True, True)]
    assert "autotune: 1 attention or encoder layer op of torch's left whole (its matmuls inside)" \
        in capfd.readouterr().err
    # beside a linear: the op is not counted as a matmul
    model = torch.nn.Sequential(torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(C, 2, H, batch_first=True), 2, enable_nested_tensor=False),
        torch.nn.Linear(C, 10)).eval()
    with torch.no_grad():
        autotune_cli.compile(model, backend="eager", tune=False)(x)
    assert ("routed 0 of 1 matmul; left to the compiler: 1 with nothing cached; "
            "2 attention or encoder layer ops of torch's left whole (its matmuls inside)") in capfd.readouterr().err


def test_under_autocast_a_winner_gives_way_to_torchs_cast(cli, cache_dir, space):
    """A float32 winner is cached for fc1, but under autocast the matmul runs in bfloat16:
    compiled, it is met as the bfloat16 problem (nothing cached for it: the compiler's);
    called through the API, torch's op runs; either way the dtype and values are torch's."""
    tune(cli, "--m", T, "--n", H, "--k", C, "--layout", "nt", "--bias", "--dtype", "float32",
         "--templates", "triton::mm", "--space", space)
    model, x = Block(), torch.randn(T, C)
    assert api.dispatch_info(x, model.fc1.weight.t(), model.fc1.bias).uid == "triton::mm"
    routes: list = []
    run = autotune_cli.compile(model, backend="aot_eager", routes=routes)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for got, want in zip(run(x), model(x)):
            assert got.dtype == want.dtype == torch.bfloat16
            torch.testing.assert_close(got, want)
        assert api.dispatch_info(x, model.fc1.weight.t(), model.fc1.bias).reason.startswith("under torch.autocast")
        eager = autotune_cli.linear(x, model.fc1.weight, model.fc1.bias)
        torch.testing.assert_close(eager, torch.nn.functional.linear(x, model.fc1.weight, model.fc1.bias))
    assert routed(routes) == [] and len(routes) == 4
    assert all(r.problem.dtype == "bfloat16" and r.reason.startswith("nothing cached") for r in routes)
    assert autotune_cli.linear(x, model.fc1.weight, model.fc1.bias).dtype == torch.float32  # its winner again


def test_the_api_inside_torch_compile_is_torchs_op(cli, cache_dir, space):
    """autotune_cli.mm / addmm / linear called in a function torch.compile traces (a winner
    cached for the addmm): the compiler sees torch's ops, fullgraph or not, with torch's values."""
    tune(cli, "--m", T, "--n", H, "--k", C, "--layout", "nt", "--bias", "--dtype", "float32",
         "--templates", "triton::mm", "--space", space)
    lin = torch.nn.Linear(C, H).requires_grad_(False)
    x = torch.randn(T, C)
    assert api.dispatch_info(x, lin.weight.t(), lin.bias).uid == "triton::mm"

    def f(x):
        return autotune_cli.linear(x, lin.weight, lin.bias) + autotune_cli.mm(x, lin.weight.t())

    want = torch.nn.functional.linear(x, lin.weight, lin.bias) + x @ lin.weight.t()
    for fullgraph in (True, False):
        torch._dynamo.reset()
        torch.testing.assert_close(torch.compile(f, backend="eager", fullgraph=fullgraph)(x), want)


@pytest.mark.gpu
def test_gpu_triton_winner_is_a_triton_op_inductor_launches(cli, cache_dir):
    """On a GPU a triton::mm winner goes in as autotune::triton_gemm (wrap_triton): Inductor
    compiles and launches it itself; the result matches float64."""
    m, n, k = 256, 512, 384
    code, out, err = cli("mm", "--json", "--m", m, "--n", n, "--k", k, "--dtype", "bfloat16", "--layout", "nt",
                         "--bias", "--templates", "triton::mm")
    assert code == 0, err
    assert json.loads(out)["winner"]["uid"] == "triton::mm"
    lin = torch.nn.Linear(k, n, device="cuda", dtype=torch.bfloat16).requires_grad_(False)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    routes: list = []
    with torch.no_grad():
        got = autotune_cli.compile(lin, routes=routes, fullgraph=True)(x)
    from autotune_cli.routing import ops

    assert [r.uid for r in routed(routes)] == ["triton::mm"]
    route = next(r for r in ops.ROUTES.values() if r.info.key == routed(routes)[0].key)
    assert route.parts is not None  # the triton_op, not the opaque op
    want = x.double() @ lin.weight.double().t() + lin.bias.double()
    torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2)


def test_inductor_replays_cuda_graphs_by_default_as_max_autotune_does(monkeypatch):
    """With Inductor and no mode, autotune_cli.compile asks for reduce-overhead (CUDA graphs);
    mode="default", options that set the graphs, or another backend leave them as given."""
    seen = []
    monkeypatch.setattr(torch, "compile", lambda model, backend=None, **kwargs: seen.append(backend) or model)
    model = torch.nn.Linear(4, 4)
    autotune_cli.compile(model)
    autotune_cli.compile(model, mode="default")
    autotune_cli.compile(model, options={"triton.cudagraphs": False})
    autotune_cli.compile(model, backend="eager")
    autotune_cli.compile(model, mode="max-autotune")
    default, plain, own, eager, autotuned = seen
    assert default.mode == "reduce-overhead" and default.inductor_config()["triton.cudagraphs"] is True
    assert plain.inductor_config().get("triton.cudagraphs") is None
    assert own.mode is None and own.inductor_config() == {"triton.cudagraphs": False}
    assert eager.mode is None and eager.inductor_config() == {}
    config = autotuned.inductor_config()
    assert config["triton.cudagraphs"] is True and config["max_autotune"] is True


@pytest.mark.gpu
def test_gpu_a_fixed_twin_launches_through_wrap_triton_and_serves_other_pitches(tmp_path):
    """A FIXED_NK twin (N and K written in) launched as a route's triton_op launches it
    (wrap_triton), and called eagerly with an A of another pitch: both match float64."""
    from torch.library import wrap_triton

    from autotune_cli.problem import make_problem
    from autotune_cli.templates import get_template
    from autotune_cli.templates.base import Operands

    m, n, k = 128, 1000, 768
    problem = make_problem(m=m, n=n, k=k, dtype="bfloat16", layout="nt")
    template = get_template("triton::mm")
    tile = {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_stages": 3, "num_warps": 4}
    kernel = template.build(problem, template.full_params(problem, template.fixed_twin(tile)), str(tmp_path))
    jit, grid, arguments, options = kernel.launch_parts
    weight = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)

    def run(a, w):
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        args = list(arguments(Operands(a, w.t(), out, None)))
        args[3] = a  # no bias: as the route's triton_op passes it
        wrap_triton(jit)[grid](*args, **options)
        return out

    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    got = torch.compile(run, fullgraph=True)(x, weight)
    torch.testing.assert_close(got.double(), x.double() @ weight.double().t(), rtol=2e-2, atol=2e-2)
    wide = torch.randn(m, k + 64, device="cuda", dtype=torch.bfloat16)[:, 32:32 + k]  # pitch k + 64
    for a in (x, wide):
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        kernel(Operands(a, weight.t(), out, None))
        torch.testing.assert_close(out.double(), a.double() @ weight.double().t(), rtol=2e-2, atol=2e-2)


def cpu_tuning(cache_dir, space):
    """What a compile tunes with here: Triton's mm under the interpreter, one config."""
    from autotune_cli.settings import TuneSettings

    return TuneSettings(device="cpu", cache_dir=cache_dir, templates=("triton::mm", "triton::bmm"),
                        space_file=str(space), workers=1)


def test_a_compile_tunes_what_it_meets_and_the_next_one_hits(cache_dir, space, capfd):
    """Nothing cached: the compile tunes the graph's four problems in one tuner (progress on
    stderr), caches them and routes every matmul; a second compile in a fresh state (tune
    off) finds them all in the cache and routes the same winners."""
    from autotune_cli.store.cache import Cache

    model = Block()
    x = torch.randn(T, C, generator=torch.Generator().manual_seed(1))
    routes: list = []
    with torch.no_grad():
        # settings made for a GPU (TuneSettings' default device): the graph's own device is tuned
        settings = dataclasses.replace(cpu_tuning(cache_dir, space), device="cuda")
        got_head, got_mm = autotune_cli.compile(model, backend="eager", routes=routes, fullgraph=True,
                                                tune=settings)(x)
    err = capfd.readouterr().err
    assert "autotune: tuning 4 matmul problems" in err
    assert "autotune: routed 4 of 4 matmuls" in err
    assert sorted(r.uid for r in routes) == ["triton::mm"] * 4 and not any(r.fallback for r in routes)
    assert len(Cache(cache_dir).load()) == 4
    want_head, want_mm = reference(model, x)
    torch.testing.assert_close(got_head.double(), want_head, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got_mm.double(), want_mm, rtol=1e-4, atol=1e-4)

    api.reset()
    torch._dynamo.reset()
    again: list = []
    with torch.no_grad():
        autotune_cli.compile(model, backend="eager", routes=again, fullgraph=True, tune=False)(x)
    err = capfd.readouterr().err
    assert "tuning" not in err and "routed 4 of 4" in err
    assert [(r.key, r.uid) for r in again] == [(r.key, r.uid) for r in routes]


@pytest.mark.parametrize("columns", ["0", "30"])
def test_a_compiles_tuning_notice_is_one_whole_line_at_any_width(cache_dir, space, capfd, monkeypatch, columns):
    """The compile path's notices are laid out as the command's are: an `autotune: ` line
    whole at a narrow terminal (COLUMNS=30), and printed at all where COLUMNS=0 (a plain
    rich console drew nothing there)."""
    from autotune_cli.problem import make_problem
    from autotune_cli.routing.tuning import tune_missing

    monkeypatch.setenv("COLUMNS", columns)
    problem = make_problem(m=8, n=8, k=8, dtype="float32", device="cpu")
    report = tune_missing([problem], dataclasses.replace(cpu_tuning(cache_dir, space), templates=("triton::mm",)))
    assert report.tuned == [problem]
    lines = capfd.readouterr().err.splitlines()
    assert "autotune: tuning 1 matmul problem this graph meets (cached for later compiles)" in lines, lines


def test_tune_false_tunes_nothing_and_says_what_was_left(cache_dir, capfd):
    routes: list = []
    with torch.no_grad():
        autotune_cli.compile(Block(), backend="eager", routes=routes, tune=False)(torch.randn(T, C))
    err = capfd.readouterr().err
    assert "tuning" not in err
    assert "routed 0 of 4 matmuls; left to the compiler: 4 with nothing cached" in err
    assert not (cache_dir / "autotune-cache.json").exists() or not json.loads(
        (cache_dir / "autotune-cache.json").read_text()).get("entries")


@pytest.mark.parametrize("kwargs, said", [
    ({"mode": "max_autotune"}, "Unrecognized mode=max_autotune"),
    ({"backend": "inductr"}, "Invalid backend: 'inductr'"),
    ({"options": {"max_autotun": True}}, "Unexpected optimization option max_autotun"),
    ({"options": {"max-autotun": True}}, "Unexpected optimization option max-autotun "),
])
def test_a_bad_mode_backend_or_option_is_said_at_the_call(kwargs, said):
    """As torch.compile says them: at the call, in one short line, not at the first forward
    inside Dynamo's error about our backend object."""
    with pytest.raises(RuntimeError, match=said) as raised:
        autotune_cli.compile(torch.nn.Linear(4, 4), **kwargs)
    assert len(str(raised.value)) < 200 and "routing_backend" not in str(raised.value)


def test_an_unknown_template_in_the_tune_settings_is_said_at_the_call(cache_dir):
    """Said once, at the call, in one short line: at the first forward it was said for every
    problem the graph met, each with the whole list of uids, and the summary then read
    'nothing cached'."""
    from autotune_cli.errors import UserError
    from autotune_cli.settings import TuneSettings

    with pytest.raises(UserError, match=r"^tune.templates: unknown template 'nonexist' \(a uid such as "
                                        r"triton::mm, or a backend: aten, triton\)$") as raised:
        autotune_cli.compile(torch.nn.Linear(4, 4), tune=TuneSettings(device="cpu", templates=("nonexist",)))
    assert len(str(raised.value)) < 200
    # uids and backends pass
    autotune_cli.compile(torch.nn.Linear(4, 4), tune=TuneSettings(device="cpu", templates=("aten", "triton::mm")))


@pytest.mark.parametrize("field, value, said", [
    ("workers", 10**6, "tune.workers must be between 1 and 256, got 1000000"),
    ("workers", 0, "tune.workers must be between 1 and 256, got 0"),
    ("seed", -1, "tune.seed must be between 0 and 4294967295, got -1"),
    ("timeout_s", float("nan"), "tune.timeout_s must be a positive number of seconds, got nan"),
    ("budget_s", -1, "tune.budget_s must be a positive number of seconds, got -1"),
    ("device", "tpu", "tune.device takes cuda or cpu, not 'tpu'"),
    ("search", "foo", "tune.search takes default or exhaustive, not 'foo'"),
    ("space_file", "/no/such/space.json", "space file not found: /no/such/space.json"),
    ("templates", "triton::mm", "tune.templates takes a tuple of uids or backends"),
    ("startup_timeout_s", float("nan"), "tune.startup_timeout_s must be a positive number of seconds, got nan"),
    ("gpus", -1, "tune.gpus must be between 0 (all) and 256, got -1"),
])
def test_tune_settings_no_tune_takes_are_said_at_the_call(cache_dir, field, value, said):
    """The command's rules (settings.TuneSettings.check): at the call, one line, before any
    worker starts (a million workers started processes until the run was killed)."""
    from autotune_cli.errors import UserError
    from autotune_cli.settings import TuneSettings

    with pytest.raises(UserError) as raised:
        autotune_cli.compile(torch.nn.Linear(4, 4), tune=TuneSettings(**{"device": "cpu", "cache_dir": cache_dir,
                                                                         field: value}))
    assert str(raised.value).startswith(said) and "\n" not in str(raised.value)


def test_compile_with_arguments_decorates_as_torch_compile_does(cache_dir):
    weight = torch.randn(8, 4)

    @autotune_cli.compile(mode="default", cache_dir=cache_dir, tune=False)
    def project(x):
        return x @ weight.t()

    x = torch.randn(3, 4)
    torch.testing.assert_close(project(x), x @ weight.t())


def test_another_backend_gets_mode_and_options_as_torch_compile_passes_them():
    """Keywords of its call ("default" is no mode), not an error at the call."""
    seen: list = []

    def backend(gm, example_inputs, **kwargs):
        seen.append(kwargs)
        return gm.forward

    x = torch.randn(2, 4)
    for kwargs in ({"mode": "default"}, {"mode": "reduce-overhead", "options": {"x-y": 1}}):
        model = autotune_cli.compile(torch.nn.Linear(4, 4), backend=backend, tune=False, **kwargs)
        with torch.no_grad():
            torch.testing.assert_close(model(x), model._orig_mod(x))
    assert seen == [{}, {"mode": "reduce-overhead", "options": {"x-y": 1}}]


def test_an_option_is_taken_as_torch_compile_takes_it():
    """Dashes in an option's name, as torch.compile reads them."""
    model = autotune_cli.compile(torch.nn.Linear(4, 4), options={"epilogue-fusion": False}, tune=False)
    with torch.no_grad():
        x = torch.randn(2, 4)
        torch.testing.assert_close(model(x), model._orig_mod(x))


class ScaledAddmm(torch.nn.Module):
    """A GEMM with alpha= and beta= (our ops take neither) beside a plain linear."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(32, 32))
        self.b = torch.nn.Parameter(torch.randn(32))
        self.linear = torch.nn.Linear(32, 32)

    def forward(self, x):
        return self.linear(torch.addmm(self.b, x, self.w.t(), beta=0.5, alpha=2.0))


def test_a_gemm_with_alpha_or_beta_is_met_and_said_to_stay_torchs(cache_dir, capfd):
    model = ScaledAddmm().eval()
    x = torch.randn(16, 32)
    routes: list = []
    with torch.no_grad():
        got = autotune_cli.compile(model, backend="eager", routes=routes, tune=False)(x)
        torch.testing.assert_close(got, model(x))
    err = capfd.readouterr().err
    assert "routed 0 of 2 matmuls; left to the compiler: " in err
    assert "1 with alpha=, beta= or out=" in err and "1 with nothing cached" in err
    (scaled,) = [r for r in routes if r.reason.startswith("arguments our ops do not take")]
    assert scaled.fallback and scaled.reason == "arguments our ops do not take (alpha=, beta=)"


def test_the_apis_addmm_and_an_addmm_with_beta_and_alpha_of_1_are_routed(cli, cache_dir, space):
    """autotune_cli.addmm (and linear) inside a compiled function, and torch.addmm given
    beta=1, alpha=1 (its own defaults): plain addmms, routed to the cached winner."""
    tune(cli, "--m", T, "--n", H, "--k", C, "--layout", "nt", "--bias", "--dtype", "float32",
         "--templates", "triton::mm", "--space", space)
    lin = torch.nn.Linear(C, H).requires_grad_(False)

    def calls(x):
        return (autotune_cli.linear(x, lin.weight, lin.bias),
                torch.addmm(lin.bias, x, lin.weight.t(), beta=1, alpha=1.0))

    routes: list = []
    x = torch.randn(T, C)
    got = autotune_cli.compile(calls, backend="aot_eager", routes=routes, tune=False)(x)
    for value in got:
        torch.testing.assert_close(value, lin(x))
    assert [(r.uid, r.fallback) for r in routes] == [("triton::mm", False)] * 2


class MatrixByBatch(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 32))

    def forward(self, y):
        return self.w @ y


def test_a_matrix_times_a_batch_is_met_and_said_to_stay_torchs(cache_dir, capfd):
    routes: list = []
    y = torch.randn(4, 32, 24)
    model = MatrixByBatch().eval()
    with torch.no_grad():
        got = autotune_cli.compile(model, backend="eager", routes=routes, tune=False)(y)
        torch.testing.assert_close(got, model(y))
    assert "routed 0 of 1 matmul; left to the compiler: 1 as 2-D @ N-D" in capfd.readouterr().err
    assert [(r.op, r.fallback) for r in routes] == [("mm", True)] and "2-D @ N-D" in routes[0].reason


class ScaledScores(torch.nn.Module):
    """Attention scores as some models write them: one baddbmm, the scale as alpha."""

    def forward(self, bias, q, k):
        return torch.baddbmm(bias, q, k.transpose(1, 2), beta=0.0, alpha=0.125)


def test_a_baddbmm_is_met_and_said_to_stay_torchs(cache_dir, capfd):
    routes: list = []
    bias, q, k = torch.randn(4, 8, 8), torch.randn(4, 8, 16), torch.randn(4, 8, 16)
    with torch.no_grad():
        got = autotune_cli.compile(ScaledScores(), backend="eager", routes=routes, tune=False)(bias, q, k)
        torch.testing.assert_close(got, ScaledScores()(bias, q, k))
    assert "routed 0 of 1 matmul; left to the compiler: 1 as baddbmm" in capfd.readouterr().err
    assert [(r.op, r.fallback) for r in routes] == [("bmm", True)]


class Attention(torch.nn.Module):
    """Eager attention's 4-D q @ k^T and a rotary-like outer product (K = 1)."""

    def forward(self, q, k, freqs, positions):
        angles = freqs @ positions  # [1, 8, 1] x [1, 1, T]: K = 1
        return torch.matmul(q, k.transpose(-1, -2)), angles


def test_4d_matmuls_are_routed_and_an_outer_product_becomes_a_multiply(cache_dir, space, capfd):
    """q @ k^T routed as a bmm; freqs @ positions (K = 1) not tuned, and rewritten as a
    broadcast multiply the compiler fuses (no matmul left in the graph), with the same values."""
    q = torch.randn(2, 3, T, C, generator=torch.Generator().manual_seed(2))
    k = torch.randn(2, 3, T, C, generator=torch.Generator().manual_seed(3))
    freqs, positions = torch.randn(1, 8, 1), torch.arange(T, dtype=torch.float32).reshape(1, 1, T)
    routes: list = []
    graphs: list = []
    capture = capturing(graphs)

    with torch.no_grad():
        scores, angles = autotune_cli.compile(Attention(), backend=capture, routes=routes, fullgraph=True,
                                              tune=cpu_tuning(cache_dir, space))(q, k, freqs, positions)
    (bmm,) = [r for r in routes if not r.fallback]
    assert (bmm.op, bmm.uid, bmm.problem.b, bmm.problem.m, bmm.problem.n, bmm.problem.k) == \
        ("bmm", "triton::bmm", 6, T, T, C)
    assert bmm.problem.layout == "nt"  # k^T read through its strides, not copied
    (outer,) = [r for r in routes if r.fallback]
    assert outer.reason.startswith("K = 1")
    assert "left to the compiler: 1 with K = 1 (a multiply)" in capfd.readouterr().err
    assert ops_in(graphs[0]) == ["autotune.gemm.default"]
    matmuls = {torch.matmul, operator.matmul, torch.bmm, torch.mm}
    assert not [n for n in graphs[0].graph.nodes if n.op == "call_function" and n.target in matmuls]
    assert [n.target for n in graphs[0].graph.nodes if n.op == "call_function" and n.target is operator.mul]
    torch.testing.assert_close(angles, freqs @ positions, rtol=0, atol=0)
    torch.testing.assert_close(scores, q @ k.transpose(-1, -2), rtol=1e-4, atol=1e-4)


class OuterProducts(torch.nn.Module):
    """K = 1 through a Linear with its bias, addmm and a batched matmul over a 2-D weight."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(1, 8)

    def forward(self, x, col, row, bias):
        return self.lin(x), torch.addmm(bias, col, row), x.reshape(2, 3, 1) @ row


@pytest.mark.parametrize("dynamic", [False, True])
def test_every_outer_product_form_runs_as_a_multiply_with_torchs_values(cache_dir, capfd, dynamic):
    """Static or with dynamic sizes (a multiply serves any): no matmul left, torch's values."""
    module = OuterProducts().requires_grad_(False)
    gen = torch.Generator().manual_seed(4)
    x, col, row, bias = (torch.randn(6, 1, generator=gen), torch.randn(5, 1, generator=gen),
                         torch.randn(1, 8, generator=gen), torch.randn(8, generator=gen))
    routes: list = []
    graphs: list = []
    capture = capturing(graphs)

    with torch.no_grad():
        got = autotune_cli.compile(module, backend=capture, routes=routes, fullgraph=True, tune=False,
                                   dynamic=dynamic)(x, col, row, bias)
    assert all(r.problem is None for r in routes) == dynamic
    assert [r.reason.startswith("K = 1") for r in routes] == [True] * 3
    assert "left to the compiler: 3 with K = 1 (a multiply)" in capfd.readouterr().err
    left = [n.target for n in graphs[0].graph.nodes if n.op == "call_function"
            and n.target in (torch._C._nn.linear, torch.addmm, operator.matmul, torch.matmul)]
    assert left == []
    for value, want in zip(got, module(x, col, row, bias)):
        assert value.is_contiguous()
        torch.testing.assert_close(value, want, rtol=1e-6, atol=1e-6)


def test_outer_products_in_a_chain_and_under_autocast_keep_torchs_values_and_dtypes(cache_dir):
    """(a @ b) @ c with K = 1 twice: the second multiply reads the first's output (not the
    matmul node it replaced); under autocast the multiply gets the dtype the matmul would."""
    gen = torch.Generator().manual_seed(5)
    a, b, c = torch.randn(4, 1, generator=gen), torch.randn(1, 1, generator=gen), torch.randn(1, 5, generator=gen)

    def chain(a, b, c):
        return (a @ b) @ c

    def cast(a, c):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return a @ c

    with torch.no_grad():
        got = autotune_cli.compile(chain, backend="eager", fullgraph=True, tune=False)(a, b, c)
        torch.testing.assert_close(got, chain(a, b, c), rtol=0, atol=0)
        got = autotune_cli.compile(cast, backend="eager", fullgraph=True, tune=False)(a, c)
        want = cast(a, c)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_dynamic_m_is_routed_per_call(cache_dir, space, capfd):
    """compile(dynamic=True): the Linear's M is symbolic. Its problem is tuned at the powers
    of two up to the trace's M rounded up (the trace's M among them) and each call picks its winner:
    at a tuned M the tuned kernel, below one the config rebuilt for its M (checked), above
    the largest torch's op; every output right."""
    from autotune_cli.routing import ops
    from autotune_cli.routing.dynamic import DYNAMIC_M_FLOOR, DynamicCall

    lin = torch.nn.Linear(C, H).requires_grad_(False)
    routes: list = []
    compiled = autotune_cli.compile(lin, backend="aot_eager", routes=routes, dynamic=True, fullgraph=True,
                                    tune=cpu_tuning(cache_dir, space))
    for rows in (12, 5, 16, 3 * DYNAMIC_M_FLOOR):
        x = torch.randn(2, rows, C, generator=torch.Generator().manual_seed(rows))
        with torch.no_grad():
            got = compiled(x)
        torch.testing.assert_close(got, lin(x), rtol=1e-4, atol=1e-4)
    (route,) = routes
    # M = 2 x rows: torch's bounds start it at 4 (sizes 0 and 1 are specialised apart)
    assert (route.uid, route.fallback, route.params["m"]) == ("dynamic", False, [4, 8, 16, 24, 32])
    assert "tuning 5 matmul problems" in capfd.readouterr().err
    (call,) = [r.call for r in ops.ROUTES.values()
               if isinstance(r.call, DynamicCall) and r.call.dispatcher.cache_dir == cache_dir]
    assert call.chosen[24] == "triton::mm"  # traced at 2 x 12 rows: tuned there
    assert call.chosen[10] == "triton::mm (tuned at M = 16)"
    assert call.chosen[32] == "triton::mm"
    assert call.chosen[96].startswith("M = 96 is above the largest tuned (32)")


def test_a_dynamic_m_below_a_tuned_one_is_right_on_strided_views(cache_dir, space):
    """A slice of a wider activation (rows C + 16 apart) and a transposed weight: the config
    borrowed at M below a tuned one is checked on operands of the call's own strides, so the
    launch it binds serves the calls that follow (it bound the check's contiguous ones)."""
    from autotune_cli.routing import ops
    from autotune_cli.routing.dynamic import DynamicCall

    weight = torch.randn(H, C, generator=torch.Generator().manual_seed(1))

    def head(x):
        return x[:, :C] @ weight.t()

    compiled = autotune_cli.compile(head, backend="aot_eager", fullgraph=True,
                                    tune=cpu_tuning(cache_dir, space))
    for rows in (8, 3, 5, 6):
        x = torch.randn(rows, C + 16, generator=torch.Generator().manual_seed(rows))
        torch._dynamo.mark_dynamic(x, 0)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), head(x), rtol=1e-4, atol=1e-4)
    (call,) = [r.call for r in ops.ROUTES.values()
               if isinstance(r.call, DynamicCall) and r.call.dispatcher.cache_dir == cache_dir]
    assert call.chosen[5] == "triton::mm (tuned at M = 8)"


def test_batch_1_under_dynamic_shapes_is_routed_at_its_m(cache_dir, space, capfd):
    """compile(dynamic=True) at one row: torch fixes M = 1 (it specializes 0 and 1) while K
    stays symbolic: the matmul is tuned and routed at M = 1, not left as a shape with no hint."""
    from autotune_cli.routing import ops
    from autotune_cli.routing.dynamic import DynamicCall

    lin = torch.nn.Linear(C, H).requires_grad_(False)
    routes: list = []
    compiled = autotune_cli.compile(lin, backend="aot_eager", routes=routes, dynamic=True, fullgraph=True,
                                    tune=cpu_tuning(cache_dir, space))
    x = torch.randn(1, C, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), lin(x), rtol=1e-4, atol=1e-4)
    (route,) = routes
    assert (route.uid, route.fallback, route.params["m"], route.problem.m) == ("dynamic", False, [1], 1)
    assert "routed 1 of 1 matmul" in capfd.readouterr().err
    (call,) = [r.call for r in ops.ROUTES.values()
               if isinstance(r.call, DynamicCall) and r.call.dispatcher.cache_dir == cache_dir]
    assert call.chosen[1] == "triton::mm"


def test_a_config_that_is_wrong_at_another_m_is_not_used(cache_dir, space, monkeypatch):
    """A winner rebuilt for an M it was not tuned at is checked against float64 first: one
    that gives a wrong product there is recorded and torch's op runs that M."""
    from autotune_cli.routing import ops
    from autotune_cli.routing.dynamic import DynamicCall

    real = api.Dispatcher.plan_borrowed

    def wrong(self, a, b, bias, found):
        run, info, built = real(self, a, b, bias, found)
        return (lambda *args: run(*args) * 2), info, built  # twice the product: a wrong kernel

    monkeypatch.setattr(api.Dispatcher, "plan_borrowed", wrong)
    lin = torch.nn.Linear(C, H).requires_grad_(False)
    compiled = autotune_cli.compile(lin, backend="aot_eager", dynamic=True, fullgraph=True,
                                    tune=cpu_tuning(cache_dir, space))
    for rows in (12, 5):
        x = torch.randn(2, rows, C, generator=torch.Generator().manual_seed(rows))
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), lin(x), rtol=1e-4, atol=1e-4)
    (call,) = [r.call for r in ops.ROUTES.values()
               if isinstance(r.call, DynamicCall) and r.call.dispatcher.cache_dir == cache_dir]
    assert call.chosen[10].startswith("triton::mm tuned at M = 16 failed its check at M = 10: relative error")


@pytest.mark.gpu
def test_on_a_gpu_a_compile_tunes_what_it_meets_and_routes_a_dynamic_batch(cache_dir, capfd):
    """Nothing cached, the defaults: the first compile tunes the Linear (static, then with a
    dynamic batch), the outputs match float64, a second process-state compile tunes nothing."""
    lin = torch.nn.Linear(512, 1024, device="cuda", dtype=torch.bfloat16).requires_grad_(False)
    x = torch.randn(8, 512, device="cuda", dtype=torch.bfloat16)
    want = lambda x: x.double() @ lin.weight.double().t() + lin.bias.double()  # noqa: E731
    routes: list = []
    with torch.no_grad():
        got = autotune_cli.compile(lin, routes=routes, fullgraph=True, dynamic=False)(x)
    assert "autotune: tuning 1 matmul problem" in capfd.readouterr().err
    assert len(routed(routes)) == 1
    torch.testing.assert_close(got.double(), want(x), rtol=2e-2, atol=2e-2)

    api.reset()
    torch._dynamo.reset()
    with torch.no_grad():
        autotune_cli.compile(lin, fullgraph=True, dynamic=False)(x)
    assert "tuning" not in capfd.readouterr().err

    torch._dynamo.reset()
    dynamic: list = []
    compiled = autotune_cli.compile(lin, routes=dynamic, fullgraph=True, dynamic=True, mode="default")
    with torch.no_grad():
        for rows in (8, 5, 13, 64):
            x = torch.randn(rows, 512, device="cuda", dtype=torch.bfloat16)
            torch.testing.assert_close(compiled(x).double(), want(x), rtol=2e-2, atol=2e-2)
    assert [r.uid for r in routed(dynamic)] == ["dynamic"]


def test_a_second_size_makes_m_dynamic_and_it_stays_routed(cache_dir, space, capfd):
    """No `dynamic=`: torch compiles the first size static, then recompiles with M dynamic
    when a second size comes; both graphs are routed (the second per call)."""
    lin = torch.nn.Linear(C, H).requires_grad_(False)
    routes: list = []
    compiled = autotune_cli.compile(lin, backend="aot_eager", routes=routes, fullgraph=True,
                                    tune=cpu_tuning(cache_dir, space))
    for rows in (12, 20, 7):
        x = torch.randn(rows, C, generator=torch.Generator().manual_seed(rows))
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), lin(x), rtol=1e-4, atol=1e-4)
    assert [r.uid for r in routes] == ["triton::mm", "dynamic"]
    assert capfd.readouterr().err.count("autotune: routed 1 of 1 matmul") == 2


class Mixed(torch.nn.Module):
    """A linear, an addmm, a bmm and an einsum: in an exported program's graph each is an aten op."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(C, H)
        self.w = torch.nn.Parameter(torch.randn(H, C))
        self.bias = torch.nn.Parameter(torch.randn(C))

    def forward(self, x, q, k):
        h = torch.addmm(self.bias, self.lin(x), self.w)
        return h, torch.bmm(q, k.transpose(1, 2)), torch.einsum("bsd,hd->bsh", q, self.w)


def test_an_exported_programs_module_is_routed_as_the_model(cache_dir):
    """ExportedProgram.module() calls aten ops (aten.linear.default, ...) where the model
    calls torch's functions: compiled, its matmuls are met as the same problems."""
    x, q, k = torch.randn(T, C), torch.randn(2, 8, C), torch.randn(2, 8, C)
    model = Mixed().eval()
    met = []
    for module in (model, torch.export.export(model, (x, q, k)).module()):
        torch._dynamo.reset()
        routes: list = []
        with torch.no_grad():
            got = autotune_cli.compile(module, backend="eager", routes=routes, tune=False)(x, q, k)
            for value, want in zip(got, model(x, q, k)):
                torch.testing.assert_close(value, want)
        met.append(sorted((r.op, r.problem.key()) for r in routes))
    assert met[0] == met[1] and [op for op, _ in met[0]] == ["addmm", "addmm", "bmm", "bmm"]


def test_a_winner_with_padded_rows_serves_views_and_dynamic_m_as_torch_would(cache_dir):
    """aten::mm_aligned pads C's rows (N = 50 halves: rows of 100 bytes). A static route's
    view that merges the last dim and the graph's output get the rows whole (a copy), a
    pointwise consumer reads them padded; a dynamic M's route returns them whole, as its fake
    says: every call gives torch's values."""
    from autotune_cli.settings import TuneSettings

    tune = TuneSettings(device="cpu", templates=("aten::mm_aligned",), cache_dir=cache_dir)
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 50).half()

    def heads(x):
        y = lin(x)
        return y.view(-1), torch.nn.functional.gelu(y) * 2, y

    graphs: list = []
    routes: list = []
    with torch.no_grad():
        x = torch.randn(8, 32).half()
        got = autotune_cli.compile(heads, backend=capturing(graphs), routes=routes, tune=tune)(x)
        for value, want in zip(got, heads(x)):
            torch.testing.assert_close(value, want)
            assert value.is_contiguous()
    assert [(r.uid, r.fallback) for r in routes] == [("aten::mm_aligned", False)]
    (op,) = [n for n in graphs[0].graph.nodes if "autotune" in str(n.target)]
    (copy,) = [n for n in op.users if n.target == "contiguous"]
    assert {str(u.target) for u in copy.users} == {"view", "output"}  # gelu reads the padded rows

    torch._dynamo.reset()
    routes.clear()
    compiled = autotune_cli.compile(lambda x: lin(x).view(-1), backend="aot_eager", routes=routes, tune=tune,
                                    dynamic=True)
    with torch.no_grad():
        for m in (8, 5, 16, 3):
            x = torch.randn(m, 32).half()
            torch.testing.assert_close(compiled(x), lin(x).view(-1))
    assert [r.uid for r in routes] == ["dynamic"]



def _written_then_viewed(lin, x):
    y = lin(x)
    y.add_(1)
    return y.view(-1), torch.nn.functional.gelu(y)


def _view_written(lin, x):
    y = lin(x)
    y.view(-1).mul_(2)
    return torch.nn.functional.gelu(y)


def _item_set(lin, x):
    y = lin(x)
    y[0] = 0.0
    return y


def _transpose_written(lin, x):
    y = lin(x)
    y.t().mul_(2)
    return torch.nn.functional.gelu(y), y


PADDED_USES = {
    "written, then viewed": _written_then_viewed,
    "a view written": _view_written,
    "an item set": _item_set,
    "a slice viewed": lambda lin, x: lin(x)[2:4].view(-1),
    "split, a part viewed": lambda lin, x: lin(x).chunk(2)[0].view(-1),
    "unflattened out": lambda lin, x: lin(x).unflatten(1, (5, 10)),
    "transposed out": lambda lin, x: lin(x).t(),
    "viewed": lambda lin, x: lin(x).view(-1) * 2,
    "a transpose written": lambda lin, x: _transpose_written(lin, x),
}


class PaddedUse(torch.nn.Module):
    def __init__(self, run):
        super().__init__()
        self.lin, self.run = torch.nn.Linear(32, 50).half(), run

    def forward(self, x):
        return self.run(self.lin, x)


@pytest.mark.parametrize("exported", [False, True], ids=["model", "exported"])
@pytest.mark.parametrize("use", PADDED_USES)
def test_a_padded_product_written_or_viewed_gives_torchs_values_and_strides(cache_dir, use, exported):
    """A product written in place, or a view of it that needs whole rows (a slice's view, an
    output): every user reads the one contiguous copy, so the writes are seen (a copy made
    for the strict users alone read the rows before them) and views of views compile, with
    torch's strides; alike where an exported program's module holds the aten ops."""
    from autotune_cli.settings import TuneSettings

    tune = TuneSettings(device="cpu", templates=("aten::mm_aligned",), cache_dir=cache_dir)
    torch.manual_seed(0)
    model = PaddedUse(PADDED_USES[use]).eval()
    x = torch.randn(8, 32).half()
    module = torch.export.export(model, (x,)).module() if exported else model
    routes: list = []
    with torch.no_grad():
        got = autotune_cli.compile(module, backend="aot_eager", routes=routes, tune=tune)(x)
        want = model(x)
    assert [(r.uid, r.fallback) for r in routes] == [("aten::mm_aligned", False)]
    for value, expected in zip(*(v if isinstance(v, tuple) else (v,) for v in (got, want))):
        torch.testing.assert_close(value, expected, rtol=1e-3, atol=1e-3)  # another kernel's float16 sums
        assert value.stride() == expected.stride()


OTHER_PRODUCTS = {
    "matrix @ vector": (lambda w, v, x: w.t() @ v, "with a vector"),
    "batch @ vector": (lambda w, v, x: x @ v, "with a vector"),
    "broadcast batch": (lambda w, v, x: x @ w.unsqueeze(0), "with broadcast batches"),
    "mv": (lambda w, v, x: torch.mv(w.t(), v), "of other kinds"),
    "tensordot to a dot": (lambda w, v, x: torch.tensordot(v, v, dims=1), "of other kinds"),
    "addmm_": (lambda w, v, x: torch.zeros(8, 48).addmm_(x[0], w), "of other kinds"),
    "addbmm": (lambda w, v, x: torch.addbmm(torch.zeros(8, 48), x, w.expand(2, 32, 48)), "of other kinds"),
    "dot": (lambda w, v, x: torch.dot(v, v), "of other kinds"),
    "mm out=": (lambda w, v, x: torch.mm(x[0], w, out=torch.empty(8, 48)), "with alpha=, beta= or out="),
    "matmul out=": (lambda w, v, x: torch.matmul(x[0], w, out=torch.empty(8, 48)), "with alpha=, beta= or out="),
}


class Products(torch.nn.Module):
    def __init__(self, run):
        super().__init__()
        self.run = run

    def forward(self, w, v, x):
        return self.run(w, v, x)


@pytest.mark.parametrize("exported", [False, True], ids=["model", "exported"])
@pytest.mark.parametrize("case", OTHER_PRODUCTS)
def test_a_product_routing_does_not_read_is_met_and_said(cache_dir, capfd, case, exported):
    """What is not routed is said: every product the graph holds has its Dispatch in
    `routes` and its kind in the summary, none dropped in silence; in an exported program's
    module too, whose graph calls their aten ops (aten.mv.default, aten.mm.out, ...)."""
    run, kind = OTHER_PRODUCTS[case]
    w, v, x = torch.randn(32, 48), torch.randn(32), torch.randn(2, 8, 32)
    model = Products(run)
    if exported:
        model = torch.export.export(model, (w, v, x)).module()
    routes: list = []
    with torch.no_grad():
        got = autotune_cli.compile(model, backend="eager", routes=routes, tune=False)(w, v, x)
    torch.testing.assert_close(got, run(w, v, x))
    assert len(routes) == 1 and routes[0].fallback, routes
    assert "routed 0 of 1 matmul; left to the compiler: 1 " + kind in capfd.readouterr().err


def test_linalg_matmul_is_routed_as_matmul(cache_dir):
    routes: list = []
    a, b = torch.randn(8, 32), torch.randn(32, 48)
    with torch.no_grad():
        autotune_cli.compile(lambda a, b: torch.linalg.matmul(a, b), backend="eager", routes=routes, tune=False)(a, b)
    assert [(r.op, r.reason.split(" (")[0]) for r in routes] == [("mm", "nothing cached for it on this machine")]


def test_a_graph_compiled_again_after_a_restart_is_reported_once(cache_dir, capfd):
    """Dynamo restarts its analysis when the compiler asks (a float input made a tensor, as
    Inductor asks under dynamic=True): the backend runs again for the graph, and its
    matmuls are in `routes` and the summary once."""
    restart = getattr(torch._dynamo.exc, "TensorifyScalarRestartAnalysis", None)
    if restart is None:
        pytest.skip("this torch restarts no analysis")
    calls: list = []

    def inner(gm, example_inputs):
        calls.append(gm)
        if len(calls) == 1:
            raise restart()
        return gm.forward

    routes: list = []
    lin = torch.nn.Linear(C, H)
    with torch.no_grad():
        autotune_cli.compile(lin, backend=inner, routes=routes, tune=False)(torch.randn(T, C))
    assert len(calls) == 2 and len(routes) == 1
    assert capfd.readouterr().err.count("autotune: routed 0 of 1 matmul") == 1


class Autocast(torch.nn.Module):
    """A linear (bias), a bias-free linear and x @ x.T under autocast, on float32 operands."""

    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(C, H), torch.nn.Linear(H, C, bias=False)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.down(torch.relu(self.up(x))), x @ x.t()


def test_matmuls_under_autocast_are_routed_in_the_dtype_they_run_in(tmp_path, cli, cache_dir):
    """Autocast runs each matmul in bfloat16: record lists it so, and compile, the operands
    cast as autocast casts them, routes each to the winner of that problem; torch's values.
    With gradients recorded the graph is left as written (torch's op has a backward)."""
    torch.manual_seed(0)
    model, x = Autocast().eval(), torch.randn(T, C)
    path = tmp_path / "shapes.json"
    with torch.no_grad(), autotune_cli.record(path):
        want = model(x)
    listed = json.loads(path.read_text())["problems"]
    assert {p["dtype"] for p in listed} == {"bfloat16"} and len(listed) == 3
    code, _, err = cli("mm", "--from", path, "--device", "cpu", "--templates", "aten", "--workers", "1")
    assert code == 0, err
    routes: list = []
    with torch.no_grad():
        got = autotune_cli.compile(model, backend="aot_eager", routes=routes, tune=False)(x)
    for value, expected in zip(got, want):
        assert value.dtype == torch.bfloat16
        torch.testing.assert_close(value, expected)
    assert [r.fallback for r in routes] == [False] * 3, routes
    ran = sorted((p["m"], p["n"], p["k"]) for p in listed)
    assert sorted((r.problem.m, r.problem.n, r.problem.k) for r in routes) == ran
    assert {r.problem.dtype for r in routes} == {"bfloat16"}

    torch._dynamo.reset()
    routes.clear()
    model.train()
    out, _ = autotune_cli.compile(model, backend="aot_eager", routes=routes, tune=False)(x)
    out.float().sum().backward()
    assert model.up.weight.grad is not None
    assert [r.reason.split(" (")[0] for r in routes if r.fallback] == [NEEDS_GRADIENTS.split(" (")[0]] * 2


class AutocastNoDtype(torch.nn.Module):
    """torch.autocast("cpu") naming no dtype: the device's autocast dtype (bfloat16)."""

    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(C, H), torch.nn.Linear(H, C)

    def forward(self, x):
        with torch.autocast("cpu"):
            return self.down(torch.relu(self.up(x)))


def test_an_autocast_region_naming_no_dtype_runs_in_the_devices(tmp_path, cli, cache_dir):
    torch.manual_seed(0)
    want, got, routes, _ = recorded_and_compiled(cli, tmp_path, AutocastNoDtype().eval(), torch.randn(T, C))
    torch.testing.assert_close(got, want)
    assert [(r.fallback, r.problem.dtype) for r in routes] == [(False, "bfloat16")] * 2, routes


def test_autocast_around_the_call_is_autocast_and_two_dtypes_outside_it_are_refused(tmp_path, cli, cache_dir):
    """A model called under torch.autocast (the graph holds no region: Dynamo compiles it
    under that state) is routed in the dtype autocast runs it in. Outside autocast, a float32
    input to a bfloat16 model is the user's mistake: torch's op refuses it, and so does the
    compiled model (it was cast silently, a bfloat16 model run in float32); the line says why."""
    torch.manual_seed(0)
    model, x = torch.nn.Sequential(torch.nn.Linear(C, H), torch.nn.ReLU(), torch.nn.Linear(H, C)).eval(), \
        torch.randn(T, C)
    path = tmp_path / "shapes.json"
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), autotune_cli.record(path):
        want = model(x)
    code, _, err = cli("mm", "--from", path, "--device", "cpu", "--templates", "aten", "--workers", "1")
    assert code == 0, err
    routes: list = []
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        got = autotune_cli.compile(model, backend="aot_eager", routes=routes, tune=False)(x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, want)
    assert [(r.fallback, r.problem.dtype) for r in routes] == [(False, "bfloat16")] * 2, routes

    torch._dynamo.reset()
    routes.clear()
    half = copy.deepcopy(model).bfloat16()
    with torch.no_grad(), pytest.raises(RuntimeError) as eager:
        half(x)
    with torch.no_grad(), pytest.raises(Exception) as compiled:
        autotune_cli.compile(half, backend="aot_eager", routes=routes, tune=False)(x)
    assert str(eager.value).splitlines()[0] in str(compiled.value)
    assert routes and all(r.reason.startswith("operands of two dtypes outside autocast") for r in routes), routes


class DecodeOutput(torch.nn.Module):
    """Attention's output projection at decode (one token): SDPA's [B, heads, 1, d] back to
    [B, 1, heads x d], times a frozen weight."""

    def __init__(self):
        super().__init__()
        self.o = torch.nn.Linear(C, C, bias=False).requires_grad_(False)

    def forward(self, q, k, v):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.o(out.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1))


def test_a_size_one_dims_stride_does_not_unfold_a_linear(tmp_path, cli, cache_dir, space):
    """The traced [B, 1, C] input's size-1 dim has another stride than the run's (a fake
    view's): the rows fold all the same, the mm the record of the eager run lists is routed
    (it was left to the compiler as a bmm of unfolded rows)."""
    torch.manual_seed(0)
    model = DecodeOutput().eval()
    q, k, v = torch.randn(2, 4, 1, 8), torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8)
    path = tmp_path / "shapes.json"
    with torch.no_grad(), autotune_cli.record(path):
        want = model(q, k, v)
    (listed,) = json.loads(path.read_text())["problems"]
    assert (listed["m"], "batch" in listed) == (2, False)
    code, _, err = cli("mm", "--from", path, "--device", "cpu", "--templates", "triton::mm", "--space", space,
                       "--workers", "1")
    assert code == 0, err
    routes: list = []
    with torch.no_grad():
        got = autotune_cli.compile(model, backend="aot_eager", routes=routes, tune=False)(q, k, v)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert [(r.uid, r.fallback) for r in routes] == [("triton::mm", False)], routes
    assert (routes[0].problem.m, routes[0].problem.n, routes[0].problem.k) == (2, C, C)


def test_a_graph_run_with_its_autocast_regions_runs_the_winners(cli, cache_dir, space, monkeypatch):
    """A backend that runs Dynamo's graph as it is (backend="eager") runs our op inside the
    autocast region: the operands are already in the product's dtype, and the winner runs
    (under autocast the call gave way to torch's op, the route said routed)."""
    from autotune_cli.api import calls

    launches: list = []
    kernel_call = calls.kernel_call

    def counting(op, problem, how, launch, *rest):
        def counted(*args):
            launches.append(problem.dtype)
            return launch(*args)

        return kernel_call(op, problem, how, counted, *rest)

    monkeypatch.setattr(calls, "kernel_call", counting)
    tune(cli, "--m", T, "--n", H, "--k", C, "--layout", "nt", "--dtype", "bfloat16", "--bias",
         "--templates", "triton::mm", "--space", space)
    torch.manual_seed(0)
    up = torch.nn.Linear(C, H).requires_grad_(False)

    def run(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return up(x)

    x = torch.randn(T, C)
    routes: list = []
    with torch.no_grad():
        compiled = autotune_cli.compile(run, backend="eager", routes=routes, tune=False)
        compiled(x)
        launches.clear()
        got = compiled(x)
        want = run(x)
    assert [(r.uid, r.problem.dtype) for r in routes] == [("triton::mm", "bfloat16")]
    assert launches == ["bfloat16"]
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, rtol=2e-2, atol=5e-2)
