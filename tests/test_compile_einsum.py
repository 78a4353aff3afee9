"""Einsums under autotune_cli.compile (routing/einsum.py): one that is a GEMM becomes the
matmul it is and is routed as any; another form stays the compiler's, said why."""

from __future__ import annotations

import json

import pytest
import torch

import autotune_cli
from autotune_cli.model.shapes_file import read_listed
from autotune_cli.model import find_gemms
from autotune_cli.routing.einsum import einsum_gemm

pytestmark = pytest.mark.usefixtures("fresh_compile")

# (equation, A's shape, B's shape)
LOWERED = [
    ("bsd,hd->bsh", (2, 8, 32), (16, 32)),  # a linear's projection
    ("bik,kj->bij", (2, 8, 32), (32, 16)),
    ("ij,jk", (8, 16), (16, 4)),  # implicit output
    ("mk,kn->nm", (16, 32), (32, 24)),  # torch swaps the operands
    ("d,hd->h", (32,), (16, 32)),  # no rows: M = 1
    ("bsd,d->bs", (2, 8, 32), (32,)),  # no columns: N = 1
    ("...d,hd->...h", (2, 3, 8, 32), (16, 32)),
    ("bsd,edh->bseh", (2, 8, 32), (4, 32, 8)),  # two columns, viewed back
    ("bsd,ehd->ebsh", (2, 8, 32), (4, 8, 32)),  # the output permuted
    ("abcd,cde->abe", (2, 3, 4, 5), (4, 5, 6)),  # two summed labels
    ("bhqd,bhkd->bhqk", (2, 4, 8, 16), (2, 4, 8, 16)),  # attention's scores
    ("bqhd,bkhd->bhqk", (2, 8, 4, 16), (2, 8, 4, 16)),  # heads after the tokens
    ("ebd,edh->ebh", (4, 8, 32), (4, 32, 16)),  # experts' weights
    ("xbi,byi->bxy", (5, 2, 7), (2, 3, 7)),
    ("b...i,bij->b...j", (2, 3, 4, 7), (2, 7, 5)),  # two rows in a batch, viewed back
    ("bik,bkj->bji", (2, 8, 16), (2, 16, 12)),
]

LEFT = [
    ("i,j->ij", (4,), (5,), "no label summed"),
    ("ii,ij->j", (4, 4), (4, 5), "a diagonal"),
    ("bij,bjk->bik", (1, 4, 8), (3, 8, 5), "broadcast"),
    ("ij,kl->il", (3, 4), (5, 6), "summed within one operand"),
]


class Einsum(torch.nn.Module):
    def __init__(self, equation: str):
        super().__init__()
        self.equation = equation

    def forward(self, a, b):
        return torch.einsum(self.equation, a, b)


def compiled_routes(equation, a, b, backend="eager", **kwargs):
    routes: list = []
    with torch.no_grad():
        got = autotune_cli.compile(Einsum(equation), backend=backend, routes=routes, tune=False, **kwargs)(a, b)
    return got, routes


def problems(found) -> list[tuple]:
    return sorted((p.op, p.b, p.m, p.n, p.k, p.dtype, p.layout, p.bias) for p in found)


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("equation,a_shape,b_shape", LOWERED, ids=[c[0] for c in LOWERED])
def test_an_einsum_that_is_one_gemm_is_met_as_the_bmm_torch_runs(cache_dir, tmp_path, equation, a_shape, b_shape,
                                                                 transposed):
    """The graph computes torch's einsum through one bmm: the problem a record of the eager
    einsum writes, and `autotune model` lists for the exported one (so either serves it)."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(*a_shape, generator=g), torch.randn(*b_shape, generator=g)
    if transposed:  # the same values, column-major
        a, b = (t.mT.contiguous().mT if t.dim() >= 2 else t for t in (a, b))
    got, routes = compiled_routes(equation, a, b)
    torch.testing.assert_close(got, torch.einsum(equation, a, b))
    assert [r.op for r in routes] == ["bmm"]
    assert routes[0].reason.startswith("nothing cached"), routes[0].reason
    with torch.no_grad(), autotune_cli.record(str(tmp_path / "ran.json")):
        torch.einsum(equation, a, b)
    ran = [p for p, _, _ in read_listed(tmp_path / "ran.json", "cpu")]
    assert problems([routes[0].problem]) == problems(ran)
    if not transposed:
        torch.export.save(torch.export.export(Einsum(equation), (a, b)), str(tmp_path / "m.pt2"))
        listed = [f.problem for f in find_gemms(str(tmp_path / "m.pt2"), device="cpu")]
        assert problems(listed) == problems(ran)


@pytest.mark.parametrize("equation,a_shape,b_shape,why", LEFT, ids=[c[0] for c in LEFT])
def test_an_einsum_of_another_form_stays_the_compilers_said_why(cache_dir, capfd, equation, a_shape, b_shape, why):
    a, b = torch.randn(*a_shape), torch.randn(*b_shape)
    got, routes = compiled_routes(equation, a, b)
    torch.testing.assert_close(got, torch.einsum(equation, a, b))
    assert [(r.op, r.fallback) for r in routes] == [("einsum", True)]
    assert why in routes[0].reason, routes[0].reason
    assert "left to the compiler: 1 as einsums of another form" in capfd.readouterr().err


def test_einsum_gemm_names_each_labels_part():
    plan = einsum_gemm("bqhd,bkhd->bhqk", (2, 8, 4, 16), (2, 8, 4, 16))
    assert [chr(s) for s in plan.batch] == ["b", "h"] and [chr(s) for s in plan.rows] == ["q"]
    assert [chr(s) for s in plan.summed] == ["d"] and [chr(s) for s in plan.columns] == ["k"]
    assert not plan.swapped and not plan.fold
    swapped = einsum_gemm("mk,kn->nm", (16, 32), (32, 24))  # B's columns lead: B @ A, as torch runs it
    assert swapped.swapped and [chr(s) for s in swapped.rows] == ["n"] and [chr(s) for s in swapped.columns] == ["m"]
    assert einsum_gemm("ij,jk,kl->il", (2, 2), (2, 2)) == "not two operands"
    assert einsum_gemm("ijk,jk->i", (2, 3), (3, 4)) == "the equation's dims are not the operand's"


def test_an_einsum_projection_runs_its_tuned_triton_winner(cli, cache_dir, tmp_path):
    """'bsd,hd->bsh' runs as one bmm of a batch of 1, x folded by W.T: that problem tuned
    with triton::bmm is routed, with torch's result."""
    space = tmp_path / "space.json"
    space.write_text(json.dumps([{"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "GROUP_M": 8,
                                  "num_stages": 2, "num_warps": 4}]))
    code, out, err = cli("mm", "--device", "cpu", "--json", "--workers", "1", "--batch", 1, "--m", 16, "--n", 16,
                         "--k", 32, "--layout", "nt", "--dtype", "float32", "--templates", "triton::bmm",
                         "--space", space)
    assert code == 0, err
    assert json.loads(out)["winner"]["uid"] == "triton::bmm"
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 8, 32, generator=g), torch.randn(16, 32, generator=g)
    for backend in ("eager", "aot_eager"):
        torch._dynamo.reset()
        got, routes = compiled_routes("bsd,hd->bsh", x, w, backend=backend, fullgraph=True)
        assert [(r.op, r.uid, r.fallback) for r in routes] == [("bmm", "triton::bmm", False)], backend
        torch.testing.assert_close(got, torch.einsum("bsd,hd->bsh", x, w), rtol=1e-4, atol=1e-4)


class Heads(torch.nn.Module):
    """A projection into heads written as an einsum over a weight [experts, d, h]."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 32, 8))

    def forward(self, x):
        return torch.einsum("bsd,edh->bseh", x, self.w)


def test_an_einsum_with_dynamic_tokens_folds_them_into_m(cache_dir):
    """Dynamic batch and sequence: the rows stay unflattened, a matmul of a dynamic M (met
    as such), and every call computes torch's einsum."""
    model = Heads()
    routes: list = []
    compiled = autotune_cli.compile(model, backend="eager", routes=routes, tune=False, dynamic=True)
    with torch.no_grad():
        for batch, tokens in ((2, 3), (3, 5), (1, 9)):
            x = torch.randn(batch, tokens, 32)
            torch.testing.assert_close(compiled(x), model(x))
    assert routes and all(r.op == "mm" for r in routes)
    assert all("dynamic" in r.reason for r in routes), [r.reason for r in routes]


def test_an_einsum_that_records_gradients_keeps_them(cache_dir):
    """Under grad mode the matmul stays torch's (no backward in our kernels), and the
    gradients are the einsum's."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, 32, generator=g, requires_grad=True)
    w = torch.randn(4, 8, 32, generator=g, requires_grad=True)
    routes: list = []
    compiled = autotune_cli.compile(Einsum("bsd,ehd->ebsh"), backend="aot_eager", routes=routes, tune=False)
    compiled(x, w).square().sum().backward()
    got = (x.grad, w.grad)
    x.grad = w.grad = None
    torch.einsum("bsd,ehd->ebsh", x, w).square().sum().backward()
    torch.testing.assert_close(got, (x.grad, w.grad))
    assert [(r.op, r.fallback) for r in routes] == [("bmm", True)] and "gradients" in routes[0].reason


class AutocastEinsum(torch.nn.Module):
    """A projection written as an einsum, under autocast, on float32 operands."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 32))

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return torch.einsum("bsd,hd->bsh", x, self.w)


def test_an_einsum_under_autocast_is_routed_in_the_dtype_it_runs_in(cli, cache_dir, tmp_path):
    """Autocast runs the einsum's bmm in bfloat16: the lowered bmm is met so (the problem
    record lists), its winner runs on the operands autocast casts, and the output is
    torch's, in bfloat16 (met in float32, a float32 winner gave a float32 output)."""
    torch.manual_seed(0)
    model, x = AutocastEinsum().eval(), torch.randn(2, 8, 32)
    with torch.no_grad(), autotune_cli.record(str(tmp_path / "ran.json")):
        want = model(x)
    (ran,) = [p for p, _, _ in read_listed(tmp_path / "ran.json", "cpu")]
    assert ran.dtype == "bfloat16"
    space = tmp_path / "space.json"
    space.write_text(json.dumps([{"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "GROUP_M": 8,
                                  "num_stages": 2, "num_warps": 4}]))
    for dtype in ("bfloat16", "float32"):  # a float32 winner too: not the problem that runs
        code, _, err = cli("mm", "--device", "cpu", "--workers", "1", "--batch", 1, "--m", 16, "--n", 16, "--k", 32,
                           "--layout", "nt", "--dtype", dtype, "--templates", "triton::bmm", "--space", space)
        assert code == 0, err
    routes: list = []
    with torch.no_grad():
        got = autotune_cli.compile(model, backend="aot_eager", routes=routes, tune=False)(x)
    assert [(r.uid, r.fallback) for r in routes] == [("triton::bmm", False)]
    assert problems([routes[0].problem]) == problems([ran])
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, rtol=2e-2, atol=1e-1)
