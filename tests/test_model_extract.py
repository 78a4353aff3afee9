"""Reading the matmuls of saved models (autotune_cli.model), on the CPU.

Each model is built here, saved as TorchScript (torch.jit.trace + save) and as a
torch.export program, and the exact list of GEMM problems found is checked.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from autotune_cli.errors import UserError  # noqa: E402
from autotune_cli.model import (  # noqa: E402
    FoundGemm,
    find_gemms,
    parse_hints,
    parse_input_shape,
    plan_flops_share,
)


def rows(found: list[FoundGemm]) -> list[tuple]:
    """(op, m, n, k, b, dtype, layout, bias, count) for each found problem, in order."""
    return [(f.problem.op, f.problem.m, f.problem.n, f.problem.k, f.problem.b, f.problem.dtype,
             f.problem.layout, f.problem.bias, f.count) for f in found]


def save_both(model: nn.Module, inputs: tuple, folder, name: str, dynamic_shapes=None):
    model = model.eval()
    ts = folder / f"{name}.pt"
    pt2 = folder / f"{name}.pt2"
    with torch.no_grad():
        torch.jit.save(torch.jit.trace(model, inputs), str(ts))
    torch.export.save(torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes), str(pt2))
    return ts, pt2


def shapes_of(inputs: tuple) -> list[tuple[tuple[int, ...], str]]:
    return [(tuple(t.shape), str(t.dtype).removeprefix("torch.")) for t in inputs]


# -- models -------------------------------------------------------------------------------

class MLPBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(64, 128)
        self.l2 = nn.Linear(128, 128)
        self.l3 = nn.Linear(128, 32)

    def forward(self, x):
        h = torch.relu(self.l1(x))
        h = torch.relu(self.l2(h))
        h = torch.relu(self.l2(h))  # the same layer again: count 2
        return self.l3(h)


class MLPNoBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(32, 64, bias=False)
        self.down = nn.Linear(64, 32, bias=False)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Attention(nn.Module):
    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.o = nn.Linear(d, d)

    def forward(self, x):
        bsz, seq, d = x.shape
        q, k, v = self.q(x), self.k(x), self.v(x)
        s1 = torch.bmm(q, k.transpose(1, 2))              # bmm, B transposed
        s2 = torch.matmul(q, k.transpose(1, 2))           # the same problem through matmul
        o = torch.matmul(torch.softmax(s1 + s2, -1), v)   # 3-D @ 3-D -> bmm nn
        qh = q.view(bsz, seq, self.heads, d // self.heads).transpose(1, 2)
        kh = k.view(bsz, seq, self.heads, d // self.heads).transpose(1, 2)
        vh = v.view(bsz, seq, self.heads, d // self.heads).transpose(1, 2)
        p = torch.softmax(qh @ kh.transpose(-2, -1), -1)  # 4-D: batch dims don't merge -> copies
        oh = p @ vh
        fused = F.scaled_dot_product_attention(qh, kh, vh)  # a fused kernel: not a GEMM
        heads = (oh + fused).transpose(1, 2).reshape(bsz, seq, d)
        return self.o(o + heads)


class Transposed(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 32))
        self.a = nn.Parameter(torch.randn(32, 24))
        self.c = nn.Parameter(torch.randn(4, 16))
        self.p = nn.Parameter(torch.randn(2, 5))

    def forward(self, x):
        y = x @ self.w.t()                        # mm nt
        z = x.t() @ y                             # mm tn
        u = torch.mm(self.a.t(), self.w.t())      # mm tt
        v = torch.addmm(self.c, x, self.w.t())    # addmm with an [m, n] bias
        x3 = x.view(2, 2, 32).transpose(1, 2)     # [2, 32, 2]: rows don't fold, so aten
        # copies it and runs one mm (the 2-D weight requires grad)
        r = x3 @ self.p
        return y.sum() + z.sum() + u.sum() + v.sum() + r.sum()


class Dynamic(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 32)
        self.a = nn.Parameter(torch.randn(8, 16))
        self.b = nn.Parameter(torch.randn(16, 8))

    def forward(self, x):
        return self.lin(x), torch.mm(self.a, self.b)


class NoMatmul(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2


class IntMatmul(nn.Module):
    def forward(self, x):
        return x @ x.t()


# -- fixtures: save each model once ----------------------------------------------------------

@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("models")
    out = {}
    cases = {
        "mlp_bias": (MLPBias(), (torch.randn(2, 3, 64),)),
        "mlp_nobias": (MLPNoBias().to(torch.bfloat16), (torch.randn(8, 32, dtype=torch.bfloat16),)),
        "attention": (Attention(), (torch.randn(2, 8, 16),)),
        "transposed": (Transposed().half(), (torch.randn(4, 32, dtype=torch.float16),)),
    }
    for name, (model, inputs) in cases.items():
        out[name] = (*save_both(model, inputs, folder, name), shapes_of(inputs))
    batch = torch.export.Dim("batch", min=1, max=1024)
    dyn_in = (torch.randn(3, 4, 16),)
    out["dynamic"] = (*save_both(Dynamic(), dyn_in, folder, "dynamic", ({0: batch},)),
                      shapes_of(dyn_in))
    out["nomatmul"] = (*save_both(NoMatmul(), (torch.randn(4, 4),), folder, "nomatmul"), None)
    ints = (torch.ones(4, 4, dtype=torch.int64),)
    out["int"] = (*save_both(IntMatmul(), ints, folder, "int"), shapes_of(ints))
    return out


def both(saved, name, **kwargs) -> tuple[list[FoundGemm], list[FoundGemm]]:
    ts, pt2, shapes = saved[name]
    return find_gemms(ts, trust_torchscript=True, input_shapes=shapes, **kwargs), find_gemms(pt2, **kwargs)


# -- exact problem lists ------------------------------------------------------------------------

def test_mlp_with_bias(saved):
    for found in both(saved, "mlp_bias"):
        assert rows(found) == [
            ("addmm", 6, 128, 64, 1, "float32", "nt", "n", 1),
            ("addmm", 6, 128, 128, 1, "float32", "nt", "n", 2),
            ("addmm", 6, 32, 128, 1, "float32", "nt", "n", 1),
        ]
        assert all(f.sources == ("aten.linear",) and f.hint is None for f in found)
        assert all(f.problem.device == "cuda" and not f.problem.allow_tf32 for f in found)


def test_mlp_without_bias_bf16(saved):
    for found in both(saved, "mlp_nobias", device="cpu", allow_tf32=True):
        assert rows(found) == [
            ("mm", 8, 64, 32, 1, "bfloat16", "nt", None, 1),
            ("mm", 8, 32, 64, 1, "bfloat16", "nt", None, 1),
        ]
        # tf32 applies to float32 only
        assert all(f.problem.device == "cpu" and not f.problem.allow_tf32 for f in found)


def test_attention_block(saved):
    for found in both(saved, "attention", allow_tf32=True):
        assert rows(found) == [
            ("mm", 16, 16, 16, 1, "float32", "nt", None, 3),   # q, k, v projections
            ("bmm", 8, 8, 16, 2, "float32", "nt", None, 2),    # q @ k^T via bmm and matmul
            ("bmm", 8, 16, 8, 2, "float32", "nn", None, 1),    # softmax @ v
            ("bmm", 8, 8, 8, 4, "float32", "nn", None, 2),     # per-head scores and output
            ("addmm", 16, 16, 16, 1, "float32", "nt", "n", 1),  # output projection
        ]
        assert found[1].sources == ("aten.bmm", "aten.matmul")
        assert found[3].sources == ("aten.matmul",)
        assert all(f.problem.allow_tf32 for f in found)


def test_groups_list_the_one_gemm_of_linears_of_one_input(saved, tmp_path):
    """--groups: q, k and v read one input, so their one GEMM (what autotune_cli.compile may run
    in their place) follows the list of an exported program, once per forward; o reads
    another. A TorchScript run names no inputs: its list is unchanged, with a note."""
    ts, pt2, shapes = saved["attention"]
    plain = find_gemms(pt2)
    found = find_gemms(pt2, groups=True)
    assert rows(found) == rows(plain) + [("mm", 16, 48, 16, 1, "float32", "nt", None, 1)]
    assert found[-1].sources == ("grouped linears",)
    shares = plan_flops_share(found)
    assert abs(sum(shares[:-1]) - 1) < 1e-9 and abs(shares[-1] - shares[0]) < 1e-9  # row 0: q, k and v
    assert rows(find_gemms(saved["mlp_bias"][1], groups=True)) == rows(find_gemms(saved["mlp_bias"][1]))
    notes = []
    assert rows(find_gemms(ts, trust_torchscript=True, input_shapes=shapes, groups=True, notes=notes)) == rows(
        find_gemms(ts, trust_torchscript=True, input_shapes=shapes))
    assert any("--groups reads a torch.export program" in note for note in notes)


class QKWide(nn.Module):
    """q and k of one input, and a linear whose problem is their one GEMM's."""

    def __init__(self):
        super().__init__()
        self.q, self.k = nn.Linear(16, 16, bias=False), nn.Linear(16, 16, bias=False)
        self.wide = nn.Linear(16, 32, bias=False)

    def forward(self, x):
        return self.wide(torch.cat([self.q(x), self.k(x)], -1)[..., :16].relu())


def test_a_group_stays_a_row_of_its_own_and_a_dynamic_m_groups_at_each_value(saved, tmp_path):
    """The group's one GEMM is no call of the model: where a linear poses the same problem the
    two rows stay apart (the linear's count and share unchanged); a dynamic M makes a group
    at each value M is read at (the compile groups a graph of static shapes: each M it meets)."""
    pt2 = tmp_path / "qkwide.pt2"
    torch.export.save(torch.export.export(QKWide(), (torch.randn(8, 16),)), str(pt2))
    found = find_gemms(pt2, groups=True)
    assert [(f.problem.describe(), f.count, f.sources) for f in found] == [
        ("mm 8x16x16 float32 nt", 2, ("aten.linear",)), ("mm 8x32x16 float32 nt", 1, ("aten.linear",)),
        ("mm 8x32x16 float32 nt", 1, ("grouped linears",))]
    shares = plan_flops_share(found)
    assert abs(sum(shares[:2]) - 1) < 1e-9 and abs(shares[2] - shares[0]) < 1e-9
    dynamic = tmp_path / "qkwide_dyn.pt2"
    torch.export.save(torch.export.export(QKWide(), (torch.randn(8, 16),),
                                          dynamic_shapes=({0: torch.export.Dim("tokens", max=256)},)), str(dynamic))
    grouped = [(f.problem.describe(), f.hint) for f in find_gemms(dynamic, groups=True, hints={"x.0": [4, 64]})
               if f.group]
    assert grouped == [("mm 4x32x16 float32 nt", {"x.0": 4}), ("mm 64x32x16 float32 nt", {"x.0": 64})]


class OneLayerTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16, bias=False)

    def forward(self, x):
        return self.fc(x) + self.fc(x)


def test_groups_need_distinct_weights_and_a_program_with_linears(tmp_path):
    """One layer run twice on one input is no group (the compile would not make one); a
    decomposed program holds no aten.linear, and --groups says so."""
    x = (torch.randn(8, 16),)
    twice = tmp_path / "twice.pt2"
    torch.export.save(torch.export.export(OneLayerTwice(), x), str(twice))
    assert rows(find_gemms(twice, groups=True)) == rows(find_gemms(twice))
    decomposed = tmp_path / "decomposed.pt2"
    torch.export.save(torch.export.export(QKWide(), x).run_decompositions(), str(decomposed))
    notes = []
    assert rows(find_gemms(decomposed, groups=True, notes=notes)) == rows(find_gemms(decomposed))
    assert any("--groups found no aten.linear" in note for note in notes)


class BufferWeights(nn.Module):
    """Two linears of one input whose weights are buffers, two whose weights are Parameters."""

    def __init__(self):
        super().__init__()
        self.register_buffer("wa", torch.randn(16, 16))
        self.register_buffer("wb", torch.randn(32, 16))
        self.pa, self.pb = nn.Linear(16, 16, bias=False), nn.Linear(16, 32, bias=False)

    def forward(self, x, y):
        return F.linear(x, self.wa).sum() + F.linear(x, self.wb).sum() + self.pa(y).sum() + self.pb(y).sum()


def test_groups_are_linears_of_parameters_alone(tmp_path):
    """A compile groups Parameters alone (it moves them side by side): buffers' linears are
    listed as calls, never as a group, which would be tuned for nothing."""
    path = tmp_path / "buffers.pt2"
    torch.export.save(torch.export.export(BufferWeights(), (torch.randn(8, 16), torch.randn(4, 16))), str(path))
    found = find_gemms(path, groups=True)
    assert [(f.problem.describe(), f.sources) for f in found if f.sources == ("grouped linears",)] == [
        ("mm 4x48x16 float32 nt", ("grouped linears",))]
    assert len([f for f in found if f.sources != ("grouped linears",)]) == 4


def test_explicit_transposes_fp16(saved):
    for found in both(saved, "transposed"):
        assert rows(found) == [
            ("mm", 4, 16, 32, 1, "float16", "nt", None, 1),
            ("mm", 32, 16, 4, 1, "float16", "tn", None, 1),
            ("mm", 24, 16, 32, 1, "float16", "tt", None, 1),
            ("addmm", 4, 16, 32, 1, "float16", "nt", "mn", 1),
            ("mm", 64, 5, 2, 1, "float16", "nn", None, 1),
        ]
        assert [f.sources for f in found] == [
            ("aten.matmul",), ("aten.matmul",), ("aten.mm",), ("aten.addmm",), ("aten.matmul",)]


def test_dynamic_batch_defaults(saved):
    ts, pt2, shapes = saved["dynamic"]
    found = find_gemms(pt2)
    (sym,) = {name for f in found if f.hint for name in f.hint}
    # Dim(min=1, max=1024): defaults {1, 32, 1024}; linear flattens [B, 4, 16] -> M = 4B
    assert rows(found) == [
        ("addmm", 4, 32, 16, 1, "float32", "nt", "n", 1),
        ("mm", 8, 8, 16, 1, "float32", "nn", None, 1),  # static: listed once
        ("addmm", 128, 32, 16, 1, "float32", "nt", "n", 1),
        ("addmm", 4096, 32, 16, 1, "float32", "nt", "n", 1),
    ]
    assert [f.hint for f in found] == [{sym: 1}, None, {sym: 32}, {sym: 1024}]

    # TorchScript: sizes come from the example input
    assert rows(find_gemms(ts, trust_torchscript=True, input_shapes=shapes)) == [
        ("addmm", 12, 32, 16, 1, "float32", "nt", "n", 1),
        ("mm", 8, 8, 16, 1, "float32", "nn", None, 1),
    ]


class Flatten2(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 8, bias=False)

    def forward(self, x):  # x [B, S, 16]: M = B * S
        return self.lin(x)


def test_unbounded_dims_of_one_call_share_the_default_cap(tmp_path):
    """Two unbounded dims in one call's M (batch x sequence): their defaults are capped so
    that the product stays within one dim's largest default (4096), not 4096 x 4096; a dim
    alone in its calls keeps 4096."""
    pt2 = tmp_path / "flatten2.pt2"
    dims = ({0: torch.export.Dim("batch"), 1: torch.export.Dim("seq")},)
    torch.export.save(torch.export.export(Flatten2().eval(), (torch.randn(2, 8, 16),), dynamic_shapes=dims),
                      str(pt2))
    found = find_gemms(pt2)
    assert [f.problem.m for f in found] == [1, 64, 4096]
    assert [sorted(f.hint.values()) for f in found] == [[1, 1], [8, 8], [64, 64]]
    # one dim hinted: the other, the one defaulted dim of the call, keeps 4096
    hinted = find_gemms(pt2, hints={"x.0": [2]})
    assert [f.problem.m for f in hinted] == [2, 2 * 64, 2 * 4096]


def test_dynamic_batch_hints(saved):
    _, pt2, _ = saved["dynamic"]
    by_alias = find_gemms(pt2, hints={"x.0": [2, 8]})
    assert rows(by_alias) == [
        ("addmm", 8, 32, 16, 1, "float32", "nt", "n", 1),
        ("mm", 8, 8, 16, 1, "float32", "nn", None, 1),
        ("addmm", 32, 32, 16, 1, "float32", "nt", "n", 1),
    ]
    # each problem's hint names the dim as the --hint did
    assert [f.hint for f in by_alias] == [{"x.0": 2}, None, {"x.0": 8}]
    # input shapes bind the symbol, named by the input dim it is (a name --hint takes)
    bound = find_gemms(pt2, input_shapes=[((5, 4, 16), "float32")])
    assert rows(bound) == [
        ("addmm", 20, 32, 16, 1, "float32", "nt", "n", 1),
        ("mm", 8, 8, 16, 1, "float32", "nn", None, 1),
    ]
    assert bound[0].hint == {"x.0": 5}
    # the symbol's own name works too
    (sym,) = map(str, torch.export.load(str(pt2)).range_constraints)
    named = find_gemms(pt2, hints={sym: [2, 8]})
    assert rows(named) == rows(by_alias) and [f.hint for f in named] == [{sym: 2}, None, {sym: 8}]

    # torch.export does not save a Dim's name: `batch`, like any other name, is refused
    with pytest.raises(UserError, match=r"unknown dynamic dim 'batch' in --hint; known: x\.0 \(s\d+\)\."):
        find_gemms(pt2, hints={"batch": [2, 8]})
    with pytest.raises(UserError, match=r"'x\.1': that dim is static \(4\).*x\.0 \(s\d+\)"):
        find_gemms(pt2, hints={"x.1": [4]})
    with pytest.raises(UserError, match=r"unknown dynamic dim 'x\.7'.*<input>\.<dim>"):
        find_gemms(pt2, hints={"x.7": [4]})
    with pytest.raises(UserError, match="dim 1"):
        find_gemms(pt2, input_shapes=[((5, 3, 16), "float32")])


def test_flops_share(saved):
    found = find_gemms(saved["mlp_bias"][1])
    share = plan_flops_share(found)
    assert share == pytest.approx([2 / 11, 8 / 11, 1 / 11])  # 6*128*64 : 2*6*128*128 : 6*32*128
    assert plan_flops_share([]) == []


# -- bad input ---------------------------------------------------------------------------------

def test_bad_files(saved, tmp_path):
    with pytest.raises(UserError, match="not found"):
        find_gemms(tmp_path / "missing.pt2")
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(UserError, match="not a saved model"):
        find_gemms(text)
    ckpt = tmp_path / "weights.pt"
    torch.save(MLPBias().state_dict(), ckpt)
    with pytest.raises(UserError, match="torch.save checkpoint"):
        find_gemms(ckpt)


@pytest.mark.parametrize("fmt", [0, 1])
@pytest.mark.parametrize("cut", [1, 100, 5000])
def test_a_truncated_model_is_said_to_be_damaged(saved, tmp_path, fmt, cut):
    """A .pt2 or TorchScript file cut short (an interrupted copy): "damaged or truncated",
    never a checkpoint (zipfile would list an archive stored inside a .pt2) nor "not a saved
    model"; the whole file still reads."""
    whole = saved["mlp_bias"][fmt]
    data = whole.read_bytes()
    short = tmp_path / whole.name
    short.write_bytes(data[:len(data) - cut])
    with pytest.raises(UserError, match=r"is damaged or truncated"):
        find_gemms(short, trust_torchscript=True, input_shapes=saved["mlp_bias"][2])
    assert find_gemms(whole, trust_torchscript=True, input_shapes=saved["mlp_bias"][2] if fmt == 0 else None)


@pytest.mark.parametrize("fmt", [0, 1])
@pytest.mark.parametrize("damage", ["name", "version"])
def test_a_zip_whose_listing_does_not_read_is_said_to_be_damaged(saved, tmp_path, fmt, damage):
    """A damaged central directory makes zipfile raise what the damage leads it to (a name
    flagged UTF-8 that is not: UnicodeDecodeError; an unknown version: NotImplementedError):
    a one-line UserError, not a traceback."""
    whole = saved["mlp_bias"][fmt]
    data = bytearray(whole.read_bytes())
    end = data.rindex(b"PK\x05\x06")  # the end record: where the central directory starts
    at = int.from_bytes(data[end + 16:end + 20], "little")  # its first entry's record
    if damage == "name":
        data[at + 8] |= 0x08  # flag bit 11: the name is UTF-8 ...
        data[at + 47] = 0xFF  # ... and it is not
    else:
        data[at + 6] = 216  # made by / needs zip version 21.6
    bad = tmp_path / whole.name
    bad.write_bytes(bytes(data))
    with pytest.raises(UserError, match=r"is damaged or truncated: its zip listing does not read \("
                                        r"(UnicodeDecodeError|NotImplementedError)"):
        find_gemms(bad, trust_torchscript=True, input_shapes=saved["mlp_bias"][2])


def test_a_size_past_the_largest_dim_names_the_input_shape_that_gave_it(saved):
    """TorchScript takes its sizes from --input-shape alone: a GEMM dim past 2**31 - 1
    names that shape (the one thing to change), whole, in one line."""
    ts, pt2, _ = saved["mlp_bias"]
    with pytest.raises(UserError) as caught:
        find_gemms(ts, trust_torchscript=True, input_shapes=[((50000, 50000, 64), None)])
    assert str(caught.value) == ("the addmm's size m=2500000000 from --input-shape 50000x50000x64 is more than "
                                 "2147483647; choose smaller values")
    _, dynamic, _ = saved["dynamic"]  # x [B, 4, 16]: M = 4B, named by its symbol and the shape
    with pytest.raises(UserError, match=r"size m=4\*s\w+ = 2400000000 at s\w+=600000000 and from "
                                         r"--input-shape 600000000x4x16:float32 is more than 2147483647"):
        find_gemms(dynamic, input_shapes=[((600000000, 4, 16), "float32")])


def test_torchscript_needs_right_input_shapes(saved):
    ts, _, shapes = saved["mlp_bias"]
    with pytest.raises(UserError, match="--input-shape"):
        find_gemms(ts, trust_torchscript=True)
    with pytest.raises(UserError, match="takes 1 tensor input"):
        find_gemms(ts, trust_torchscript=True, input_shapes=shapes * 2)
    with pytest.raises(UserError, match="failed"):
        find_gemms(ts, trust_torchscript=True, input_shapes=[((2, 3, 65), "float32")])  # wrong K


def test_no_matmuls(saved):
    ts, pt2, _ = saved["nomatmul"]
    with pytest.raises(UserError, match="no matmuls"):
        find_gemms(pt2)
    with pytest.raises(UserError, match="no matmuls"):
        find_gemms(ts, trust_torchscript=True, input_shapes=[((4, 4), "float32")])
    ts, pt2, shapes = saved["int"]
    for path, kw in ((pt2, {}), (ts, {"input_shapes": shapes})):
        with pytest.raises(UserError, match="no matmuls.*int64"):
            find_gemms(path, trust_torchscript=True, **kw)


def test_a_torchscript_error_is_said_by_its_exception_line():
    from autotune_cli.model.text import one_line

    wrapped = RuntimeError("The following operation failed in the TorchScript interpreter.\n"
                           "Traceback of TorchScript (most recent call last):\n  File \"code.py\", line 3\n"
                           "NotImplementedError: Could not run 'aten::x' with arguments from the 'CPU' backend.\n\n"
                           "CPU: registered at a.cpp:1 [kernel]\nPythonDispatcher: registered at b.cpp:2 [fallback]\n")
    assert one_line(wrapped) == "NotImplementedError: Could not run 'aten::x' with arguments from the 'CPU' backend."
    assert one_line(ValueError("first\nsecond")) == "ValueError: first"


def test_parse_input_shape():
    assert parse_input_shape("8x128x768:float16") == ((8, 128, 768), "float16")
    assert parse_input_shape("4,16") == ((4, 16), None)  # none given: the model's own (TorchScript: float32)
    assert parse_input_shape("2x7:bf16") == ((2, 7), "bfloat16")
    assert parse_input_shape("1x9:int64") == ((1, 9), "int64")
    for bad in ("", "8xx4", "8x4:float128", "0x4", "axb", "8x4:", "9" * 5000, "\u0661x2",
                f"{2**31}x4"):
        with pytest.raises(UserError):
            parse_input_shape(bad)


def test_torchscript_is_read_only_when_trusted(saved):
    ts, _, shapes = saved["mlp_bias"]
    with pytest.raises(UserError, match="TorchScript, which is code.*--trust-torchscript"):
        find_gemms(ts, input_shapes=shapes)


class EncoderLayer(nn.Module):
    """nn.TransformerEncoderLayer: traced in eval mode, one fused op holds its matmuls."""

    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)

    def forward(self, x):
        return self.layer(x)


def test_fused_transformer_layer_is_named(tmp_path):
    torch.manual_seed(0)
    model, x = EncoderLayer().eval(), torch.randn(2, 5, 32)
    with torch.no_grad():
        traced = torch.jit.trace(model, (x,))
    assert "aten::_transformer_encoder_layer_fwd" in str(traced.inlined_graph)
    path = tmp_path / "encoder.pt"
    torch.jit.save(traced, str(path))
    with pytest.raises(UserError, match=r"no matmuls found.*inside "
                       r"aten::_transformer_encoder_layer_fwd, a fused op.*torch\.export.*train mode"):
        find_gemms(path, input_shapes=[((2, 5, 32), "float32")], trust_torchscript=True)
    # both ways out named in the message work: torch.export, and tracing in train mode
    pt2 = tmp_path / "encoder.pt2"
    torch.export.save(torch.export.export(model, (x,)), str(pt2))
    exported = find_gemms(pt2, device="cpu")
    train = tmp_path / "encoder_train.pt"
    torch.jit.save(torch.jit.trace(EncoderLayer().train(), (x,), check_trace=False), str(train))
    traced_train = find_gemms(train, input_shapes=[((2, 5, 32), "float32")], device="cpu",
                              trust_torchscript=True)
    for found in (exported, traced_train):
        assert sorted((f.problem.m, f.problem.n, f.problem.k) for f in found) == [
            (10, 32, 32), (10, 32, 64), (10, 64, 32), (10, 96, 32)]


class EncoderWithHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = EncoderLayer()
        self.head = nn.Linear(32, 8, bias=False)

    def forward(self, x):
        return self.head(self.encoder(x))


def test_fused_op_beside_matmuls_is_noted(tmp_path):
    """Matmuls found beside a fused op: listed, with a note that the fused op's are not."""
    torch.manual_seed(0)
    model, x = EncoderWithHead().eval(), torch.randn(2, 5, 32)
    path = tmp_path / "encoder_head.pt"
    with torch.no_grad():
        torch.jit.save(torch.jit.trace(model, (x,)), str(path))
    notes: list[str] = []
    found = find_gemms(path, input_shapes=[((2, 5, 32), "float32")], device="cpu",
                       trust_torchscript=True, notes=notes)
    assert [(f.problem.m, f.problem.n, f.problem.k) for f in found] == [(10, 8, 32)]
    assert len(notes) == 1
    assert "aten::_transformer_encoder_layer_fwd (a fused op) are not listed" in notes[0]
    assert "torch.export" in notes[0] and "train mode" in notes[0]


def test_parse_hints():
    assert parse_hints(["s0=1,16,128", "s1=64"]) == {"s0": [1, 16, 128], "s1": [64]}
    assert parse_hints(["x.0 = 4, 4, 8"]) == {"x.0": [4, 8]}
    assert parse_hints([]) == {}
    assert parse_hints([f"b={2**31 - 1}"]) == {"b": [2**31 - 1]}
    for bad in (["s0"], ["s0="], ["s0=1,x"], ["s0=0"], ["=3"], ["s0=1", "s0=2"], ["s0=-1"],
                ["b=" + "9" * 5000], [f"b={2**31}"], ["b=\u0661\u0662"],
                ["b=" + ",".join(map(str, range(1, 100)))]):
        with pytest.raises(UserError):
            parse_hints(bad)
    with pytest.raises(UserError, match="not a size from 1 to 2147483647"):
        parse_hints(["b=" + "9" * 5000])


class Rotary(nn.Module):
    """A rotary embedding's outer product (K = 1) beside a projection."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 64, bias=False)
        self.register_buffer("inv_freq", torch.arange(8, dtype=torch.float32).reshape(1, 8, 1))

    def forward(self, x, positions):
        angles = self.inv_freq @ positions  # [1, 8, 1] x [1, 1, T]
        return self.proj(x), angles.cos()


def test_an_outer_product_is_not_tuned(tmp_path):
    """K = 1 is pointwise work the compiler fuses: not listed, and the note says so; a file
    with nothing else is refused, naming why."""
    x, positions = torch.randn(4, 32), torch.arange(6, dtype=torch.float32).reshape(1, 1, 6)
    path = tmp_path / "rotary.pt2"
    torch.export.save(torch.export.export(Rotary().eval(), (x, positions)), str(path))
    notes: list[str] = []
    found = find_gemms(path, device="cpu", notes=notes)
    assert [(f.problem.op, f.problem.m, f.problem.n, f.problem.k) for f in found] == [("mm", 4, 64, 32)]
    assert notes == ["1 matmul with K = 1 (an outer product, pointwise work the compiler fuses) not tuned"]

    class OnlyRotary(nn.Module):
        def forward(self, freqs, positions):
            return freqs @ positions

    alone = tmp_path / "only_rotary.pt2"
    torch.export.save(torch.export.export(OnlyRotary(), (torch.randn(1, 8, 1), positions)), str(alone))
    with pytest.raises(UserError, match="K = 1"):
        find_gemms(alone, device="cpu")
