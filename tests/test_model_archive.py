"""The torch-free reader of torch.export archives (autotune_cli/model/export_archive.py).

Every program saved here is read both ways, from the archive's JSON and, as a reference,
through torch.export.load (`_torch_graph`, only on the archives these tests wrote), and both
must give the same operands, inputs, ranges and found GEMMs. An archive the reader does not
understand is refused in one line: it never reaches torch.export.load, which unpickles (a
crafted weight runs code), and an entry that inflates past the cap is never inflated.
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

from autotune_cli.errors import UserError  # noqa: E402
from autotune_cli.model import dims, export_archive, find, find_gemms  # noqa: E402
from autotune_cli.model.classify import MATMUL_OPS, MatmulCall, Operand, classify_call, sym  # noqa: E402
from autotune_cli.model.export_expr import ArchiveUnreadable, ExprReader  # noqa: E402
from autotune_cli.model.export_program import ExportGraph  # noqa: E402

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
# "step" holds torch's FloorDiv, which the reader stands for with its own function: the same
# values once concrete (test_find_gemms_same_both_ways), not the same sympy objects
SAME_EXPRESSIONS = [name for name in CASES if name != "step"]

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


def _graph_summary(graph: ExportGraph):
    """Comparable form of an ExportGraph (sizes as sympy, ranges as bounds)."""
    return (graph.raws,
            [(name, tuple(sym(s) for s in sizes)) for name, sizes in graph.inputs],
            {k: (_bound(v.lower), _bound(v.upper)) for k, v in graph.ranges.items()})


def _fake_operand(value):
    if not isinstance(value, torch.Tensor):
        return None
    return Operand(tuple(sym(s) for s in value.shape),
                   tuple(sym(s) for s in value.stride()),
                   str(value.dtype).removeprefix("torch."))


def _torch_graph(path) -> ExportGraph:
    """The reference reading: torch.export.load, operands from node.meta["val"] (fake
    tensors), kwargs placed by the op's schema. Only for archives these tests wrote."""
    ep = torch.export.load(str(path))
    raws = []
    for node in ep.graph.nodes:
        if node.op != "call_function" or not hasattr(node.target, "_schema"):
            continue
        name = node.target._schema.name
        if name not in MATMUL_OPS:
            continue
        values = list(node.args)
        names = [a.name for a in node.target._schema.arguments]
        for key, value in node.kwargs.items():
            if key in names:
                i = names.index(key)
                values.extend([None] * (i + 1 - len(values)))
                values[i] = value
        args = [_fake_operand(v.meta.get("val")) if isinstance(v, torch.fx.Node) else None
                for v in values]
        raw = classify_call(name, args)
        if raw is not None:
            raws.append(raw)
    user = set(ep.graph_signature.user_inputs)
    inputs = [(n.name, tuple(n.meta["val"].shape)) for n in ep.graph.nodes
              if n.op == "placeholder" and n.name in user
              and isinstance(n.meta.get("val"), torch.Tensor)]
    ranges = {str(sym): vr for sym, vr in ep.range_constraints.items()}
    return ExportGraph(raws, inputs, ranges)


def _via_torch(monkeypatch, path, **kwargs):
    """find_gemms on the reference reading (torch.export.load) instead of the reader."""
    with monkeypatch.context() as patch:
        patch.setattr(find, "read_export", _torch_graph)
        return find_gemms(path, **kwargs)


def _outcome(call):
    try:
        return ("ok", call())
    except UserError as exc:
        return ("error", str(exc))


# -- the two paths agree ------------------------------------------------------------------

@pytest.mark.parametrize("name", SAME_EXPRESSIONS)
def test_json_reader_matches_torch_export_load(archives, name):
    path = archives[name]
    from_json = export_archive.read_export_archive(path)
    from_torch = _torch_graph(path)
    assert _graph_summary(from_json) == _graph_summary(from_torch)
    assert from_json.raws  # every case has a matmul-like node


@pytest.mark.parametrize("name", list(CASES))
def test_find_gemms_same_both_ways(archives, name, monkeypatch):
    path = archives[name]
    graph = _torch_graph(path)
    symbols = sorted({s.name for r in graph.raws if isinstance(r, MatmulCall)
                      for e in (r.m, r.n, r.k, r.b) for s in e.free_symbols})
    calls = [dict(device="cpu"), dict(device="cuda", allow_tf32=True)]
    if symbols:
        calls.append(dict(device="cpu", hints={symbols[0]: [3, 5]}))
    calls.append(dict(device="cpu", hints={"nope": [3]}))  # an error either way
    calls += [dict(device="cpu", **kw) for kw in EXTRA_CALLS.get(name, [])]
    for kwargs in calls:
        direct = _outcome(lambda kwargs=kwargs: find_gemms(path, **kwargs))
        reference = _outcome(lambda kwargs=kwargs: _via_torch(monkeypatch, path, **kwargs))
        assert direct == reference, kwargs


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
    graph = export_archive.read_export_archive(archives["dynamic"])
    bounds = sorted((_bound(r.lower), _bound(r.upper)) for r in graph.ranges.values())
    assert bounds == [(1, 1024), (2, "inf")]


# -- what the reader does not understand is refused ---------------------------------------

def _rewrite(src: Path, dst: Path, edit, replace=None) -> None:
    """Copy an archive, passing models/model.json's text through edit(text); entries whose
    name ends with a key of `replace` get that value as their bytes."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("/models/model.json"):
                data = edit(data.decode()).encode()
            for suffix, value in (replace or {}).items():
                if info.filename.endswith(suffix):
                    data = value
            zout.writestr(info, data)


@pytest.fixture
def no_torch_load(monkeypatch):
    """torch.export.load and torch.load fail the test if anything calls them."""
    def refuse(*args, **kwargs):
        raise AssertionError("a loader that unpickles was called")

    monkeypatch.setattr(torch.export, "load", refuse)
    monkeypatch.setattr(torch, "load", refuse)


def test_floordiv_size_read(archives, no_torch_load):
    path = archives["step"]
    graph = export_archive.read_export_archive(path)
    assert any("FloorDiv" in str(r.m) for r in graph.raws)
    found = find_gemms(path, device="cpu", hints={"x.0": [7, 10]})
    assert [(f.problem.m, f.problem.k) for f in found] == [(4, 16), (5, 16)]


def _schema(major):
    def edit(text):
        doc = json.loads(text)
        doc["schema_version"] = {"major": major, "minor": 0}
        return json.dumps(doc)
    return edit


def _odd_target(text):
    doc = json.loads(text)
    for node in doc["graph_module"]["graph"]["nodes"]:
        if node["target"].startswith("torch.ops.aten.linear"):
            node["target"] = "torch.ops.aten.linear"  # no overload: a shape the reader refuses
    return json.dumps(doc)


@pytest.mark.parametrize("edit, what", [
    (_schema(0), "schema version 0.0"),  # torch.export.load reads 0.0 (it does not check)
    (_schema(99), "schema version 99.0"),
    (_odd_target, "target 'torch.ops.aten.linear' not understood"),
    (lambda text: text[: len(text) // 2], "unexpected content (JSONDecodeError"),
    (lambda text: "[" * 100000 + "]" * 100000, "nested too deeply"),
], ids=["schema_0", "schema_99", "odd_target", "truncated", "deep"])
def test_what_the_reader_does_not_understand_is_refused(archives, tmp_path, no_torch_load,
                                                        edit, what):
    dst = tmp_path / "odd.pt2"
    _rewrite(archives["dynamic"], dst, edit)
    with pytest.raises(UserError, match="cannot read exported program") as caught:
        find_gemms(dst, device="cpu")
    message = str(caught.value)
    assert what in message and "never loads them with torch" in message
    assert "\n" not in message


@pytest.mark.parametrize("text, what", [
    ("Pow(Symbol('s0', positive=True, integer=True), Integer(1000000000000))", "power"),
    ("Integer(" + "9" * 30 + ")", "integer out of range"),
    ("Integer(99999999999999999999)", "integer out of range"),
    ("9**9**9**9", "not understood"),  # str() form: sympify would compute it
    ("s0*" + "9" * 40, "not understood"),
    ("FloorDiv(Symbol('s0', integer=True), Integer(2), Integer(3))", "FloorDiv not understood"),
    ("Foo(Symbol('s0', integer=True))", "Foo not understood"),
])
def test_expressions_that_would_cost_or_run_are_refused(text, what):
    with pytest.raises(ArchiveUnreadable, match=what):
        ExprReader().expr(text)


def test_torch_integer_functions_evaluate():
    reader = ExprReader()
    s0 = "Symbol('s0', positive=True, integer=True)"
    cases = {f"FloorDiv(Add({s0}, Integer(1)), Integer(2))": 5,
             f"CeilDiv({s0}, Integer(4))": 3, f"Mod({s0}, Integer(4))": 1,
             f"PythonMod({s0}, Integer(3))": 0, f"CleanDiv({s0}, Integer(3))": 3}
    for text, value in cases.items():
        assert dims._evaluate(reader.expr(text), {"s0": 9}) == value, text


def test_combinations_are_bounded(archives):
    # two dims, value lists of different lengths: their product, past the bound, is refused
    with pytest.raises(UserError, match=r"make 4032 combinations \((64 x 63|63 x 64)\); at most 1024"):
        find_gemms(archives["dynamic"], device="cpu",
                   hints={"x.0": list(range(1, 65)), "x.1": list(range(2, 65))})


def test_an_input_shape_binds_a_derived_dim(archives):
    """x [2*half, 16]: --input-shape 24x16 reads the program at half = 12 (not at the
    defaults); a size no whole half gives (21) is refused, naming the dim and its form."""
    bound = find_gemms(archives["halves"], device="cpu", input_shapes=[((24, 16), "float32")])
    assert [(f.problem.m, tuple(f.hint.values())) for f in bound] == [(12, (12,)), (48, (12,))]
    with pytest.raises(UserError, match=r"input 'x' dim 0 is 2\*s\w+, a multiple of 2; --input-shape gives 21"):
        find_gemms(archives["halves"], device="cpu", input_shapes=[((21, 16), "float32")])


def test_reader_failure_is_a_user_error(archives, monkeypatch, no_torch_load):
    def broken(_path):
        raise KeyError("graph_module\x1b[2J")  # any exception, not only ArchiveUnreadable

    monkeypatch.setattr(export_archive, "read_export_archive", broken)
    with pytest.raises(UserError, match=r"unexpected content \(KeyError") as caught:
        find_gemms(archives["batched"], device="cpu")
    assert "\x1b" not in str(caught.value)  # the file's text is escaped, not printed raw


# A weight whose unpickling creates a file: what torch.export.load does with an entry marked
# use_pickle (torch.load with weights_only=False).

class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _crafted(src: Path, dst: Path, marker: Path, edit) -> None:
    """src with weight_0 replaced by a pickle that creates `marker` when loaded, marked
    use_pickle, and models/model.json passed through edit."""
    import pickle

    with zipfile.ZipFile(src) as zf:
        name = next(n for n in zf.namelist() if n.endswith("model_weights_config.json"))
        config = json.loads(zf.read(name))
    for entry in config["config"].values():
        entry["use_pickle"] = True
    _rewrite(src, dst, edit, {"/weights/weight_0": pickle.dumps(_Payload(str(marker))),
                              "/model_weights_config.json": json.dumps(config).encode()})


def test_crafted_pickle_payload_works_as_built(archives, tmp_path):
    """The crafted archive is a real threat: torch.export.load runs its payload."""
    marker = tmp_path / "ran"
    dst = tmp_path / "crafted.pt2"
    _crafted(archives["linears"], dst, marker, _schema(0))
    try:
        torch.export.load(str(dst))
    except Exception:  # noqa: BLE001 - the payload is not a tensor; it ran before that
        pass
    assert marker.exists()


@pytest.mark.parametrize("edit", [_schema(0), _schema(9), _odd_target],
                         ids=["schema_0", "schema_9", "odd_target"])
def test_crafted_pickle_never_runs(archives, tmp_path, edit):
    """`autotune model --plan` on a crafted .pt2: one line, exit 2, the payload never ran."""
    marker = tmp_path / "ran"
    dst = tmp_path / "crafted.pt2"
    _crafted(archives["linears"], dst, marker, edit)
    proc = subprocess.run(
        [sys.executable, "-m", "autotune_cli", "model", str(dst), "--plan", "--device", "cpu"],
        capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
        env={**os.environ, "PYTHONPATH": str(REPO), "AUTOTUNE_CACHE_DIR": str(tmp_path / "c")})
    assert not marker.exists()
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune: error: cannot read exported"), lines
    assert proc.stdout == ""


# -- zip bombs ---------------------------------------------------------------------------------

def _bomb(src: Path, dst: Path, size: int) -> None:
    """src with models/model.json replaced by `size` bytes of one character, deflated (a
    few hundred KB for 128 MiB), written in chunks so that the test's memory stays small."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            if info.filename.endswith("/models/model.json"):
                with zout.open(info.filename, "w") as out:
                    block = b" " * (1 << 20)
                    left = size
                    while left > 0:
                        out.write(block[:left])
                        left -= len(block)
            else:
                zout.writestr(info.filename, zin.read(info.filename))


def _declare_size(path: Path, member: str, size: int) -> None:
    """Overwrite a member's uncompressed size in the central directory (the size zipfile
    trusts): an archive that lies about what it inflates to."""
    data = bytearray(path.read_bytes())
    name = member.encode()
    at = data.find(b"PK\x01\x02")
    while at != -1:
        name_len = int.from_bytes(data[at + 28:at + 30], "little")
        if data[at + 46:at + 46 + name_len] == name:
            data[at + 24:at + 28] = size.to_bytes(4, "little")
            break
        at = data.find(b"PK\x01\x02", at + 4)
    else:
        raise AssertionError(f"{member} not in the central directory")
    path.write_bytes(bytes(data))


def test_zip_bomb_refused_before_inflating(archives, tmp_path):
    """An entry past the cap, declared honestly: refused from its declared size, in one line
    and exit 2, by a process whose memory never nears the entry's size."""
    dst = tmp_path / "bomb.pt2"
    _bomb(archives["linears"], dst, export_archive.MAX_PROGRAM_BYTES + (1 << 20))
    assert dst.stat().st_size < 4 << 20
    code = (
        "import json, resource, subprocess, sys\n"
        "proc = subprocess.run([sys.executable, '-m', 'autotune_cli', 'model', sys.argv[1],"
        " '--plan', '--device', 'cpu'], capture_output=True, text=True)\n"
        "print(json.dumps({'rc': proc.returncode, 'err': proc.stderr, 'out': proc.stdout,"
        " 'maxrss_kb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))\n")
    proc = subprocess.run([sys.executable, "-c", code, str(dst)], capture_output=True, text=True,
                          timeout=300, cwd=str(tmp_path),
                          env={**os.environ, "PYTHONPATH": str(REPO),
                               "AUTOTUNE_CACHE_DIR": str(tmp_path / "c")})
    doc = json.loads(proc.stdout)
    assert doc["rc"] == 2, doc["err"]
    lines = doc["err"].strip().splitlines()
    assert len(lines) == 1 and "inflates to" in lines[0] and "more than the" in lines[0], lines
    assert doc["out"] == ""
    assert doc["maxrss_kb"] * 1024 < export_archive.MAX_PROGRAM_BYTES


def test_zip_bomb_that_lies_about_its_size(archives, tmp_path, monkeypatch):
    """Declared small, inflating large: zipfile stops at the declared size and finds the
    data corrupt; one line, and never more than the declared size inflated."""
    dst = tmp_path / "liar.pt2"
    _bomb(archives["linears"], dst, 8 << 20)
    with zipfile.ZipFile(dst) as zf:
        member = next(n for n in zf.namelist() if n.endswith("/models/model.json"))
    _declare_size(dst, member, 1000)
    with zipfile.ZipFile(dst) as zf:
        assert zf.getinfo(member).file_size == 1000
    with pytest.raises(UserError, match=r"cannot read exported program.*BadZipFile"):
        find_gemms(dst, device="cpu")


def test_bytes_read_are_capped_whatever_the_entry_declares(archives, monkeypatch):
    """The cap holds on the bytes a stream gives, not only on the declared size."""
    import io

    with zipfile.ZipFile(archives["linears"]) as zf:
        member = next(n for n in zf.namelist() if n.endswith("/models/model.json"))
        assert export_archive.read_entry(zf, member, 1 << 20) == zf.read(member)
        cap = zf.getinfo(member).file_size + 100  # the declared size is within the cap
        monkeypatch.setattr(zf, "open", lambda info: io.BytesIO(b" " * (cap + 5000)))
        with pytest.raises(ArchiveUnreadable, match=f"more than the {cap} bytes"):
            export_archive.read_entry(zf, member, cap)


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


def test_an_aotinductor_package_is_named_as_one(tmp_path):
    """A .pt2 that aoti_compile_and_package wrote holds compiled code and no program (its
    layout as torch writes it): the error says what it is and what to give instead."""
    path = tmp_path / "aoti.pt2"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("aoti/data/aotinductor/model/c5q4.wrapper.cpp", "// compiled")
        zf.writestr("aoti/archive_format", "pt2")
        zf.writestr("aoti/archive_version", "0")
    with pytest.raises(UserError, match=r"it is an AOTInductor package .*give the torch.export.save file"):
        find_gemms(path, device="cpu")
