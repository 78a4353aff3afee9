"""The torch-free reader of torch.export archives (autotune_cli.model._read_export_archive).

Every program saved here is read both ways, from the archive's JSON and through
torch.export.load (`_load_export_program`), and both must give the same operands, inputs,
ranges and found GEMMs. Archives the reader does not know fall back to torch.export.load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from autotune_cli import model as model_mod  # noqa: E402
from autotune_cli.errors import UserError  # noqa: E402
from autotune_cli.model import find_gemms  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


# -- models -------------------------------------------------------------------------------

class Linears(nn.Module):
    """linear with and without bias on 3-D input; a 1-D linear (matrix-vector: skipped)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(32, 64)
        self.b = nn.Linear(64, 16, bias=False)

    def forward(self, x, v):
        return self.b(torch.relu(self.a(x))), self.a(v)


class Batched(nn.Module):
    """bmm, baddbmm, and matmul in its N-D forms."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 8))
        self.bias3 = nn.Parameter(torch.randn(2, 8, 8))
        self.bias1 = nn.Parameter(torch.randn(8))
        self.m2 = nn.Parameter(torch.randn(4, 8))

    def forward(self, x, y4):  # x [2, 8, 16], y4 [2, 1, 8, 16]
        s = torch.bmm(x, x.transpose(1, 2))                    # bmm nt
        t = torch.baddbmm(self.bias3, x, x.transpose(1, 2))    # baddbmm, [b, m, n] bias
        u = torch.baddbmm(self.bias1, x, x.transpose(1, 2))    # baddbmm, broadcast bias
        p = x @ self.w                                         # 3-D @ 2-D -> mm
        q = self.m2 @ x                                        # 2-D @ 3-D -> bmm
        r = y4 @ torch.ones(1, 3, 16, 8)                       # broadcast batch dims
        k = x.transpose(0, 1) @ x.transpose(0, 1).transpose(1, 2)  # batch dims not contiguous
        fused = F.scaled_dot_product_attention(y4, y4, y4)     # not a GEMM
        return s.sum() + t.sum() + u.sum() + p.sum() + q.sum() + r.sum() + k.sum() + fused.sum()


class AddmmBiases(nn.Module):
    """addmm with every bias kind; transposed operands; a row-unfoldable matmul."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 32))
        self.a = nn.Parameter(torch.randn(32, 24))
        self.bn = nn.Parameter(torch.randn(16))
        self.b1n = nn.Parameter(torch.randn(1, 16))
        self.bm1 = nn.Parameter(torch.randn(4, 1))
        self.bmn = nn.Parameter(torch.randn(4, 16))
        self.p = nn.Parameter(torch.randn(2, 5))

    def forward(self, x):  # x [4, 32]
        y = x @ self.w.t()
        z = x.t() @ y
        u = torch.mm(self.a.t(), self.w.t())
        biases = (self.bn, self.b1n, self.bm1, self.bmn)  # [n], [1, n], [m, 1], [m, n]
        adds = sum(torch.addmm(b, x, self.w.t()).sum() for b in biases)
        r = x.view(2, 2, 32).transpose(1, 2) @ self.p
        return y.sum() + z.sum() + u.sum() + adds + r.sum()


class Dynamic(nn.Module):
    """Two dynamic dims: sizes such as s0*s1 and 2*s1; a static mm too."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 32)
        self.w = nn.Parameter(torch.randn(16, 24))
        self.a = nn.Parameter(torch.randn(8, 16))
        self.b = nn.Parameter(torch.randn(16, 8))

    def forward(self, x):  # x [B, S, 16]
        h = self.lin(x)
        flat = x.reshape(-1, 16) @ self.w
        cat = torch.cat([x, x], 1) @ self.w
        scores = torch.bmm(x, x.transpose(1, 2))
        return h.sum() + flat.sum() + cat.sum() + scores.sum() + torch.mm(self.a, self.b).sum()


class Halves(nn.Module):
    """A derived dim (2*B): a range key "2*s0" besides "s0"."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(32, 8))

    def forward(self, x):  # x [2B, 16]
        halves = x.reshape(x.shape[0] // 2, 32) @ self.w
        return halves.sum() + (torch.cat([x, x]) @ self.w[:16]).sum()


class Unbacked(nn.Module):
    """A data-dependent (unbacked) size u0 and a 0-d tensor input."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 8)

    def forward(self, x, n):
        k = n.item()
        torch._check(k >= 1)
        torch._check(k <= x.shape[0])
        return self.lin(x[:k])


class Mixed(nn.Module):
    """Matmuls in int64 and float64 (skipped) beside a float one."""

    def forward(self, i, d, f):
        return (i @ i.t()).sum(), (d @ d.t()).sum(), (f @ f.t()).sum()


class IntOnly(nn.Module):
    def forward(self, x):
        return x @ x.t()


class StepSlice(nn.Module):
    """x[::2] under a dynamic dim: a FloorDiv size, which the JSON reader leaves to torch."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 8)

    def forward(self, x):
        return self.lin(x[::2])


def _dim(name, **kw):
    return torch.export.Dim(name, **kw)


CASES = {
    "linears": (Linears, lambda: (torch.randn(2, 3, 32), torch.randn(32)), None, None),
    "linears_bf16": (Linears, lambda: (torch.randn(4, 32, dtype=torch.bfloat16),
                                       torch.randn(32, dtype=torch.bfloat16)),
                     torch.bfloat16, None),
    "batched": (Batched, lambda: (torch.randn(2, 8, 16), torch.randn(2, 1, 8, 16)), None, None),
    "addmm_fp16": (AddmmBiases, lambda: (torch.randn(4, 32, dtype=torch.float16),),
                   torch.float16, None),
    "dynamic": (Dynamic, lambda: (torch.randn(3, 4, 16),), None,
                lambda: ({0: _dim("batch", min=1, max=1024), 1: _dim("seq", min=2)},)),
    "halves": (Halves, lambda: (torch.randn(8, 16),), None,
               lambda: ({0: 2 * _dim("half", min=2, max=512)},)),
    "unbacked": (Unbacked, lambda: (torch.randn(8, 16), torch.tensor(3)), None, None),
    "mixed": (Mixed, lambda: (torch.ones(4, 4, dtype=torch.int64),
                              torch.randn(4, 4, dtype=torch.float64), torch.randn(4, 4)), None, None),
    "int_only": (IntOnly, lambda: (torch.ones(4, 4, dtype=torch.int64),), None, None),
    "step": (StepSlice, lambda: (torch.randn(10, 16),), None,
             lambda: ({0: _dim("n", min=3, max=256)},)),
}
JSON_READABLE = [name for name in CASES if name != "step"]

# find_gemms arguments tried on a case besides the defaults (errors must match too)
EXTRA_CALLS = {
    "dynamic": [
        dict(hints={"x.0": [1, 2], "x.1": [4]}),
        dict(input_shapes=[((2, 5, 16), "float32")]),
        dict(input_shapes=[((2, 5, 15), "float32")]),  # the static dim is wrong
        dict(input_shapes=[((2, 5, 16), "float32")], hints={"x.0": [2]}),
    ],
    "halves": [dict(input_shapes=[((8, 16), "float32")]), dict(hints={"x.0": [4]})],
    "unbacked": [dict(input_shapes=[((8, 16), "float32"), ((), "int64")])],
    "linears": [dict(input_shapes=[((2, 3, 32), "float32")])],  # static: one input too few
    "step": [dict(hints={"x.0": [3, 9]})],
}


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("archives")
    out = {}
    for name, (make, inputs, dtype, dynamic) in CASES.items():
        module = make().eval()
        if dtype is not None:
            module = module.to(dtype)
        ep = torch.export.export(module, inputs(), dynamic_shapes=dynamic() if dynamic else None)
        path = folder / f"{name}.pt2"
        torch.export.save(ep, str(path))
        out[name] = path
    return out


def _bound(value) -> object:
    if bool(value >= 2 ** 62):
        return "inf"
    if bool(value <= -(2 ** 62)):
        return "-inf"
    return int(value)


def _graph_summary(graph: model_mod._ExportGraph):
    """Comparable form of an _ExportGraph (sizes as sympy, ranges as bounds)."""
    return (graph.raws,
            [(name, tuple(model_mod._sym(s) for s in sizes)) for name, sizes in graph.inputs],
            {k: (_bound(v.lower), _bound(v.upper)) for k, v in graph.ranges.items()})


def _via_torch(monkeypatch, path, **kwargs):
    """find_gemms with the JSON reader failing: torch.export.load is used."""
    def unreadable(_path):
        raise model_mod._ArchiveUnreadable("forced")

    with monkeypatch.context() as patch:
        patch.setattr(model_mod, "_read_export_archive", unreadable)
        return find_gemms(path, **kwargs)


def _outcome(call):
    try:
        return ("ok", call())
    except UserError as exc:
        return ("error", str(exc))


# -- the two paths agree ------------------------------------------------------------------

@pytest.mark.parametrize("name", JSON_READABLE)
def test_json_reader_matches_torch_export_load(archives, name):
    path = archives[name]
    from_json = model_mod._read_export_archive(path)  # must not fall back
    from_torch = model_mod._load_export_program(path)
    assert _graph_summary(from_json) == _graph_summary(from_torch)
    assert from_json.raws  # every case has a matmul-like node


@pytest.mark.parametrize("name", list(CASES))
def test_find_gemms_same_both_ways(archives, name, monkeypatch):
    path = archives[name]
    graph = model_mod._load_export_program(path)
    symbols = sorted({s.name for r in graph.raws if isinstance(r, model_mod._Raw)
                      for e in (r.m, r.n, r.k, r.b) for s in e.free_symbols})
    calls = [dict(device="cpu"), dict(device="cuda", allow_tf32=True)]
    if symbols:
        calls.append(dict(device="cpu", hints={symbols[0]: [3, 5]}))
    calls.append(dict(device="cpu", hints={"nope": [3]}))  # an error either way
    calls += [dict(device="cpu", **kw) for kw in EXTRA_CALLS.get(name, [])]
    for kwargs in calls:
        direct = _outcome(lambda: find_gemms(path, **kwargs))
        fallback = _outcome(lambda: _via_torch(monkeypatch, path, **kwargs))
        assert direct == fallback, kwargs


def test_expected_problems_from_json(archives):
    """A few exact lists, read from the JSON (no torch.export.load)."""
    found = find_gemms(archives["linears"], device="cpu")
    assert [(f.problem.op, f.problem.m, f.problem.n, f.problem.k, f.problem.layout, f.problem.bias)
            for f in found] == [("addmm", 6, 64, 32, "nt", "n"), ("mm", 6, 16, 64, "nt", None)]
    dyn = find_gemms(archives["dynamic"], device="cpu", hints={"x.0": [2], "x.1": [5]})
    assert [(f.problem.op, f.problem.m, f.problem.n, f.problem.k, f.problem.b) for f in dyn] == [
        ("addmm", 10, 32, 16, 1), ("mm", 10, 24, 16, 1), ("mm", 20, 24, 16, 1),
        ("bmm", 5, 5, 16, 2), ("mm", 8, 8, 16, 1)]
    with pytest.raises(UserError, match=r"no matmuls.*\(only matmuls in int64, which"):
        find_gemms(archives["int_only"], device="cpu")
    mixed = find_gemms(archives["mixed"], device="cpu")
    assert [(f.problem.m, f.problem.dtype) for f in mixed] == [(4, "float32")]


def test_unbounded_dim_defaults(archives):
    graph = model_mod._read_export_archive(archives["dynamic"])
    bounds = sorted((_bound(r.lower), _bound(r.upper)) for r in graph.ranges.values())
    assert bounds == [(1, 1024), (2, "inf")]


# -- falling back ---------------------------------------------------------------------------

def _rewrite(src: Path, dst: Path, edit) -> None:
    """Copy an archive, passing models/model.json's text through edit(text)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("/models/model.json"):
                data = edit(data.decode()).encode()
            zout.writestr(info, data)


def test_floordiv_size_falls_back(archives):
    path = archives["step"]
    with pytest.raises(model_mod._ArchiveUnreadable, match="FloorDiv"):
        model_mod._read_export_archive(path)
    found = find_gemms(path, device="cpu", hints={"x.0": [7, 10]})
    assert [(f.problem.m, f.problem.k) for f in found] == [(4, 16), (5, 16)]


def test_schema_version_the_reader_does_not_know_falls_back(archives, tmp_path, monkeypatch):
    # torch accepts schema version 0.0 (no check); the JSON reader knows only 8.x
    src = archives["dynamic"]
    dst = tmp_path / "dynamic_v0.pt2"

    def to_v0(text):
        doc = json.loads(text)
        doc["schema_version"] = {"major": 0, "minor": 0}
        return json.dumps(doc)

    _rewrite(src, dst, to_v0)
    with pytest.raises(model_mod._ArchiveUnreadable, match="schema version"):
        model_mod._read_export_archive(dst)
    loads = []
    real = model_mod._load_export_program
    monkeypatch.setattr(model_mod, "_load_export_program", lambda p: loads.append(p) or real(p))
    assert find_gemms(dst, device="cpu") == find_gemms(src, device="cpu")
    assert loads == [dst]


def test_reader_failure_falls_back(archives, monkeypatch):
    path = archives["batched"]
    expected = find_gemms(path, device="cpu")

    def broken(_path):
        raise KeyError("graph_module")  # any exception, not only _ArchiveUnreadable

    monkeypatch.setattr(model_mod, "_read_export_archive", broken)
    assert find_gemms(path, device="cpu") == expected


def _schema_99(text):
    doc = json.loads(text)
    doc["schema_version"]["major"] = 99  # neither the reader nor torch knows it
    return json.dumps(doc)


@pytest.mark.parametrize("edit", [lambda text: text[: len(text) // 2], _schema_99],
                         ids=["truncated", "schema_99"])
def test_corrupt_model_json_is_a_user_error(archives, tmp_path, edit):
    dst = tmp_path / "broken.pt2"
    _rewrite(archives["linears"], dst, edit)
    with pytest.raises(UserError, match="cannot load exported program"):
        find_gemms(dst, device="cpu")


# -- no torch import ------------------------------------------------------------------------

def test_reader_imports_no_torch(archives):
    code = (
        "import json, sys\n"
        "from autotune_cli.model import find_gemms\n"
        f"found = find_gemms({str(archives['dynamic'])!r}, device='cpu', hints={{'x.0': [2]}})\n"
        "print(json.dumps({'n': len(found), 'mods': sorted(m for m in sys.modules"
        " if m == 'torch' or m.startswith('torch.'))}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=str(REPO), env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["n"] >= 4
    assert doc["mods"] == []  # neither torch nor torch._dynamo / torch._export
