"""An RMSNorm run inside the routed GEMV after it (routing/norms.py, triton_gemv's
`build_norm`), on the CPU: Triton under the interpreter, tuned as the graph compiles."""

from __future__ import annotations

import copy
import operator

import pytest
import torch

import autotune_cli
from autotune_cli.routing import backend
from autotune_cli.settings import TuneSettings

C, HIDDEN = 32, 64
GEMV = {"BLOCK_M": 1, "BLOCK_N": 8, "BLOCK_K": 16, "SPLIT_K": 1, "num_stages": 1, "num_warps": 2}

pytestmark = pytest.mark.usefixtures("fresh_compile")


@pytest.fixture
def tuning(cache_dir):
    return TuneSettings(device="cpu", cache_dir=cache_dir, templates=("triton::gemv",), workers=1)


class RMSNorm(torch.nn.Module):
    """As transformers' LlamaRMSNorm computes it."""

    def __init__(self, width: int, eps: float = 1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(width) + 0.5)
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class Layer(torch.nn.Module):
    """A decoder layer's shape: norm, q/k/v of it, o, the residual add, norm, gate/up of it,
    down, the residual add."""

    def __init__(self):
        super().__init__()
        self.input_norm = RMSNorm(C)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(C, C, bias=False) for _ in range(4))
        self.post_norm = RMSNorm(C)
        self.gate, self.up = (torch.nn.Linear(C, HIDDEN, bias=False) for _ in range(2))
        self.down = torch.nn.Linear(HIDDEN, C, bias=False)

    def forward(self, h):
        a = self.input_norm(h)
        h = h + self.o(self.q(a) * (self.k(a) + self.v(a)).sigmoid())
        m = self.post_norm(h)
        return h + self.down(torch.nn.functional.silu(self.gate(m)) * self.up(m))


class Stack(torch.nn.Module):
    def __init__(self, layers: int = 2, read_norm: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(Layer() for _ in range(layers))
        self.norm = RMSNorm(C)
        self.head = torch.nn.Linear(C, 48, bias=False)
        self.read_norm = read_norm
        self.requires_grad_(False)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        normed = self.norm(x)
        logits = self.head(normed)
        return (logits, normed) if self.read_norm else logits


def compiled(model, tuning, routes, graphs, fuse=True):
    def capture(gm, example_inputs):  # the graph as our backend hands it on
        graphs.append(gm)
        return gm.forward

    return autotune_cli.compile(model, backend=capture, routes=routes, fullgraph=True, tune=tuning,
                                group_linears=True, fuse_norms=fuse)


def ops_of(gm) -> list[str]:
    return sorted(str(n.target).split(".")[1] for n in gm.graph.nodes if "autotune" in str(n.target))


def always_grouped(monkeypatch):
    """The interpreter's times decide nothing worth testing: q/k/v and gate/up group anyway."""
    monkeypatch.setattr(backend, "worth_grouping", lambda parts, one, margin: True)


def test_each_norm_runs_inside_the_gemv_after_it_with_the_residual_add(tuning, monkeypatch, capfd):
    always_grouped(monkeypatch)
    model = Stack()
    x = torch.randn(1, 1, C)
    want = copy.deepcopy(model).double()(x.double())
    routes, graphs = [], []
    with torch.no_grad():
        got = compiled(model, tuning, routes, graphs)(x)
    err = capfd.readouterr().err
    # 2 norms per layer (q/k/v and gate/up read them, as groups) and the final one (the head)
    assert "autotune: 5 RMSNorms run inside the GEMV after them" in err, err
    gm = graphs[0]
    assert ops_of(gm) == ["gemm"] * 4 + ["norm_gemm"] * 5  # each layer's o and down stay plain GEMVs
    assert not [n for n in gm.graph.nodes if n.op == "call_method" and n.target in ("pow", "mean")]
    adds = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is operator.add]
    assert len(adds) == 2  # the adds after each down GEMV: the other two moved in
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)


def test_a_norm_read_elsewhere_or_not_asked_for_stays(tuning, monkeypatch):
    always_grouped(monkeypatch)
    model = Stack(layers=1, read_norm=True)
    x = torch.randn(1, 1, C)
    want = copy.deepcopy(model).double()(x.double())
    graphs = []
    with torch.no_grad():
        logits, normed = compiled(model, tuning, [], graphs)(x)
    assert ops_of(graphs[0]).count("norm_gemm") == 2  # the layer's two, not the final one
    torch.testing.assert_close(logits.double(), want[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(normed.double(), want[1], rtol=1e-5, atol=1e-5)

    torch._dynamo.reset()
    graphs.clear()
    with torch.no_grad():
        compiled(Stack(layers=1), tuning, [], graphs, fuse=False)(x)
    assert "norm_gemm" not in ops_of(graphs[0])


def test_linears_apart_each_take_the_norm_and_one_gives_the_sum(tuning, monkeypatch):
    """q, k and v (and gate and up) not grouped: each GEMV computes the norm again, the first
    writes h; a norm whose last cast is to another dtype than its input's is not matched."""
    monkeypatch.setattr(backend, "worth_grouping", lambda parts, one, margin: False)
    graphs = []
    model = Stack(layers=2)
    x = torch.randn(1, 1, C)
    want = copy.deepcopy(model).double()(x.double())
    with torch.no_grad():
        got = compiled(model, tuning, [], graphs)(x)
    ops = ops_of(graphs[0])
    assert ops.count("norm_gemm") == 2 * 5 + 1 and ops.count("gemm") == 2 * 2  # each layer's o and down
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)

    class Half(RMSNorm):
        def forward(self, hidden_states):
            f = hidden_states.to(torch.float32)
            f = f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
            return (self.weight.half() * f.to(torch.float16)).float()

    torch._dynamo.reset()
    model.norm = Half(C)
    graphs.clear()
    with torch.no_grad():
        compiled(model, tuning, [], graphs)(x)
    ops = ops_of(graphs[0])
    assert ops.count("norm_gemm") == 2 * 5 and ops.count("gemm") == 2 * 2 + 1  # the head's norm stays


def test_a_kernel_that_fails_its_check_leaves_the_norm(tuning, monkeypatch):
    from autotune_cli.routing import norms, ops

    always_grouped(monkeypatch)
    monkeypatch.setattr(norms, "_checked", lambda kernel, residual, device: False)
    for name in [name for name in ops.ROUTES if name.startswith("norm-")]:  # made once per process
        monkeypatch.delitem(ops.ROUTES, name)
    graphs = []
    x = torch.randn(1, 1, C)
    model = Stack(layers=1)
    want = copy.deepcopy(model).double()(x.double())
    with torch.no_grad():
        got = compiled(model, tuning, [], graphs)(x)
    assert "norm_gemm" not in ops_of(graphs[0])
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("config", [
    GEMV,
    {**GEMV, "BLOCK_M": 4, "BLOCK_K": 32, "REDUCE_EACH": 1},
    {**GEMV, "BLOCK_M": 16, "BLOCK_N": 16, "DOT": 1, "num_warps": 4},
], ids=["cuda-cores", "cuda-cores-4-rows", "dot"])
@pytest.mark.parametrize("residual", [False, True])
def test_the_norm_kernel_matches_the_torch_ops(tmp_path, config, residual):
    """Every form of the GEMV takes the norm: out as the torch ops then the GEMM, h as the add
    (float32: the interpreter's casts to bfloat16 truncate, the GPU's round)."""
    from autotune_cli.problem import make_problem
    from autotune_cli.routing.norms import _checked, _torch_norm
    from autotune_cli.templates import get_template

    dtype = "bfloat16" if config.get("DOT") else "float32"
    m = 3 if config["BLOCK_M"] > 1 else 1
    problem = make_problem(m=m, n=40, k=72, dtype=dtype, device="cpu", layout="nt")
    template = get_template("triton::gemv")
    kernel = template.build_norm(problem, template.full_params(problem, config), str(tmp_path), residual)
    assert _checked(kernel, residual, torch.device("cpu"))
    t = getattr(torch, dtype)
    x, w = torch.randn(m, 72).to(t), (torch.rand(72) + 0.5).to(t)
    r = torch.randn(m, 72).to(t) if residual else None
    b = torch.randn(40, 72).to(t).t()
    out, h = torch.empty(m, 40, dtype=t), torch.empty(m, 72, dtype=t)
    kernel(x, r, w, 1e-5, b, out, h)
    want_h = x if r is None else x + r
    if dtype == "float32" and residual:
        assert torch.equal(h, want_h)
    want = _torch_norm(want_h, w, 1e-5).double() @ b.double()
    tol = 1e-4 if dtype == "float32" else 5e-2
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol * want.abs().max().item())


@pytest.mark.gpu
def test_gpu_decode_layers_run_their_norms_inside_the_gemvs(cache_dir, monkeypatch, capfd):
    """bfloat16 on the GPU under CUDA graphs, by default: the norms move into the tuned GEMVs
    and the logits match the eager model's."""
    always_grouped(monkeypatch)
    model = Stack(layers=2).to("cuda", torch.bfloat16)
    x = torch.randn(1, 1, C, device="cuda", dtype=torch.bfloat16)
    want = copy.deepcopy(model).double()(x.double())
    routes = []
    run = autotune_cli.compile(model, fullgraph=True, routes=routes,
                               tune=TuneSettings(device="cuda", cache_dir=cache_dir, templates=("triton::gemv",)))
    with torch.no_grad():
        for _ in range(3):  # CUDA graphs: warm-up, record, replay
            got = run(x)
    assert "RMSNorms run inside the GEMV" in capfd.readouterr().err
    torch.testing.assert_close(got.double(), want, rtol=3e-2, atol=3e-2 * want.abs().max().item())
