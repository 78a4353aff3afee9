"""autotune_cli.compile's groups (routing/groups.py) on the CPU: linears that read one input
run as one GEMM over their weights placed side by side, where that GEMM's tuned time beats
theirs summed; Triton under the interpreter, tuned as the graph compiles."""

from __future__ import annotations

import copy
import json
import warnings

import pytest
import torch

import autotune_cli
from autotune_cli import api
from autotune_cli.problem import GemmProblem
from autotune_cli.routing import backend, groups
from autotune_cli.settings import MeasurePolicy, TuneSettings

ONE_CONFIG = [{"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 2, "num_warps": 4}]
C, KV = 32, 16  # width; k's and v's width


pytestmark = pytest.mark.usefixtures("fresh_compile")


@pytest.fixture
def tuning(tmp_path, cache_dir):
    space = tmp_path / "space.json"
    space.write_text(json.dumps(ONE_CONFIG))
    return TuneSettings(device="cpu", cache_dir=cache_dir, templates=("triton::mm",), space_file=str(space),
                        workers=1)


@pytest.fixture
def inductor_unrun(monkeypatch):
    """Inductor's config as a compile sets it (mode, CUDA graphs), its compile itself not run
    (a CPU compile of C++ would take the test's time)."""
    import torch._inductor.compile_fx as compile_fx

    monkeypatch.setattr(compile_fx, "compile_fx", lambda gm, inputs, **kw: gm.forward)


def block(layer, x):
    """One compiled function for every layer: Parameters are graph inputs, so one graph."""
    return layer(x)


class Attention(torch.nn.Module):
    """q, k and v of one input (with biases where asked), and o of another."""

    def __init__(self, bias: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.q = torch.nn.Linear(C, C, bias=bias)
        self.k = torch.nn.Linear(C, KV, bias=bias)
        self.v = torch.nn.Linear(C, KV, bias=bias)
        self.o = torch.nn.Linear(C, C, bias=False)
        self.requires_grad_(False)

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        return self.o(q * torch.cat([k, v], dim=-1).sigmoid())


def reference(model, x):
    """The model in float64 (a copy: converting a model moves its weights)."""
    return copy.deepcopy(model).double()(x.double())


def grouped_always(monkeypatch):
    """The times the CPU's interpreter measures decide nothing worth testing: group anyway."""
    monkeypatch.setattr(backend, "worth_grouping", lambda parts, one, margin: True)


def compiled(model, tuning, routes, graphs, group=True):
    def capture(gm, example_inputs):  # the graph as our backend hands it on
        graphs.append(gm)
        return gm.forward

    return autotune_cli.compile(model, backend=capture, routes=routes, fullgraph=True, tune=tuning,
                                group_linears=group)


def test_worth_grouping_asks_the_one_gemm_to_lead_the_sum_by_the_margin():
    margin = MeasurePolicy.vendor_margin  # what a compile uses without settings of its own
    assert groups.worth_grouping([11.5, 6.2, 6.2], 15.5, margin)  # q, k, v at decode (bench/README.md)
    assert not groups.worth_grouping([31.3, 31.3], 67.7, margin)  # gate and up: wide enough apart
    assert not groups.worth_grouping([10.0, 10.0], 19.5, 0.03)  # inside the margin: noise
    assert groups.worth_grouping([10.0, 10.0], 19.3, 0.03)
    assert not groups.worth_grouping([10.0], 1.0, margin)  # one linear is no group


def test_place_side_by_side_makes_views_of_one_buffer_with_the_same_values():
    params = [torch.nn.Parameter(torch.randn(n, 8), requires_grad=False) for n in (4, 2, 2)]
    values = [p.detach().clone() for p in params]
    assert groups.side_by_side(params) is None
    groups.place_side_by_side(params)
    whole = groups.side_by_side(params)
    assert whole is not None and whole.shape == (8, 8)
    torch.testing.assert_close(whole, torch.cat(values), rtol=0, atol=0)
    for p, v in zip(params, values):
        torch.testing.assert_close(p.detach(), v, rtol=0, atol=0)
    pointers = [p.data_ptr() for p in params]
    groups.place_side_by_side(params)  # already there: nothing moves
    assert [p.data_ptr() for p in params] == pointers
    assert groups.side_by_side([params[0], params[2]]) is None  # not consecutive
    assert groups.side_by_side([params[1], params[0]]) is None  # not in order


@pytest.mark.parametrize("bias", [False, True])
def test_qkv_run_as_one_gemm_over_their_weights_side_by_side(tuning, monkeypatch, capfd, bias):
    grouped_always(monkeypatch)
    model = Attention(bias)
    x = torch.randn(2, 4, C)
    want = reference(model, x)
    routes, graphs = [], []
    run = compiled(model, tuning, routes, graphs)
    with torch.no_grad():
        got = run(x)
    err = capfd.readouterr().err
    assert "routed 4 of 4 matmuls (3 as 1 grouped GEMM)" in err
    ops = [str(n.target) for n in graphs[0].graph.nodes if "autotune" in str(n.target)]
    assert sorted(ops) == ["autotune.gemm.default", "autotune.gemm_group.default"]
    one = f"{'addmm' if bias else 'mm'} 8x{C + 2 * KV}x{C} float32 nt"
    assert [r.reason.startswith(f"grouped: {one}") for r in routes] == [True, True, True, False]
    assert [r.problem.n for r in routes[:3]] == [C, KV, KV] and not any(r.fallback for r in routes)
    # the one GEMM is tuned and cached like any problem
    assert api.lookup_entry(GemmProblem.from_dict({**routes[0].problem.to_dict(), "n": C + 2 * KV}))
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)
    wholes = []  # what the op finds its weights to be, each call
    seen = groups.side_by_side
    monkeypatch.setattr(groups, "side_by_side", lambda ts: wholes.append(seen(ts)) or wholes[-1])
    with torch.no_grad():
        torch.testing.assert_close(run(x), got, rtol=0, atol=0)
    weights = [model.q.weight, model.k.weight, model.v.weight]
    assert wholes[0] is not None and wholes[0].shape == (C + 2 * KV, C)  # the one GEMM ran
    assert wholes[0].data_ptr() == model.q.weight.data_ptr() and seen(weights) is not None
    assert not bias or seen([model.q.bias, model.k.bias, model.v.bias]) is not None

    # a weight assigned anew is no longer side by side: the op computes the linears one by one,
    # and says so once
    model.k.weight.data = model.k.weight.detach() * 2
    wholes.clear()
    with torch.no_grad(), pytest.warns(api.AutotuneFallbackWarning, match="are apart"):
        want = reference(model, x)
        got = run(x)
    assert wholes[0] is None
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)


def test_a_group_that_does_not_win_leaves_the_weights_where_they_are(tuning, monkeypatch, capfd):
    monkeypatch.setattr(backend, "worth_grouping", lambda parts, one, margin: False)
    model = Attention()
    pointers = [p.data_ptr() for p in model.parameters()]
    routes, graphs = [], []
    with torch.no_grad():
        compiled(model, tuning, routes, graphs)(torch.randn(8, C))
    assert "routed 4 of 4 matmuls\n" in capfd.readouterr().err
    assert not any(r.reason for r in routes)
    assert [p.data_ptr() for p in model.parameters()] == pointers


def test_no_group_without_cuda_graphs_by_default_nor_for_a_weight_read_elsewhere(tuning, monkeypatch):
    grouped_always(monkeypatch)
    model = Attention()
    pointers = [p.data_ptr() for p in model.parameters()]
    routes: list = []
    with torch.no_grad():
        compiled(model, tuning, routes, [], group=None)(torch.randn(8, C))
    assert not any(r.reason for r in routes)  # the eager backend replays no CUDA graph
    assert [p.data_ptr() for p in model.parameters()] == pointers

    class Tied(Attention):  # k's weight also read by a plain matmul: it must stay where it is
        def forward(self, x):
            return super().forward(x) + (x @ self.k.weight.t()).sum()

    torch._dynamo.reset()
    tied = Tied()
    pointers = [p.data_ptr() for p in tied.parameters()]
    routes = []
    with torch.no_grad():
        compiled(tied, tuning, routes, [])(torch.randn(8, C))
    assert not any(r.reason for r in routes)
    assert [p.data_ptr() for p in tied.parameters()] == pointers


def test_an_in_place_write_between_the_linears_keeps_them_apart(tuning, monkeypatch):
    """The one GEMM would run where q was, before the write that k and v must see."""
    grouped_always(monkeypatch)

    class Written(Attention):
        def forward(self, x):
            h = x * 1.0
            q = self.q(h)
            h.mul_(2.0)
            return torch.cat([q, self.k(h), self.v(h)], dim=-1)

    model = Written()
    x = torch.randn(8, C)
    routes: list = []
    with torch.no_grad():
        got = compiled(model, tuning, routes, [])(x)
    assert len(routes) == 3 and not any(r.reason for r in routes)
    torch.testing.assert_close(got.double(), reference(model, x), rtol=1e-4, atol=1e-4)


def test_each_output_is_contiguous_so_any_view_of_it_works(tuning, monkeypatch):
    """Code after a linear may view its output as it likes (here merging the rows into the
    heads) and gets it back contiguous, as from the linear itself."""
    grouped_always(monkeypatch)

    class Viewed(Attention):
        def forward(self, x):
            q, k, v = self.q(x), self.k(x), self.v(x)
            return q.view(-1, 8), k.view(-1), v

    model = Viewed()
    x = torch.randn(8, C)
    routes: list = []
    with torch.no_grad():
        got = compiled(model, tuning, routes, [])(x)
    assert all(r.reason.startswith("grouped: ") for r in routes)
    for out, want in zip(got, reference(model, x)):
        assert out.is_contiguous()
        torch.testing.assert_close(out.double(), want, rtol=1e-4, atol=1e-4)


def test_a_weight_whose_storage_is_shared_is_not_moved(tuning, monkeypatch):
    """Another module's Parameter over k's storage, or shared memory: moving the weights
    would part them."""
    grouped_always(monkeypatch)
    model, twin = Attention(), Attention()
    twin.k.weight = torch.nn.Parameter(model.k.weight.data, requires_grad=False)
    routes: list = []
    with torch.no_grad():
        compiled(model, tuning, routes, [])(torch.randn(8, C))
    assert routes and not any(r.reason for r in routes)
    assert twin.k.weight.data_ptr() == model.k.weight.data_ptr()

    torch._dynamo.reset()
    shared = Attention().share_memory()
    routes = []
    with torch.no_grad():
        compiled(shared, tuning, routes, [])(torch.randn(8, C))
    assert routes and not any(r.reason for r in routes) and shared.k.weight.is_shared()


def test_by_default_a_cpu_model_is_not_grouped_even_in_a_cuda_graph_mode(tuning, monkeypatch, inductor_unrun):
    """CUDA graphs replay only on a GPU: the opaque op would pay its host work each call."""
    grouped_always(monkeypatch)
    model = Attention()
    routes: list = []
    with torch.no_grad():
        autotune_cli.compile(model, routes=routes, fullgraph=True, tune=tuning)(torch.randn(8, C))
    assert routes and not any(r.reason for r in routes)


def test_one_compiled_graph_run_for_several_layers_groups_each_at_its_first_call(tuning, monkeypatch):
    """Parameters are graph inputs: one compiled function serves every layer, and its op places
    each layer's weights side by side at that layer's first call."""
    grouped_always(monkeypatch)
    layers = [Attention() for _ in range(3)]
    for scale, layer in enumerate(layers, 1):
        for p in layer.parameters():
            p.data.mul_(scale)
    run = autotune_cli.compile(block, backend="aot_eager", fullgraph=True, tune=tuning, group_linears=True)
    x = torch.randn(8, C)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", api.AutotuneFallbackWarning)  # none runs one by one
        for layer in layers:
            torch.testing.assert_close(run(layer, x).double(), reference(layer, x), rtol=1e-4, atol=1e-4)
    assert all(groups.side_by_side([lay.q.weight, lay.k.weight, lay.v.weight]) is not None for lay in layers)


def test_under_cuda_graphs_the_op_leaves_another_layers_weights_where_they_are(tuning, monkeypatch,
                                                                              inductor_unrun):
    """The warm-up runs of CUDA graphs allocate from the graphs' own pool: a weight placed
    there could be overwritten by a later replay, so the op runs that layer one by one."""
    grouped_always(monkeypatch)
    first, second = Attention(), Attention()
    run = autotune_cli.compile(block, fullgraph=True, tune=tuning, group_linears=True)  # reduce-overhead
    x = torch.randn(8, C)
    pointers = [p.data_ptr() for p in second.parameters()]
    with torch.no_grad():
        run(first, x)
        with pytest.warns(api.AutotuneFallbackWarning, match="are apart"):
            got = run(second, x)
    assert [p.data_ptr() for p in second.parameters()] == pointers
    torch.testing.assert_close(got.double(), reference(second, x), rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_gpu_qkv_as_one_gemm_under_cuda_graphs(cache_dir, monkeypatch, capfd):
    """On a GPU, by default (Inductor replaying CUDA graphs): q, k and v tuned as the graph
    compiles and run as one GEMM in the replays; a weight assigned anew afterwards is read."""
    grouped_always(monkeypatch)
    model = Attention().to("cuda", torch.bfloat16)
    x = torch.randn(8, C, device="cuda", dtype=torch.bfloat16)
    routes: list = []
    run = autotune_cli.compile(model, routes=routes, fullgraph=True)
    with torch.no_grad():
        outs = [run(x).clone() for _ in range(3)]  # warm-up, record, replay
    assert "(3 as 1 grouped GEMM)" in capfd.readouterr().err
    assert groups.side_by_side([model.q.weight, model.k.weight, model.v.weight]) is not None
    want = reference(model, x)
    for out in outs:
        torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=2e-2)
    model.k.weight.data = model.k.weight.detach() * 2
    want = reference(model, x)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(run(x).double(), want, rtol=2e-2, atol=2e-2)


class WriteBetween(Attention):
    """k and v read the input after an in-place write: only q and k are one input's run."""

    def forward(self, x):
        q, k = self.q(x), self.k(x)
        x.mul_(1.0)
        v = self.v(x)
        return q.sum() + k.sum() + v.sum()


@pytest.mark.parametrize("bias", [False, True])
def test_a_recorded_list_holds_the_one_gemm_and_a_compile_groups_from_it_untuned(tuning, monkeypatch, capfd,
                                                                                  tmp_path, bias):
    """autotune_cli.record lists q, k and v of one input and, as one entry more, their one
    GEMM: tuned from that list (a deployment's cache), a compile with tune=False groups them."""
    from autotune_cli.cli.from_list import Listed, list_rows
    from autotune_cli.model.shapes_file import read_counted, read_listed
    from autotune_cli.tune.tuner import Tuner

    grouped_always(monkeypatch)
    model, x = Attention(bias), torch.randn(2, 4, C)
    path = tmp_path / "shapes.json"
    with torch.no_grad(), autotune_cli.record(path):
        model(x)
        model(x)
        WriteBetween(bias)(x.clone())
    assert "and 2 GEMMs of linears of one input as one (3 groups" in capfd.readouterr().err
    listed = {p.describe(): count for p, count in read_counted(path, "cpu")}
    kind = "addmm" if bias else "mm"
    suffix = " bias[n]" if bias else ""
    assert listed[f"{kind} 8x{C + 2 * KV}x{C} float32 nt{suffix}"] == 2  # q, k, v: each forward
    assert listed[f"{kind} 8x{C + KV}x{C} float32 nt{suffix}"] == 1  # q and k: v read after a write
    assert listed[f"{kind} 8x{KV}x{C} float32 nt{suffix}"] == 6  # the linears themselves, as before
    marked = {p.n: group for p, _, group in read_listed(path, "cpu")}
    assert marked == {C: False, KV: False, C + 2 * KV: True, C + KV: True}  # "group": true in the file
    rows = list_rows([Listed(p, i, count, group) for i, (p, count, group) in enumerate(read_listed(path, "cpu"), 1)])
    assert abs(sum(r["share"] for r in rows if not r["group"]) - 1) < 1e-9  # the groups' are their linears'
    with Tuner(tuning) as tuner:
        for problem, _ in read_counted(path, "cpu"):
            tuner.tune(problem)
    routes, graphs = [], []
    run = compiled(model, False, routes, graphs)
    with torch.no_grad():
        got = run(x)
    err = capfd.readouterr().err
    assert "tuning" not in err and "routed 4 of 4 matmuls (3 as 1 grouped GEMM)" in err
    torch.testing.assert_close(got.double(), reference(model, x), rtol=1e-4, atol=1e-4)


def test_record_takes_fresh_inputs_for_no_group(tmp_path, capfd):
    """One linear called on a new input each time: a new tensor may take a freed one's memory
    (same address, shape and version), yet it is no second linear of one input."""
    from autotune_cli.model.shapes_file import read_counted

    head = torch.nn.Linear(C, KV, bias=False).requires_grad_(False)
    path = tmp_path / "shapes.json"
    with torch.no_grad(), autotune_cli.record(path):
        for _ in range(3):
            head(torch.randn(8, C))
    assert [(p.n, count) for p, count in read_counted(path, "cpu")] == [(KV, 3)]
    assert "as one" not in capfd.readouterr().err


def test_record_starts_a_new_group_where_a_weight_comes_again(tmp_path):
    """q, k and v run twice on one input, nothing between: two groups of three, not one of six."""
    from autotune_cli.model.shapes_file import read_listed

    model, x = Attention(), torch.randn(8, C)
    path = tmp_path / "shapes.json"
    with torch.no_grad(), autotune_cli.record(path):
        for _ in range(2):
            model.q(x), model.k(x), model.v(x)
    assert [(p.n, count) for p, count, group in read_listed(path, "cpu") if group] == [(C + 2 * KV, 2)]


def test_record_groups_the_linears_of_one_input_wherever_they_come(tmp_path):
    """A decoder's cross-attention: each layer's k and v read the encoder's output, its q the
    layer's own input, attention between them. As a compile groups every linear of one
    tensor with no write in place between, record lists one GEMM of all four; after a write
    in place between the layers the runs start anew (two groups of two)."""
    from autotune_cli.model.shapes_file import read_listed

    layers = [Attention() for _ in range(2)]
    memory, x = torch.randn(8, C), torch.randn(8, C)

    def decoder(write_between):
        h = x.clone()
        for layer in layers:
            q, k, v = layer.q(h), layer.k(memory), layer.v(memory)
            h = h + (torch.softmax(q[:, :KV] @ k.t(), -1) @ v).repeat(1, C // KV)
            if write_between:
                h.mul_(0.5)

    for write_between, listed in ((False, [(4 * KV, 1)]), (True, [(2 * KV, 2)])):
        path = tmp_path / f"shapes{write_between}.json"
        with torch.no_grad(), autotune_cli.record(path):
            decoder(write_between)
        assert [(p.n, count) for p, count, group in read_listed(path, "cpu") if group] == listed


def test_a_tuned_list_says_which_rows_are_groups(tmp_path, cli, cache_dir):
    """`mm --from` of a recorded list: the group's row says so, and its share is its linears'."""
    model, x = Attention(), torch.randn(8, C)
    path = tmp_path / "shapes.json"
    with torch.no_grad(), autotune_cli.record(path):
        model.q(x), model.k(x), model.v(x)
    code, out, err = cli("mm", "--from", path, "--device", "cpu", "--templates", "aten", "--json")
    assert code == 0, err
    rows = json.loads(out)["problems"]
    assert [r["group"] for r in rows] == [False, False, True]
    assert rows[2]["share"] == pytest.approx(1.0)  # q, k and v's: all of the list's calls
    code, out, err = cli("mm", "--from", path, "--device", "cpu", "--templates", "aten")
    assert code == 0 and "grouped linears" in out


def test_record_groups_linears_of_an_inference_tensor(tmp_path):
    """An input made under inference mode has no version counter, and nothing can write it
    outside that mode: its linears are still one input's run."""
    from autotune_cli.cli.from_list import Listed, list_rows
    from autotune_cli.model.shapes_file import read_listed

    model = Attention()
    with torch.inference_mode():
        x = torch.randn(8, C)
    path = tmp_path / "shapes.json"
    with torch.no_grad(), autotune_cli.record(path):
        model.q(x), model.k(x), model.v(x)
    listed = read_listed(path, "cpu")
    assert [(p.n, group) for p, _, group in listed if group] == [(C + 2 * KV, True)]
    only_groups = [Listed(p, 1, count, group) for p, count, group in listed if group]
    assert [r["share"] for r in list_rows(only_groups)] == [0.0]  # no call of its own to share


class BufferAttention(torch.nn.Module):
    """q and k of one input, their weights buffers."""

    def __init__(self):
        super().__init__()
        self.register_buffer("wq", torch.randn(C, C))
        self.register_buffer("wk", torch.randn(KV, C))

    def forward(self, x):
        return torch.nn.functional.linear(x, self.wq), torch.nn.functional.linear(x, self.wk)


def test_record_lists_no_group_of_buffer_weights(tmp_path):
    """A compile groups Parameters alone (it moves them): linears of buffers are recorded as
    calls, and no group of them is listed to be tuned for nothing; Parameters' still are."""
    from autotune_cli.model.shapes_file import read_listed

    x = torch.randn(8, C)
    path = tmp_path / "shapes.json"
    with torch.no_grad(), autotune_cli.record(path):
        BufferAttention()(x)
        model = Attention()
        model.q(x), model.k(x)
    listed = read_listed(path, "cpu")
    assert [(p.n, group) for p, _, group in listed if group] == [(C + KV, True)]
    assert sorted((p.n, count) for p, count, group in listed if not group) == [(KV, 2), (C, 2)]


def test_a_problem_listed_as_a_call_and_a_group_is_tuned_once(tmp_path, cli, cache_dir):
    path = tmp_path / "shapes.json"
    entry = {"m": 8, "n": 64, "k": 32, "dtype": "float32", "layout": "nt"}
    path.write_text(json.dumps([entry, {**entry, "group": True}]))
    code, out, err = cli("mm", "--from", path, "--device", "cpu", "--templates", "aten", "--force", "--json")
    assert code == 0, err
    rows = json.loads(out)["problems"]
    assert [r["group"] for r in rows] == [False, True] and rows[0]["winner"] == rows[1]["winner"]
    assert err.count("tuned:") == 1
