"""Matmuls a saved model runs inside other graphs or composite ops (autotune_cli.model), on the CPU.

Each model is built here and saved with torch.export (and, where the formats are compared,
torch.jit.trace): matmuls under torch.no_grad() and torch.autocast (graphs of their own in a
.pt2), in torch.cond branches and loop bodies, einsums, a 2-D weight times a 3-D input, and
matrix-vector products. Where torch decides the problem at run time, the listing is checked
against what `autotune_cli.record` sees the model run.
"""

from __future__ import annotations

import json
import zipfile

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import autotune_cli  # noqa: E402
from autotune_cli.errors import UserError  # noqa: E402
from autotune_cli.model import FoundGemm, NotTuned, find_gemms  # noqa: E402
from autotune_cli.model.shapes_file import read_listed  # noqa: E402


def rows(found: list[FoundGemm]) -> list[tuple]:
    """(op, b, m, n, k, dtype, layout, bias, count) for each found problem, in order."""
    return [(f.problem.op, f.problem.b, f.problem.m, f.problem.n, f.problem.k, f.problem.dtype,
             f.problem.layout, f.problem.bias, f.count) for f in found]


def export(model: nn.Module, inputs: tuple, path) -> str:
    torch.export.save(torch.export.export(model.eval(), inputs), str(path))
    return str(path)


def traced(model: nn.Module, inputs: tuple, path) -> list[tuple]:
    """What the TorchScript reader lists for the same model."""
    with torch.no_grad():
        torch.jit.save(torch.jit.trace(model.eval(), inputs), str(path))
    shapes = [(tuple(t.shape), str(t.dtype).removeprefix("torch.")) for t in inputs]
    return rows(find_gemms(path, device="cpu", trust_torchscript=True, input_shapes=shapes))


def recorded(run, path, grad: bool = False) -> list[tuple]:
    """The problems `autotune_cli.record` sees `run()` make, as rows(), in the order listed."""
    with torch.set_grad_enabled(grad), autotune_cli.record(str(path)):
        run()
    return [(p.op, p.b, p.m, p.n, p.k, p.dtype, p.layout, p.bias, count)
            for p, count, group in read_listed(path, "cpu") if not group]


# -- torch.no_grad() and torch.autocast regions ----------------------------------------------

class NoGradTail(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(64, 48)
        self.b = nn.Linear(48, 80)

    def forward(self, x):
        h = self.a(x)
        with torch.no_grad():
            return self.b(h)


class AutocastTail(NoGradTail):
    def forward(self, x):
        h = self.a(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            g = self.b(h)
            with torch.autocast("cpu", enabled=False):
                f = self.b(h)  # autocast off again: float32
        return g.float().sum() + f.sum()


def test_a_no_grad_region_is_read_as_torchscript_reads_it(tmp_path):
    x = torch.randn(16, 64)
    found = find_gemms(export(NoGradTail(), (x,), tmp_path / "m.pt2"), device="cpu")
    assert rows(found) == [("addmm", 1, 16, 48, 64, "float32", "nt", "n", 1),
                           ("addmm", 1, 16, 80, 48, "float32", "nt", "n", 1)]
    assert rows(found) == traced(NoGradTail(), (x,), tmp_path / "m.pt")


def test_an_autocast_region_runs_its_matmuls_in_its_dtype(tmp_path):
    x = torch.randn(16, 64)
    path = export(AutocastTail(), (x,), tmp_path / "m.pt2")
    notes: list[str] = []
    found = find_gemms(path, device="cpu", notes=notes)
    assert rows(found) == [("addmm", 1, 16, 48, 64, "float32", "nt", "n", 1),
                           ("addmm", 1, 16, 80, 48, "bfloat16", "nt", "n", 1),
                           ("addmm", 1, 16, 80, 48, "float32", "nt", "n", 1)]
    assert rows(found) == traced(AutocastTail(), (x,), tmp_path / "m.pt")
    assert notes == []
    # tuned for another device, the region (autocast on the CPU) does not apply: said
    find_gemms(path, device="cuda", notes=notes)
    assert notes == ["the matmuls inside torch.autocast('cpu') are listed in bfloat16, as they run on cpu; "
                     "on cuda that region leaves them in their operands' dtypes"]


def test_a_program_exported_under_an_outer_autocast_is_listed_as_the_loaded_program_runs(tmp_path):
    """Exported inside torch.autocast, the program keeps no casts, yet its metadata says the
    linears give bfloat16 (and the second one reads it): each is listed in the dtype the
    loaded program runs, float32 for both, as a dispatch mode sees it run, and a note says
    why the saved dtypes differ."""
    from torch.utils._python_dispatch import TorchDispatchMode

    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 48)).eval()
    x = torch.randn(16, 64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        program = torch.export.export(model, (x,))
    path = tmp_path / "outer.pt2"
    torch.export.save(program, str(path))

    class Dtypes(TorchDispatchMode):
        seen: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket in (torch.ops.aten.addmm, torch.ops.aten.mm):
                self.seen.append(str(args[1].dtype).removeprefix("torch."))
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Dtypes():
        torch.export.load(str(path)).module()(x)
    assert Dtypes.seen == ["float32", "float32"]
    notes: list[str] = []
    found = find_gemms(path, device="cpu", notes=notes)
    assert rows(found) == [("addmm", 1, 16, 64, 64, "float32", "nt", "n", 1),
                           ("addmm", 1, 16, 48, 64, "float32", "nt", "n", 1)]
    assert [f.problem.dtype for f in found] == Dtypes.seen
    assert len(notes) == 1 and notes[0].startswith(
        "2 matmuls of float32 operands outside any autocast region are saved with bfloat16 outputs"), notes
    assert "exported under torch.autocast" in notes[0]


class CudaAutocast(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(64, 48)

    def forward(self, x):
        with torch.autocast("cuda", dtype=torch.float16):
            return self.a(x)


def test_a_scripted_autocast_region_runs_its_matmuls_in_its_dtype(tmp_path):
    """TorchScript applies autocast as a pass of its optimizing executor: the reader, which
    runs the saved graph, applies it too, and lists a region's matmuls in its dtype, as the
    loaded model runs them (and as the exported program is listed)."""
    x = torch.randn(16, 64)
    path = tmp_path / "m.pt"
    torch.jit.save(torch.jit.script(AutocastTail().eval()), str(path))
    notes: list[str] = []
    found = find_gemms(path, device="cpu", trust_torchscript=True, input_shapes=[((16, 64), "float32")],
                       notes=notes)
    run = torch.jit.load(str(path))
    assert rows(found) == recorded(lambda: run(x), tmp_path / "ran.json") == [
        ("addmm", 1, 16, 48, 64, "float32", "nt", "n", 1),
        ("addmm", 1, 16, 80, 48, "bfloat16", "nt", "n", 1),
        ("addmm", 1, 16, 80, 48, "float32", "nt", "n", 1)]
    assert notes == []
    # a CUDA region casts CUDA tensors alone: listed in its dtype, and, tuned for the CPU, said
    path = tmp_path / "cuda.pt"
    torch.jit.save(torch.jit.script(CudaAutocast().eval()), str(path))
    for device, said in (("cuda", []), ("cpu", [
            "the matmuls inside torch.autocast('cuda') are listed in float16, as they run on cuda; "
            "on cpu that region leaves them in their operands' dtypes"])):
        notes = []
        found = find_gemms(path, device=device, trust_torchscript=True, input_shapes=[((16, 64), None)],
                           notes=notes)
        assert rows(found) == [("addmm", 1, 16, 48, 64, "float16", "nt", "n", 1)]
        assert notes == said


class AutocastWeight(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 32))

    def forward(self, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.w @ y


def test_an_autocast_copy_of_a_weight_is_as_the_exported_program_runs_it(tmp_path):
    """An exported autocast region keeps no cast cache: the bfloat16 copy of a weight is a
    computed tensor, which requires grad only in grad mode; at::matmul folds 2-D @ 3-D into
    one mm only then."""
    y = torch.randn(4, 32, 24)
    model = AutocastWeight().eval()
    program = torch.export.export(model, (y,))
    path = tmp_path / "m.pt2"
    torch.export.save(program, str(path))
    notes: list[str] = []
    found = find_gemms(path, device="cpu", notes=notes)
    run = program.module()
    assert rows(found) == recorded(lambda: run(y), tmp_path / "no_grad.json") == [
        ("bmm", 4, 16, 24, 32, "bfloat16", "nn", None, 1)]
    assert recorded(lambda: run(y), tmp_path / "grad.json", grad=True) == [
        ("mm", 1, 96, 16, 32, "bfloat16", "nt", None, 1)]
    assert len(notes) == 1 and notes[0].startswith("1 matmul listed as torch runs it without grad")


class QKVNoGrad(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(32, 32), nn.Linear(32, 32), nn.Linear(32, 32)

    def forward(self, x):
        with torch.no_grad():
            return self.q(x) + self.k(x) + self.v(x)


def test_linears_of_one_input_in_a_region_are_grouped(tmp_path):
    found = find_gemms(export(QKVNoGrad(), (torch.randn(8, 32),), tmp_path / "m.pt2"), device="cpu",
                       groups=True)
    assert [(f.problem.op, f.problem.m, f.problem.n, f.problem.k, f.count, f.group) for f in found] == [
        ("addmm", 8, 32, 32, 3, False), ("addmm", 8, 96, 32, 1, True)]


# -- control flow --------------------------------------------------------------------------

class Cond(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(64, 48)
        self.b = nn.Linear(64, 80)

    def forward(self, x, flag):
        return torch.cond(flag.sum() > 0, lambda x: self.a(x).sum(1), lambda x: self.b(x).sum(1), (x,))


def test_both_branches_of_a_cond_are_listed_once_each(tmp_path):
    path = export(Cond(), (torch.randn(16, 64), torch.ones(1)), tmp_path / "m.pt2")
    notes: list[str] = []
    found = find_gemms(path, device="cpu", notes=notes, groups=True)
    assert rows(found) == [("addmm", 1, 16, 48, 64, "float32", "nt", "n", 1),
                           ("addmm", 1, 16, 80, 64, "float32", "nt", "n", 1)]  # no group: never run together
    assert notes == ["2 matmuls in torch.cond branches are each counted once, though a call runs one branch only"]


class Loops(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(32, 16)
        self.w = nn.Parameter(torch.randn(32, 32))

    def forward(self, xs, x, n):
        from torch._higher_order_ops.map import map as map_hop

        per_slice = map_hop(lambda t: self.lin(t), xs)  # xs.size(0) = 5 calls

        def body(i, h):
            return i + 1, h @ self.w

        looped = torch._higher_order_ops.while_loop(lambda i, h: i < n.sum(), body,
                                                    (torch.zeros((), dtype=torch.int64), x))[1]
        return per_slice.sum() + looped.sum()


def test_a_map_body_counts_its_trip_count_and_a_loop_body_says_it_cannot(tmp_path):
    inputs = (torch.randn(5, 4, 32), torch.randn(4, 32), torch.tensor(3))
    notes: list[str] = []
    found = find_gemms(export(Loops(), inputs, tmp_path / "m.pt2"), device="cpu", notes=notes)
    assert rows(found) == [("addmm", 1, 4, 16, 32, "float32", "nt", "n", 5),
                           ("mm", 1, 4, 32, 32, "float32", "nn", None, 1)]
    assert notes == ["1 matmul in a torch.while_loop body is counted once, though the loop runs it once per "
                     "iteration (a number the program does not give)"]


def test_another_higher_order_op_is_read_and_named(tmp_path):
    """An op the reader does not know (here cond, renamed in the archive): its graphs are
    read, and a note says the counts are not known."""
    path = export(Cond(), (torch.randn(16, 64), torch.ones(1)), tmp_path / "m.pt2")
    renamed = tmp_path / "renamed.pt2"
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(renamed, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith("models/model.json"):
                data = data.replace(b'"torch.ops.higher_order.cond"', b'"torch.ops.higher_order.my_branches"')
            target.writestr(info, data)
    notes: list[str] = []
    assert len(find_gemms(renamed, device="cpu", notes=notes)) == 2
    assert notes == ["2 matmuls inside torch.ops.higher_order.my_branches are each counted once; how many "
                     "times a call runs it is not known"]


# -- einsum --------------------------------------------------------------------------------

class Einsum(nn.Module):
    def __init__(self, equation: str, transposed: bool = False):
        super().__init__()
        self.equation, self.transposed = equation, transposed

    def forward(self, *operands):
        if self.transposed:  # the same values, column-major
            operands = [t.mT.contiguous().mT if t.dim() >= 2 else t for t in operands]
        return torch.einsum(self.equation, *operands)


EINSUMS = [
    ("bik,bkj->bij", [(2, 8, 16), (2, 16, 8)], [("bmm", 2, 8, 8, 16, "nn")]),
    ("mk,kn->mn", [(16, 32), (32, 24)], [("bmm", 1, 16, 24, 32, "nn")]),
    ("mk,nk->mn", [(16, 32), (24, 32)], [("bmm", 1, 16, 24, 32, "nt")]),
    ("bqhd,bkhd->bhqk", [(2, 8, 3, 16), (2, 12, 3, 16)], [("bmm", 6, 8, 12, 16, "nn")]),
    ("...ij,...jk->...ik", [(2, 3, 8, 16), (2, 3, 16, 8)], [("bmm", 6, 8, 8, 16, "nn")]),
    ("bij,jk->bik", [(4, 24, 32), (32, 16)], [("bmm", 1, 96, 16, 32, "nn")]),
    ("ij,jk,kl->il", [(8, 16), (16, 12), (12, 10)], [("bmm", 1, 8, 10, 12, "nn"), ("bmm", 1, 8, 12, 16, "nn")]),
    ("mk,kn->nm", [(16, 32), (32, 24)], [("bmm", 1, 24, 16, 32, "tt")]),  # torch swaps the operands
    ("bik,bkj->bji", [(2, 8, 16), (2, 16, 12)], [("bmm", 2, 12, 8, 16, "tt")]),
]


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("equation,shapes,plain", EINSUMS, ids=[e[0] for e in EINSUMS])
def test_an_einsum_is_the_bmm_it_runs(tmp_path, equation, shapes, plain, transposed):
    inputs = tuple(torch.randn(s) for s in shapes)
    model = Einsum(equation, transposed).eval()
    found = find_gemms(export(model, inputs, tmp_path / "m.pt2"), device="cpu")
    ran = recorded(lambda: model(*inputs), tmp_path / "r.json")
    assert sorted(rows(found)) == sorted(ran)
    assert sorted(rows(found)) == sorted(traced(model, inputs, tmp_path / "m.pt"))
    assert {f.sources for f in found} == {("aten.einsum",)}
    if not transposed:
        assert sorted(r[:5] + r[6:7] for r in rows(found)) == sorted(plain)


def test_an_einsum_along_a_saved_contraction_path(tmp_path):
    """torch.einsum saves the path opt_einsum chose (where it is installed): the pairs are
    contracted in that order. The path is written into the archive here, as torch.export
    saves it, and the listing compared with what that call runs."""
    shapes = [(8, 16), (16, 12), (12, 10)]
    inputs = tuple(torch.randn(s) for s in shapes)
    path = export(Einsum("ij,jk,kl->il"), inputs, tmp_path / "m.pt2")
    with_path = tmp_path / "path.pt2"
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(with_path, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith("models/model.json"):
                doc = json.loads(data)
                (node,) = doc["graph_module"]["graph"]["nodes"]
                node["inputs"].append({"name": "path", "arg": {"as_ints": [1, 2, 0, 1]}, "kind": 1})
                data = json.dumps(doc).encode()
            target.writestr(info, data)
    found = find_gemms(with_path, device="cpu")
    ran = recorded(lambda: torch._VF.einsum("ij,jk,kl->il", list(inputs), path=[1, 2, 0, 1]), tmp_path / "r.json")
    assert sorted(rows(found)) == sorted(ran) == [("bmm", 1, 8, 10, 16, "float32", "nt", None, 1),
                                                  ("bmm", 1, 10, 16, 12, "float32", "tt", None, 1)]


# -- composite products (products.py) --------------------------------------------------------

class Product(nn.Module):
    def __init__(self, run):
        super().__init__()
        self.run = run

    def forward(self, *operands):
        return self.run(*operands)


PRODUCTS = [
    ("inner", lambda a, b: torch.inner(a, b), [(8, 32), (24, 32)]),
    ("inner-3d", lambda a, b: torch.inner(a, b), [(2, 4, 32), (3, 5, 32)]),
    ("inner-column-major", lambda a, b: torch.inner(a, b.mT.contiguous().mT), [(8, 32), (24, 32)]),
    ("tensordot", lambda a, b: torch.tensordot(a, b, dims=1), [(8, 32), (32, 24)]),
    ("tensordot-2-dims", lambda a, b: torch.tensordot(a, b, dims=([1, 2], [1, 0])), [(4, 6, 8), (8, 6, 5)]),
    ("tensordot-permuted", lambda a, b: torch.tensordot(a.transpose(0, 1), b, dims=([1], [0])),
     [(32, 8), (32, 24)]),
    ("multi_dot-3", lambda a, b, c: torch.linalg.multi_dot([a, b, c]), [(8, 32), (32, 64), (64, 4)]),
    ("multi_dot-3-right-first", lambda a, b, c: torch.linalg.multi_dot([a, b, c]), [(64, 8), (8, 64), (64, 2)]),
    ("multi_dot-5", lambda a, b, c, d, e: torch.linalg.multi_dot([a, b, c, d, e]),
     [(10, 30), (30, 5), (5, 60), (60, 8), (8, 20)]),
    ("multi_dot-vectors", lambda a, b, c: torch.linalg.multi_dot([a, b, c]), [(32,), (32, 16), (16, 8)]),
    ("inner-vectors-and-matrix", lambda a, b: (torch.inner(a, b), torch.inner(b[0], b)), [(32,), (24, 32)]),
]


@pytest.mark.parametrize("run,shapes", [p[1:] for p in PRODUCTS], ids=[p[0] for p in PRODUCTS])
def test_a_composite_product_is_the_mm_calls_it_runs(tmp_path, run, shapes):
    """torch.export keeps inner, tensordot and multi_dot as one node each: listed as the mm
    calls torch runs for them (what `record` sees and a TorchScript run shows), not missed."""
    inputs = tuple(torch.randn(s) for s in shapes)
    model = Product(run).eval()
    found = find_gemms(export(model, inputs, tmp_path / "m.pt2"), device="cpu")
    ran = recorded(lambda: model(*inputs), tmp_path / "r.json")
    assert ran and sorted(rows(found)) == sorted(ran)
    assert sorted(rows(found)) == sorted(traced(model, inputs, tmp_path / "m.pt"))


def test_a_product_summing_every_dim_is_a_dot_not_an_mm(tmp_path):
    """inner of two vectors, tensordot over all dims: torch runs a dot, no GEMM."""
    model = Product(lambda a, b: (torch.inner(a[0], a[1]), torch.tensordot(a, b, dims=2)))
    inputs = (torch.randn(24, 32), torch.randn(24, 32))
    with pytest.raises(UserError, match=r"only matrix-vector products"):
        find_gemms(export(model, inputs, tmp_path / "m.pt2"), device="cpu")
    with torch.no_grad(), autotune_cli.record(tmp_path / "r.json"):  # nothing to list: no file
        model(*inputs)
    assert not (tmp_path / "r.json").exists()


def test_products_with_vectors_and_others_no_template_takes_are_named(tmp_path):
    """mv, dot, addmv, addr, addbmm and a bilinear layer: no GEMM `record` lists, counted in
    the not-tuned note of both formats, beside the linear that is listed."""
    class Vectors(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.bilinear = nn.Linear(8, 8), nn.Bilinear(8, 8, 4)

        def forward(self, x, v):
            w = self.lin.weight
            return (self.lin(x), torch.mv(w, v), torch.dot(v, v), torch.addmv(v, w, v), torch.addr(w, v, v),
                    torch.addbmm(x[:4], x.reshape(2, 4, 8), w.expand(2, 8, 8)), self.bilinear(x, x))

    inputs = (torch.randn(8, 8), torch.randn(8))
    for path in (export(Vectors(), inputs, tmp_path / "m.pt2"), tmp_path / "m.pt"):
        if str(path).endswith(".pt"):
            traced(Vectors(), inputs, path)
        not_tuned: list[NotTuned] = []
        found = find_gemms(path, device="cpu", trust_torchscript=True, not_tuned=not_tuned,
                           input_shapes=[((8, 8), "float32"), ((8,), "float32")])
        assert rows(found) == [("addmm", 1, 8, 8, 8, "float32", "nt", "n", 1)], path
        assert sorted(not_tuned, key=lambda n: n.what) == [
            NotTuned("bilinear layer (aten.bilinear)", 1), NotTuned("matrix-vector product", 3),
            NotTuned("outer product", 1), NotTuned("sum of batched products (aten.addbmm)", 1)], path


def test_an_einsum_without_a_matmul_is_named(tmp_path):
    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, a, b):
            return self.lin(torch.einsum("i,j->ij", a, b))

    inputs = (torch.randn(8), torch.randn(8))
    for path in (export(Outer(), inputs, tmp_path / "m.pt2"), tmp_path / "m.pt"):
        if str(path).endswith(".pt"):
            traced(Outer(), inputs, path)
        not_tuned: list[NotTuned] = []
        found = find_gemms(path, device="cpu", trust_torchscript=True, not_tuned=not_tuned,
                           input_shapes=[((8,), "float32"), ((8,), "float32")])
        assert rows(found) == [("addmm", 1, 8, 8, 8, "float32", "nt", "n", 1)]
        assert not_tuned == [NotTuned("einsum without a matmul", 1)]


# -- a 2-D operand times an N-D one ----------------------------------------------------------

class Broadcast(nn.Module):
    def __init__(self, which: str):
        super().__init__()
        self.which = which
        self.w = nn.Parameter(torch.randn(16, 32))
        self.w3 = nn.Parameter(torch.randn(32, 24))
        self.lin = nn.Linear(32, 8)
        self.register_buffer("frozen", torch.randn(8, 32))

    def forward(self, y, x3, x2):
        return {
            "linear of a 3-D input not contiguous": lambda: self.lin(x3.transpose(0, 1)),
            "linear of a buffer, 3-D input not contiguous": lambda: F.linear(x3.transpose(0, 1), self.frozen),
            "weight @ 3-D": lambda: self.w @ y,
            "3-D (rows not contiguous) @ weight": lambda: x3.transpose(0, 1) @ self.w3,
            "weight view @ 3-D": lambda: self.w.t().t() @ y,
            "input @ 3-D": lambda: x2 @ y,
            "computed @ 3-D": lambda: (self.w * 2) @ y,
            "3-D (rows not contiguous) @ input": lambda: y.transpose(1, 2) @ x2.t(),
        }[self.which]()


CASES = {
    "linear of a 3-D input not contiguous": ("mm", 1, 32, 8, 32, "float32", "nt", None, 1),  # mm, then the bias add
    "linear of a buffer, 3-D input not contiguous": ("bmm", 4, 8, 8, 32, "float32", "nt", None, 1),
    "weight @ 3-D": ("mm", 1, 96, 16, 32, "float32", "nt", None, 1),
    "3-D (rows not contiguous) @ weight": ("mm", 1, 32, 24, 32, "float32", "nn", None, 1),
    "weight view @ 3-D": ("mm", 1, 96, 16, 32, "float32", "nt", None, 1),
    "input @ 3-D": ("bmm", 4, 16, 24, 32, "float32", "nn", None, 1),
    "computed @ 3-D": ("bmm", 4, 16, 24, 32, "float32", "nn", None, 1),
    "3-D (rows not contiguous) @ input": ("bmm", 4, 24, 16, 32, "float32", "tt", None, 1),
}


@pytest.mark.parametrize("which", list(CASES))
def test_a_2d_operand_times_an_nd_one_is_what_torch_runs(tmp_path, which):
    """at::matmul folds the N-D operand into one mm when the 2-D one requires grad (a
    Parameter or a view of one, in either grad mode), else runs a bmm; at::linear runs
    addmm only for an input it can flatten, else matmul and an add: as recorded."""
    inputs = (torch.randn(4, 32, 24), torch.randn(8, 4, 32), torch.randn(16, 32))
    model = Broadcast(which).eval()
    notes: list[str] = []
    found = find_gemms(export(model, inputs, tmp_path / "m.pt2"), device="cpu", notes=notes)
    assert rows(found) == [CASES[which]]
    assert rows(found) == recorded(lambda: model(*inputs), tmp_path / "r.json")
    assert rows(found) == traced(model, inputs, tmp_path / "m.pt")
    with_grad = recorded(lambda: model(*inputs), tmp_path / "g.json", grad=True)
    if which == "computed @ 3-D":  # (w * 2) requires grad only in grad mode: torch folds it then
        assert with_grad == [("mm", 1, 96, 16, 32, "float32", "nt", None, 1)]
        assert len(notes) == 1 and "with grad enabled, a 2-D operand computed from a Parameter" in notes[0]
    else:
        assert with_grad == rows(found) and notes == []


# -- matrix-vector products ------------------------------------------------------------------

class Vectors(nn.Module):
    def __init__(self):
        super().__init__()
        self.v = nn.Parameter(torch.randn(64))
        self.w = nn.Parameter(torch.randn(64, 32))
        self.lin = nn.Linear(64, 8)

    def forward(self, x, y):
        return (x @ self.v).sum() + self.lin(self.v).sum() + (self.v @ y).sum() + (x @ self.w).sum()


def test_matrix_vector_products_are_named_not_tuned(tmp_path):
    inputs = (torch.randn(16, 64), torch.randn(2, 64, 8))
    shapes = [((16, 64), "float32"), ((2, 64, 8), "float32")]
    traced(Vectors(), inputs, tmp_path / "m.pt")
    for path in (export(Vectors(), inputs, tmp_path / "m.pt2"), tmp_path / "m.pt"):
        notes: list[str] = []
        not_tuned: list[NotTuned] = []
        found = find_gemms(path, device="cpu", notes=notes, not_tuned=not_tuned, trust_torchscript=True,
                           input_shapes=shapes)
        assert rows(found) == [("mm", 1, 16, 32, 64, "float32", "nn", None, 1)]
        assert not_tuned == [NotTuned("matrix-vector product", 3)]
        assert [item.to_dict() for item in not_tuned] == [{"what": "matrix-vector product", "count": 3}]
        assert notes == ["not tuned: 3 matrix-vector products, whose work is not a GEMM autotune tunes; each "
                         "matmul's share is of the matmuls listed, not of the model"]


def test_model_json_carries_what_is_not_tuned(cli, cache_dir, tmp_path):
    inputs = (torch.randn(16, 64), torch.randn(2, 64, 8))
    path = export(Vectors(), inputs, tmp_path / "m.pt2")
    code, out, err = cli("model", path, "--plan", "--json", "--device", "cpu")
    assert code == 0, err
    assert json.loads(out)["not_tuned"] == [{"what": "matrix-vector product", "count": 3}]


def test_a_model_of_matrix_vector_products_alone_says_so(tmp_path):
    class OnlyVectors(nn.Module):
        def forward(self, x, v):
            return x @ v

    path = export(OnlyVectors(), (torch.randn(16, 64), torch.randn(64)), tmp_path / "m.pt2")
    with pytest.raises(UserError, match=r"no matmuls found in .*\(only matrix-vector products, which are not tuned\)"):
        find_gemms(path, device="cpu")


def test_what_is_not_tuned_is_one_entry_per_kind(tmp_path):
    """Convolutions, attention, matmuls in a dtype not tuned and outer products: one entry
    each, the ones without a note of their own in one "not tuned:" line."""
    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.lin = nn.Linear(4, 4)

        def forward(self, img, d, col, row):
            att = torch.nn.functional.scaled_dot_product_attention(img, img, img)
            return (self.lin(self.conv(att).mean((2, 3))).sum() + (d @ d.t()).sum() + (d @ d.t()).sum()
                    + (col @ row).sum())

    inputs = (torch.randn(1, 3, 8, 8), torch.randn(4, 4, dtype=torch.float64), torch.randn(8, 1), torch.randn(1, 8))
    notes: list[str] = []
    not_tuned: list[NotTuned] = []
    find_gemms(export(Mixed(), inputs, tmp_path / "m.pt2"), device="cpu", notes=notes, not_tuned=not_tuned)
    assert [item.to_dict() for item in not_tuned] == [
        {"what": "attention op", "count": 1}, {"what": "convolution", "count": 1},
        {"what": "matmul in float64", "count": 2}, {"what": "matmul with K = 1", "count": 1}]
    assert notes == ["1 matmul with K = 1 (an outer product, pointwise work the compiler fuses) not tuned",
                     "not tuned: 1 attention op, 1 convolution, 2 matmuls in float64, whose work is not a GEMM "
                     "autotune tunes; each matmul's share is of the matmuls listed, not of the model"]
    assert json.loads(json.dumps([item.to_dict() for item in not_tuned]))[2]["count"] == 2


class GRUOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.r = nn.GRU(16, 8, batch_first=True)

    def forward(self, x):
        return self.r(x)[0]


class RecurrentHeads(nn.Module):
    """An LSTM, a tanh RNN, an int8 matmul, and a linear head: the head alone is tuned."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(16, 8, batch_first=True)
        self.rnn = nn.RNN(16, 8, batch_first=True)
        self.head = nn.Linear(8, 4)
        self.w8 = nn.Parameter(torch.ones(32, 32, dtype=torch.int8), requires_grad=False)

    def forward(self, x, q):
        h = self.lstm(x)[0] + self.rnn(x)[0]
        return self.head(h).sum() + torch._int_mm(q, self.w8).sum()


def test_recurrent_ops_and_int8_matmuls_are_named_not_tuned(tmp_path):
    """aten.gru/lstm/rnn_tanh (fused recurrent ops, not looked into) and torch._int_mm (int8)
    are each a not-tuned entry by name; a model of a GRU alone says what it holds; TorchScript
    names the GRU alike."""
    x = torch.randn(2, 5, 16)
    path = export(GRUOnly(), (x,), tmp_path / "gru.pt2")
    alone = r"no matmuls found in .*\(only 1 recurrent op \(aten\.gru\), which is not tuned\)"
    with pytest.raises(UserError, match=alone):
        find_gemms(path, device="cpu")
    with torch.no_grad():
        torch.jit.save(torch.jit.trace(GRUOnly().eval(), (x,)), str(tmp_path / "gru.pt"))
    with pytest.raises(UserError, match=r"only 1 recurrent op \(aten\.gru\)"):
        find_gemms(tmp_path / "gru.pt", device="cpu", trust_torchscript=True, input_shapes=[((2, 5, 16), "float32")])

    notes: list[str] = []
    not_tuned: list[NotTuned] = []
    q = torch.ones(32, 32, dtype=torch.int8)
    found = find_gemms(export(RecurrentHeads(), (x, q), tmp_path / "heads.pt2"), device="cpu", notes=notes,
                       not_tuned=not_tuned)
    assert [(f.problem.m, f.problem.n, f.problem.k, f.sources) for f in found] == [(10, 4, 8, ("aten.linear",))]
    assert [item.to_dict() for item in not_tuned] == [
        {"what": "matmul in int8 (torch._int_mm)", "count": 1}, {"what": "recurrent op (aten.lstm)", "count": 1},
        {"what": "recurrent op (aten.rnn_tanh)", "count": 1}]
    assert notes[0].startswith("not tuned: 1 matmul in int8 (torch._int_mm), 1 recurrent op (aten.lstm), "
                               "1 recurrent op (aten.rnn_tanh), whose work")
    assert NotTuned("recurrent op (aten.lstm)", 2).said() == "2 recurrent ops (aten.lstm)"
    assert NotTuned("matmul in int8 (torch._int_mm)", 3).said() == "3 matmuls in int8 (torch._int_mm)"
