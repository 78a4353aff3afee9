"""autotune_cli.compile on a training step (CPU, Triton under the interpreter): the matmuls
that record gradients are routed in AOTAutograd's forward and backward graphs
(routing/training.py), to the winners of the very problems `record` lists for the step, with
torch's values and gradients."""

from __future__ import annotations

import json

import pytest
import torch

import autotune_cli
from autotune_cli.model.shapes_file import read_counted
from autotune_cli.routing.sites import NEEDS_GRADIENTS

ONE_CONFIG = [{"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 2, "num_warps": 4}]
B, T, C, H = 2, 8, 32, 64

pytestmark = pytest.mark.usefixtures("fresh_compile")


class Net(torch.nn.Module):
    """fc1 (bias) -> GELU -> fc2 (no bias) on [B, T, C], then the rows' products (a bmm)."""

    def __init__(self, c: int = C, h: int = H):
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(c, h)
        self.fc2 = torch.nn.Linear(h, c, bias=False)

    def forward(self, x):
        h = self.fc2(torch.nn.functional.gelu(self.fc1(x)))
        return h @ h.transpose(-1, -2)


def step(model, x):
    """One training step's forward and backward: the output and every parameter's gradient."""
    out = model(x)
    out.square().mean().backward()
    return out.detach(), [p.grad.clone() for p in model.parameters()]


def same_step(compiled, eager, x) -> None:
    """A training step of `compiled` gives `eager`'s output and gradients."""
    out, grads = step(compiled, x)
    want, want_grads = step(eager, x)
    torch.testing.assert_close(out, want)
    assert len(grads) == len(want_grads)
    for got, expected in zip(grads, want_grads):
        torch.testing.assert_close(got, expected)


def record_and_tune(tmp_path, cli, space, x, make=None) -> set:
    """The training step of `make()` (default: Net) recorded (eager), its list tuned on the CPU
    as a user tunes it (`mm --from`); the listed problems' keys."""
    path = tmp_path / "train.json"
    with autotune_cli.record(path):
        step((make or Net)(), x)
    code, _, err = cli("mm", "--from", path, "--device", "cpu", "--templates", "triton::mm,triton::bmm",
                       "--space", space, "--workers", "1", "--json")
    assert code == 0, err
    return {key(problem) for problem, _ in read_counted(path, "cpu")}  # as `mm --from` reads it


def routed_as_recorded(tmp_path, cli, space, capsys, make) -> list:
    """The training step of `make()` recorded and tuned (`record_and_tune`), then compiled with
    tuning off: torch's values and gradients, every product routed, each to the winner of a
    problem the record listed. Its routes; what the compile said is left in `capsys`."""
    x = torch.randn(B, T, C)
    listed = record_and_tune(tmp_path, cli, space, x, make)
    capsys.readouterr()
    routes: list = []
    same_step(autotune_cli.compile(make(), mode="default", routes=routes, tune=False), make(), x)
    assert routes and not [r for r in routes if r.fallback], routes
    assert {key(r.problem) for r in routes} == listed
    return routes


def key(problem) -> tuple:
    return problem.op, problem.m, problem.n, problem.k, problem.b, problem.layout


@pytest.fixture
def space(tmp_path):
    path = tmp_path / "space.json"
    path.write_text(json.dumps(ONE_CONFIG))
    return path


def test_forward_and_backward_run_the_recorded_problems_winners(tmp_path, cache_dir, cli, space, capsys):
    x = torch.randn(B, T, C)
    listed = record_and_tune(tmp_path, cli, space, x)
    capsys.readouterr()

    model, eager = Net(), Net()
    routes: list = []
    same_step(autotune_cli.compile(model, mode="default", routes=routes, tune=False), eager, x)

    # the forward's products (fc1's addmm, fc2's mm, the bmm) and the backward's, every one
    # routed to a Triton winner, and each the problem the record listed
    assert routes and not [r for r in routes if r.fallback], routes
    assert {r.uid for r in routes} <= {"triton::mm", "triton::bmm"}
    assert {key(r.problem) for r in routes} == listed
    assert len(routes) > 3  # the backward's too
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("autotune: routed")]
    # the forward graph, then the backward at its first run, named so (not read as a graph break)
    assert [line.split(";")[0] for line in lines] == ["autotune: routed 3 of 3 matmuls",
                                                      f"autotune: routed {len(routes) - 3} of {len(routes) - 3} "
                                                      "matmuls in the backward"], lines


class Attention(torch.nn.Module):
    """nn.MultiheadAttention (self-attention, no dropout), then a linear, on [B, T, C]."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.attn = torch.nn.MultiheadAttention(C, 2, batch_first=True, dropout=0.0)
        self.fc = torch.nn.Linear(C, H)

    def forward(self, x):
        return self.fc(self.attn(x, x, x, need_weights=False)[0])


def test_an_attention_modules_projections_are_routed_in_the_step(tmp_path, cache_dir, cli, space, capsys):
    """In training Dynamo keeps F.multi_head_attention_forward whole (one node), and
    AOTAutograd traces it into plain matmuls: its projections and their gradients are routed
    there as a linear's are, to the winners of the problems `record` lists for the step, with
    torch's values and gradients; nothing is said to be left whole."""
    routes = routed_as_recorded(tmp_path, cli, space, capsys, Attention)
    projections = {("mm", B * T, 3 * C, C, 1, "nt"), ("addmm", B * T, C, C, 1, "nt")}  # in_proj, out_proj
    assert projections <= {key(r.problem) for r in routes}, routes
    assert "left whole" not in capsys.readouterr().err


class BiasOfRows(torch.nn.Module):
    """An addmm whose bias is a tensor of the output's shape ([M, N], a linear's output)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(16, 24)
        self.w = torch.nn.Parameter(torch.randn(16, 24) / 4)

    def forward(self, x):
        return torch.addmm(self.fc(x), x, self.w)


def test_a_dynamic_batch_step_compiles_once_whatever_its_products(cache_dir):
    """Under dynamic=True, batches of several sizes run one compiled step with torch's values
    and gradients: the weights' gradients (K dynamic) routed per call, and a product whose
    bias has the batch's rows too left to the compiler without fixing the batch's size in
    the graph (a guard on it recompiled the step at every new size)."""
    from torch._dynamo.utils import counters

    from autotune_cli.settings import TuneSettings

    counters.clear()
    routes: list = []
    compiled = autotune_cli.compile(BiasOfRows(), mode="default", dynamic=True, routes=routes,
                                    tune=TuneSettings(device="cpu", templates=("aten",), cache_dir=cache_dir))
    eager = BiasOfRows()
    for batch in (8, 5, 3, 6):
        x = torch.randn(batch, 16)
        for p in (*compiled.parameters(), *eager.parameters()):
            p.grad = None
        same_step(compiled, eager, x)
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    assert {r.reason.split(" = ")[0] for r in routes if r.uid == "dynamic"} == \
        {"per call, from the winners at M", "per call, from the winners at K"}, routes
    assert [r.op for r in routes if r.fallback] == ["addmm"], routes


def test_an_attentions_masked_scores_are_said_to_stay_torchs(cache_dir, capsys):
    """With a mask and need_weights=True, torch's attention scores are a baddbmm: counted and
    said to stay the compiler's, beside the projections routed."""
    from autotune_cli.settings import TuneSettings

    mha = torch.nn.MultiheadAttention(C, 2, batch_first=True, dropout=0.0)
    x, mask = torch.randn(B, T, C), torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    compiled = autotune_cli.compile(mha, mode="default",
                                    tune=TuneSettings(device="cpu", templates=("aten",), cache_dir=cache_dir))
    got, weights = compiled(x, x, x, attn_mask=mask, need_weights=True)
    want, want_weights = mha(x, x, x, attn_mask=mask, need_weights=True)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(weights, want_weights)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("autotune: routed")]
    assert lines and lines[0].endswith("; left to the compiler: 1 as baddbmm"), lines


def test_nothing_cached_leaves_each_product_to_the_compiler_and_says_why(cache_dir, capsys):
    x = torch.randn(B, T, C)
    model, eager = Net(), Net()
    routes: list = []
    same_step(autotune_cli.compile(model, mode="default", routes=routes, tune=False), eager, x)
    assert routes and all(r.fallback and r.reason.startswith("nothing cached") for r in routes), routes
    assert not any(r.reason == NEEDS_GRADIENTS for r in routes)  # met in the split graphs instead
    assert "left to the compiler" in capsys.readouterr().err


def test_a_step_under_no_grad_is_routed_in_dynamos_graph_as_before(tmp_path, cache_dir, cli, space):
    x = torch.randn(B, T, C)
    record_and_tune(tmp_path, cli, space, x)
    model = Net()
    routes: list = []
    with torch.no_grad():
        out = autotune_cli.compile(model, mode="default", routes=routes, tune=False)(x)
        want = Net()(x)
    torch.testing.assert_close(out, want)
    assert len(routes) == 3 and not [r for r in routes if r.fallback]


def test_torchs_compile_caches_never_hand_the_routed_step_to_a_plain_compile(tmp_path, cache_dir, cli, space,
                                                                             monkeypatch, request):
    """With Inductor's and AOTAutograd's caches on: a routed training step, then torch.compile
    of the same model (which must not load the routed step from AOTAutograd's cache), then
    the routed step again in a fresh Dynamo (its routes made anew), each with torch's values."""
    import torch._functorch.config as functorch
    import torch._inductor.config as inductor

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    caches = inductor.patch(fx_graph_cache=True, force_disable_caches=False)
    caches.__enter__()
    request.addfinalizer(lambda: caches.__exit__(None, None, None))
    autograd_cache = functorch.patch(enable_autograd_cache=True)
    autograd_cache.__enter__()
    request.addfinalizer(lambda: autograd_cache.__exit__(None, None, None))
    x = torch.randn(B, T, C)
    record_and_tune(tmp_path, cli, space, x)
    want, want_grads = step(Net(), x)

    def check(got):
        out, grads = got
        torch.testing.assert_close(out, want)
        for g, expected in zip(grads, want_grads):
            torch.testing.assert_close(g, expected)

    routes: list = []
    check(step(autotune_cli.compile(Net(), mode="default", routes=routes, tune=False), x))
    assert routes and not [r for r in routes if r.fallback]
    torch._dynamo.reset()
    check(step(torch.compile(Net(), mode="default"), x))
    torch._dynamo.reset()
    again: list = []
    check(step(autotune_cli.compile(Net(), mode="default", routes=again, tune=False), x))
    assert [key(r.problem) for r in again] == [key(r.problem) for r in routes]


def test_the_backward_tunes_what_it_meets_when_asked(cache_dir, capsys):
    x = torch.randn(B, T, C)
    model, eager = Net(), Net()
    routes: list = []
    same_step(autotune_cli.compile(model, mode="default", routes=routes, tune=True), eager, x)
    assert routes and not [r for r in routes if r.fallback], routes
    err = capsys.readouterr().err
    assert err.count("matmul problems this graph meets") == 2  # the forward's, then the backward's


class Chain(torch.nn.Module):
    """Two linears back to back: the first one's product is the second one's A."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc0 = torch.nn.Linear(C, C)
        self.fc1 = torch.nn.Linear(C, H, bias=False)

    def forward(self, x):
        return self.fc1(self.fc0(x))


def test_a_product_that_feeds_the_next_one_is_routed_with_it(tmp_path, cache_dir, cli, space):
    x = torch.randn(B, T, C)
    listed = record_and_tune(tmp_path, cli, space, x, Chain)
    routes: list = []
    same_step(autotune_cli.compile(Chain(), mode="default", routes=routes, tune=False), Chain(), x)
    assert routes and not [r for r in routes if r.fallback], routes
    assert {key(r.problem) for r in routes} == listed


def said_matmuls(err: str) -> int:
    """How many matmuls the compile's summary lines on stderr count, all lines together."""
    import re

    return sum(int(n) for n in re.findall(r"autotune: routed \d+ of (\d+) matmul", err))


def test_a_backward_compiled_with_the_forward_is_said_once(cache_dir, capsys):
    """A dynamic shape saved for the backward makes AOTAutograd compile it with the forward,
    inside the compile of Dynamo's graph: its matmuls are said in that graph's line only,
    which says it counts both."""
    x = torch.randn(B, T, C)
    routes: list = []
    same_step(autotune_cli.compile(Net(), mode="default", routes=routes, tune=False, dynamic=True), Net(), x)
    left = ("a dynamic shape", "a dynamic M with nothing cached", "a dynamic K with nothing cached")
    assert routes and all(r.fallback and r.reason.startswith(left) for r in routes), routes
    err = capsys.readouterr().err
    assert said_matmuls(err) == len(routes), err
    assert err.count("autotune: routed") == 1, err
    assert "matmuls in the forward and the backward; left to the compiler" in err, err


def test_an_optimizer_loop_keeps_its_graphs_and_a_batch_of_another_size_is_routed_per_call(
        tmp_path, cache_dir, cli, space, capsys):
    """Steps of SGD with momentum beside an eager copy: the same losses and weights at each
    step, the step's graphs compiled once; a batch of another size makes torch compile again
    with a dynamic batch, whose products with a dynamic M (the forward's and the input's
    gradients) or a dynamic K (the weights' gradients, summed over the batch's rows) are
    routed per call (dynamic.py), the bmm said to be the compiler's; then a batch of the
    first size again runs the dynamic graph, its winners chosen per call."""
    x = torch.randn(B, T, C)
    record_and_tune(tmp_path, cli, space, x)
    capsys.readouterr()
    from autotune_cli.routing.ops import ROUTES

    earlier = set(ROUTES)  # another test's routes in this process are not this one's
    model, eager = Net(), Net()
    routes: list = []
    compiled = autotune_cli.compile(model, mode="default", routes=routes, tune=False,
                                    cache_dir=cache_dir)  # its per-call routes name this cache alone
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, eager)]
    for batch in (x, torch.randn(B, T, C), torch.randn(B, T, C), torch.randn(B + 1, T, C), torch.randn(B, T, C)):
        losses = []
        for m, optimizer in zip((compiled, eager), optimizers):
            optimizer.zero_grad()
            loss = m(batch).square().mean()
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
        torch.testing.assert_close(*losses)
        for got, want in zip(model.parameters(), eager.parameters()):
            torch.testing.assert_close(got, want)
    left = [r for r in routes if r.fallback]
    per_call = [r for r in routes if r.uid == "dynamic"]
    assert left and all(r.reason.startswith("a dynamic shape") for r in left), left
    rows = [r for r in per_call if r.problem.m == (B + 1) * T]
    sums = [r for r in per_call if r.problem.k == (B + 1) * T]  # the weights' gradients
    assert {r.op for r in per_call} == {"addmm", "mm"} and rows and sums and len(rows) + len(sums) == len(per_call)
    assert all(r.reason == f"per call, from the winners at M = {B * T}" for r in rows), rows
    assert all(r.reason == f"per call, from the winners at K = {B * T}" for r in sums), sums
    assert {r.op for r in left} == {"bmm"}, left
    from autotune_cli.routing.dynamic import DynamicCall

    chosen = [route.call.chosen for name, route in ROUTES.items() if name not in earlier
              and isinstance(route.call, DynamicCall) and route.call.problem in {r.problem for r in per_call}]
    # the last batch, of the first size, ran the winners tuned at its rows; the other size torch's op
    assert chosen and all(c.get(B * T) == "triton::mm" and (B + 1) * T in c for c in chosen), chosen
    static = len(routes) - len(left) - len(per_call)  # the first graphs' products, each routed
    assert static > 3 and len(left) + len(per_call) == static, routes  # each once more, dynamic
    assert capsys.readouterr().err.count("autotune: routed") == 3  # forward, backward, then the recompile


def test_a_backward_product_over_one_row_is_left_to_the_compiler_as_record_leaves_it(tmp_path, cache_dir, cli,
                                                                                     space):
    """A step of one row: each weight's gradient is a product with K = 1 (an outer product),
    which `record` does not list and compile leaves to the compiler, as in Dynamo's graph."""
    x = torch.randn(1, 1, C)
    listed = record_and_tune(tmp_path, cli, space, x, Chain)
    routes: list = []
    same_step(autotune_cli.compile(Chain(), mode="default", routes=routes, tune=False), Chain(), x)
    left = [r for r in routes if r.fallback]
    assert left and all(r.reason.startswith("K = 1") for r in left), left
    assert {key(r.problem) for r in routes if not r.fallback} == listed


class Head(torch.nn.Module):
    """A linear, then one output column (a value head): its input's gradient has K = 1."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(C, H)
        self.head = torch.nn.Linear(H, 1, bias=False)

    def forward(self, x):
        return self.head(torch.nn.functional.gelu(self.fc1(x)))


def test_a_backward_product_over_one_column_is_left_to_the_compiler_at_a_dynamic_batch_too(cache_dir):
    """dA = dC @ W of the one-column head (K = 1) is no GEMM with its rows dynamic either:
    not tuned at M's values nor routed per call, as the static step and `record` leave it."""
    from autotune_cli.routing.sites import short_k

    routes: list = []
    same_step(autotune_cli.compile(Head(), mode="default", routes=routes, tune=False, dynamic=True), Head(),
              torch.randn(B, T, C))
    assert [(r.op, r.reason) for r in routes if r.reason.startswith("K = ")] == [("mm", short_k(1))], routes


class Checkpointed(Net):
    """Net with its linears in an activation-checkpointed region (recomputed in the backward)."""

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        h = checkpoint(lambda t: self.fc2(torch.nn.functional.gelu(self.fc1(t))), x, use_reentrant=False)
        return h @ h.transpose(-1, -2)


def test_a_checkpointed_regions_products_are_routed_in_the_steps_graphs(tmp_path, cache_dir, cli, space, capsys):
    """Dynamo keeps the region a subgraph; AOTAutograd inlines it, its recomputation in the
    backward: each of its products is routed there (none silently left out of `routes`)."""
    routes = routed_as_recorded(tmp_path, cli, space, capsys, Checkpointed)
    assert {r.op for r in routes} == {"addmm", "mm", "bmm"}
    assert said_matmuls(capsys.readouterr().err) == len(routes)


def test_a_checkpointed_region_under_no_grad_is_routed_too(tmp_path, cache_dir, cli, space):
    x = torch.randn(B, T, C)
    record_and_tune(tmp_path, cli, space, x, Checkpointed)
    routes: list = []
    with torch.no_grad():
        out = autotune_cli.compile(Checkpointed(), mode="default", routes=routes, tune=False)(x)
        want = Checkpointed()(x)
    torch.testing.assert_close(out, want)
    assert len(routes) == 3 and not [r for r in routes if r.fallback], routes


def test_another_compiler_says_a_checkpointed_regions_products_stay_its_own(cache_dir):
    x = torch.randn(B, T, C)
    routes: list = []
    same_step(autotune_cli.compile(Checkpointed(), backend="aot_eager", routes=routes, tune=False),
              Checkpointed(), x)
    assert [r.reason for r in routes].count(NEEDS_GRADIENTS) == 3, routes  # fc1, fc2 and the bmm


def test_the_summary_names_each_reason_a_steps_graphs_give():
    from autotune_cli.routing.report import _reason_kind
    from autotune_cli.routing.sites import ADDMM_SCALED, CHECKPOINTED, DECOMPOSED, DYNAMIC_IN_STEP, PADDED, short_k

    kinds = [_reason_kind(reason) for reason in (ADDMM_SCALED, CHECKPOINTED, DECOMPOSED, DYNAMIC_IN_STEP, PADDED,
                                                 short_k(1), short_k(0))]
    assert "other (see routes)" not in kinds, kinds
    assert len(set(kinds)) == len(kinds), kinds


def test_a_product_the_compiler_makes_pointwise_is_said_so(cache_dir, capsys):
    """Inductor's decompositions turn some products into pointwise work as AOTAutograd traces
    the step (here the bmm of one row by one column, on the CPU): no GEMM is left to route,
    and the matmul is said to be the compiler's, not left out of `routes`."""
    from autotune_cli.routing.sites import DECOMPOSED

    x = torch.randn(1, 1, C)
    routes: list = []
    same_step(autotune_cli.compile(Net(), mode="default", routes=routes, tune=False), Net(), x)
    assert [r.op for r in routes if r.reason == DECOMPOSED] == ["bmm"], routes
    assert said_matmuls(capsys.readouterr().err) == len(routes)


def test_a_checkpointed_region_called_twice_is_read_once():
    """Its matmuls are marked once (numbered once): a body Dynamo shared between two calls."""
    from autotune_cli.routing.training import checkpointed

    body = torch.fx.symbolic_trace(torch.nn.Linear(C, C))
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    region = graph.get_attr("body")
    tag = torch.ops.higher_order.tag_activation_checkpoint
    once = graph.call_function(tag, (region, x))
    graph.output(graph.call_function(tag, (region, once)))
    assert checkpointed(torch.fx.GraphModule({"body": body}, graph)) == [body]


@pytest.mark.gpu
def test_gpu_a_bf16_step_under_cuda_graphs_tunes_and_routes_forward_and_backward(tmp_path):
    """On a GPU with the defaults (CUDA graphs; the problems tuned as the graphs compile):
    every matmul of the step routed, the values and gradients torch's within bf16's error."""
    c, h = 256, 512
    x = torch.randn(4, 128, c, device="cuda", dtype=torch.bfloat16)
    model, eager = Net(c, h).cuda().bfloat16(), Net(c, h).cuda().bfloat16()
    routes: list = []
    compiled = autotune_cli.compile(model, cache_dir=tmp_path / "cache", routes=routes)
    for _ in range(3):  # CUDA graphs record at the second and third calls
        torch.compiler.cudagraph_mark_step_begin()
        model.zero_grad(set_to_none=True)
        out, grads = step(compiled, x)
    want, want_grads = step(eager, x)
    assert (out.float() - want.float()).norm() / want.float().norm() < 2e-2
    for got, expected in zip(grads, want_grads):
        assert (got.float() - expected.float()).norm() / expected.float().norm() < 2e-2
    assert len(routes) > 3 and not [r for r in routes if r.fallback], routes
