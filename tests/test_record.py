"""autotune_cli.record: the matmuls eager code runs, written as a `--from` list with counts;
that list tuned by `autotune mm --from` (then all hits, and the API finds the winners); the
AUTOTUNE_RECORD form in a subprocess; results, autograd, nesting and threads untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
import torch
from torch import nn

import autotune_cli
from autotune_cli import api
from autotune_cli.errors import UserError
from autotune_cli.model import find_gemms
from autotune_cli.model.shapes_file import read_counted

ONE_CONFIG = [{"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 2, "num_warps": 4}]


class Tiny(nn.Module):
    """A linear with a bias, a 3-d by 2-d matmul, a bmm and an attention q @ k^T (4-d)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(16, 8)
        self.w = nn.Parameter(torch.randn(8, 12))

    def forward(self, x, a, b, q, k):
        h = self.proj(x) @ self.w  # [2, 3, 16] -> [2, 3, 8] -> [2, 3, 12]
        return h, torch.bmm(a, b), q @ k.transpose(-2, -1)


def inputs():
    g = torch.Generator().manual_seed(1)
    return (torch.randn(2, 3, 16, generator=g), torch.randn(4, 5, 6, generator=g),
            torch.randn(4, 6, 7, generator=g), torch.randn(2, 4, 5, 8, generator=g),
            torch.randn(2, 4, 5, 8, generator=g))


# What Tiny's forward poses at aten level: linear -> addmm of x folded to [6, 16] and B =
# weight.T (nt); the 3-d matmul -> mm of the folded [6, 8]; 4-d q @ k^T -> bmm of 2 * 4 heads.
FORWARD = [
    {"m": 6, "n": 8, "k": 16, "dtype": "float32", "layout": "nt", "bias": True},
    {"m": 6, "n": 12, "k": 8, "dtype": "float32", "layout": "nn"},
    {"m": 5, "n": 7, "k": 6, "batch": 4, "dtype": "float32", "layout": "nn"},
    {"m": 5, "n": 5, "k": 8, "batch": 8, "dtype": "float32", "layout": "nt"},
]


def listed(path):
    return json.loads(path.read_text())["problems"]


def test_a_model_run_twice_is_listed_with_counts_and_unchanged(tmp_path, capsys):
    model, args = Tiny(), inputs()
    with torch.no_grad():
        plain = model(*args)
        path = tmp_path / "shapes.json"
        with autotune_cli.record(path):
            first = model(*args)
            second = model(*args)
    for ours, theirs in zip(first + second, plain + plain):
        assert torch.equal(ours, theirs)
    assert listed(path) == [dict(entry, count=2) for entry in FORWARD]
    err = capsys.readouterr().err
    assert err.strip() == f"autotune record: 4 matmul problems (8 calls) written to {path} (4 in all)"
    counted = read_counted(path, "cpu")  # what `autotune mm --from` reads
    assert [(p.op, p.b, p.layout, p.bias, c) for p, c in counted] == [
        ("addmm", 1, "nt", "n", 2), ("mm", 1, "nn", None, 2), ("bmm", 4, "nn", None, 2), ("bmm", 8, "nt", None, 2)]


def test_training_keeps_its_gradients_and_records_the_backward(tmp_path):
    args = inputs()

    def step():
        model = Tiny()
        h, c, s = model(*args)
        (h.sum() + c.sum() + s.sum()).backward()
        return [p.grad for p in model.parameters()]

    plain = step()
    path = tmp_path / "train.json"
    with autotune_cli.record(path):
        recorded = step()
    assert all(torch.equal(a, b) for a, b in zip(recorded, plain))
    problems = {json.dumps({k: v for k, v in e.items() if k != "count"}): e["count"] for e in listed(path)}
    for entry in FORWARD:
        assert problems[json.dumps(entry)] == 1
    # the weight gradient of the linear: grad [6, 8]^T @ x [6, 16]
    assert any(e["m"] == 8 and e["n"] == 16 and e["k"] == 6 and "batch" not in e for e in listed(path))
    assert len(problems) > len(FORWARD)


def test_scaled_mm_and_what_cannot_be_tuned_is_named(tmp_path, capsys):
    a = torch.randn(16, 32).to(torch.float8_e4m3fn)
    b = torch.randn(16, 32).to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0)
    path = tmp_path / "mixed.json"
    with autotune_cli.record(path):
        out = torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        torch.randn(3, 4, dtype=torch.float64) @ torch.randn(4, 5, dtype=torch.float64)
        torch.randn(3, 4) @ torch.randn(4)
        torch.randn(3, 4) @ torch.randn(4)
        torch.baddbmm(torch.randn(2, 3, 5), torch.randn(2, 3, 4), torch.randn(2, 4, 5))
    assert out.dtype == torch.bfloat16
    assert listed(path) == [{"m": 16, "n": 16, "k": 32, "dtype": "float8_e4m3fn", "layout": "nt",
                             "scale": "tensor", "out_dtype": "bfloat16", "count": 1}]
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].endswith("; skipped 4 calls autotune cannot tune: mv [3, 4] x [4] float32 x2, "
                             "mm [3, 4] x [4, 5] float64 x1, baddbmm [2, 3, 5] x [2, 3, 4] x [2, 4, 5] float32 x1")


def test_nested_records_and_threads_count_each_call_once(tmp_path):
    path, other = tmp_path / "one.json", tmp_path / "other.json"
    a, b = torch.randn(4, 8), torch.randn(8, 2)
    with autotune_cli.record(path):
        a @ b
        with autotune_cli.record(str(path)), autotune_cli.record(other):  # the same file, and another
            a @ b
    assert listed(path) == [{"m": 4, "n": 2, "k": 8, "dtype": "float32", "layout": "nn", "count": 2}]
    assert listed(other) == [{"m": 4, "n": 2, "k": 8, "dtype": "float32", "layout": "nn", "count": 1}]

    # Two threads recording into one file: each one's calls counted once, written once at the last exit.
    threaded = tmp_path / "threads.json"
    entered, first_left = threading.Barrier(2), threading.Event()
    written_early = []

    def worker(calls, leave_first):
        with autotune_cli.record(threaded):
            entered.wait()
            for _ in range(calls):
                a @ b
            if not leave_first:
                first_left.wait()
                written_early.append(threaded.exists())  # the other has left; this one still records
        if leave_first:
            first_left.set()

    threads = [threading.Thread(target=worker, args=(3, True)), threading.Thread(target=worker, args=(5, False))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert written_early == [False] and listed(threaded)[0]["count"] == 8
    with autotune_cli.record(threaded):  # a later record adds to the file
        a @ b
    assert listed(threaded)[0]["count"] == 9


def test_the_file_is_merged_or_moved_aside_never_lost(tmp_path, capsys):
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps([{"m": 4, "n": 2, "k": 8, "dtype": "fp32", "count": 3},
                                {"m": 64, "n": 64, "k": 64}]))
    with autotune_cli.record(path):
        torch.randn(4, 8) @ torch.randn(8, 2)
        torch.randn(3, 8) @ torch.randn(8, 2)
    assert listed(path) == [{"m": 4, "n": 2, "k": 8, "dtype": "float32", "layout": "nn", "count": 4},
                            {"m": 64, "n": 64, "k": 64, "dtype": "float16", "layout": "nn", "count": 1},
                            {"m": 3, "n": 2, "k": 8, "dtype": "float32", "layout": "nn", "count": 1}]
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == ["shapes.json"]
    capsys.readouterr()

    path.write_text("[{\"m\": 4,")  # not ours to overwrite: kept aside, byte for byte
    with autotune_cli.record(path):
        torch.randn(4, 8) @ torch.randn(8, 2)
    assert listed(path)[0]["count"] == 1
    assert (tmp_path / "shapes.json.unreadable").read_text() == "[{\"m\": 4,"
    assert "moved to" in capsys.readouterr().err


def test_the_list_takes_the_umasks_mode_or_keeps_its_own(tmp_path):
    """A new list is readable as any file the user makes (a 0600 temporary file was renamed
    into place: `mm --from` in another user's container could not read it); a list written
    again keeps the mode the user gave it."""
    path = tmp_path / "shapes.json"
    umask = os.umask(0o022)
    try:
        with torch.no_grad(), autotune_cli.record(path):
            nn.Linear(8, 8)(torch.randn(2, 8))
        assert path.stat().st_mode & 0o777 == 0o644
        path.chmod(0o640)
        with torch.no_grad(), autotune_cli.record(path):
            nn.Linear(8, 8)(torch.randn(2, 8))
        assert path.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(umask)


def test_a_bad_count_in_a_list_is_refused(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"m": 4, "n": 4, "k": 4, "count": 0}]))
    with pytest.raises(UserError, match="entry 1: field 'count' must be between 1"):
        read_counted(path, "cpu")


def test_the_list_is_tuned_then_all_hits_and_the_api_finds_the_winners(tmp_path, cache_dir, cli, capsys):
    api.reset()
    model, args = Tiny(), inputs()
    path = tmp_path / "shapes.json"
    with torch.no_grad(), autotune_cli.record(path):
        model(*args)
        model(*args)
    capsys.readouterr()
    space = tmp_path / "space.json"
    space.write_text(json.dumps(ONE_CONFIG))
    tune = ("mm", "--from", path, "--device", "cpu", "--templates", "aten,triton::mm,triton::bmm",
            "--space", space, "--workers", "1", "--json")
    code, out, err = cli(*tune)
    assert code == 0, err
    rows = json.loads(out)["problems"]
    assert [r["describe"] for r in rows] == ["addmm 6x8x16 float32 nt bias[n]", "mm 6x12x8 float32 nn",
                                             "bmm 4x5x7x6 float32 nn", "bmm 8x5x5x8 float32 nt"]
    assert [r["count"] for r in rows] == [2, 2, 2, 2]
    assert [r["from_cache"] for r in rows] == [False] * 4 and all(r["winner"] for r in rows)
    assert abs(sum(r["share"] for r in rows) - 1) < 1e-9
    code, out, _ = cli(*tune)
    assert code == 0 and [r["from_cache"] for r in json.loads(out)["problems"]] == [True] * 4

    dispatcher = api.Dispatcher(cache_dir)
    x2 = args[0].reshape(6, 16)
    calls = [(x2, model.proj.weight.t(), model.proj.bias), (model.proj(args[0]).reshape(6, 8), model.w, None),
             (args[1], args[2], None), (args[3].reshape(8, 5, 8), args[4].reshape(8, 5, 8).transpose(1, 2), None)]
    with torch.no_grad():
        for (a, b, bias), row in zip(calls, rows):
            info = dispatcher.dispatch_info(a, b, bias)
            assert not info.fallback and info.uid == row["winner"]["uid"], info


def test_a_linear_whose_bias_torch_adds_apart_is_found_by_linear_and_compile(tmp_path, cache_dir, cli, capsys):
    """A sequence-first input transposed before its linear (non-contiguous, 3-D): at::linear
    runs an mm of the folded input and adds the bias after. The list says mm, and
    autotune_cli.linear and compile pose that mm too (the bias added after), so both find
    its winner, with torch's values."""
    api.reset()
    proj = nn.Linear(16, 8)  # its weight requires grad: at::matmul folds the input (a copy)
    x = torch.randn(3, 2, 16, generator=torch.Generator().manual_seed(2))

    def seq_first(x):
        return proj(x.transpose(0, 1))

    path = tmp_path / "shapes.json"
    with torch.no_grad(), autotune_cli.record(path):
        want = seq_first(x)
    assert listed(path) == [{"m": 6, "n": 8, "k": 16, "dtype": "float32", "layout": "nt", "count": 1}]
    code, _, err = cli("mm", "--from", path, "--device", "cpu", "--templates", "aten", "--workers", "1")
    assert code == 0, err
    capsys.readouterr()
    dispatcher = api.Dispatcher(cache_dir)
    assert not dispatcher.dispatch_info(x.transpose(0, 1).reshape(6, 16), proj.weight.t()).fallback
    routes: list = []
    with torch.no_grad():
        torch.testing.assert_close(dispatcher.linear(x.transpose(0, 1), proj.weight, proj.bias), want)
        got = autotune_cli.compile(seq_first, backend="aot_eager", tune=False, routes=routes)(x)
    torch.testing.assert_close(got, want)
    assert [(r.op, r.fallback) for r in routes] == [("mm", False)], routes


def test_a_linear_torch_runs_as_a_bmm_stays_torchs_and_the_bias_keeps_the_products_dtype(tmp_path, cache_dir,
                                                                                         capfd):
    """A weight that needs no grad times a transposed input whose rows do not fold: torch runs
    a bmm over the batch, the weight expanded. record lists that bmm; autotune_cli.linear and
    compile leave the call to torch (they would pose an mm), and say so. A bias added after
    the product keeps the product's dtype, as torch's in-place add does."""
    api.reset()
    proj = nn.Linear(16, 8).requires_grad_(False)
    x = torch.randn(3, 2, 16, generator=torch.Generator().manual_seed(2))

    def seq_first(x):
        return proj(x.transpose(0, 1))

    path = tmp_path / "shapes.json"
    with autotune_cli.record(path):
        want = seq_first(x)
    assert listed(path) == [{"m": 3, "n": 8, "k": 16, "batch": 2, "dtype": "float32", "layout": "nt", "count": 1}]
    torch.testing.assert_close(autotune_cli.linear(x.transpose(0, 1), proj.weight, proj.bias), want)
    routes: list = []
    got = autotune_cli.compile(seq_first, backend="aot_eager", tune=False, routes=routes)(x)
    torch.testing.assert_close(got, want)
    assert [(r.fallback, r.reason.startswith("a matmul torch runs as a bmm")) for r in routes] == [(True, True)]
    assert "1 run by torch as a bmm of unfolded rows" in capfd.readouterr().err

    weight, bias = torch.randn(8, 16, dtype=torch.bfloat16, requires_grad=True), torch.randn(8)
    xb = x.to(torch.bfloat16).transpose(0, 1)
    with torch.no_grad():
        assert autotune_cli.linear(xb, weight, bias).dtype == nn.functional.linear(xb, weight, bias).dtype


def test_torchs_fused_attention_and_encoder_layers_are_named_as_skipped(tmp_path, capsys):
    """In inference, nn.TransformerEncoderLayer and nn.MultiheadAttention run one fused op each
    whose matmuls the mode cannot see: each call is named on the skipped line, not lost."""
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    mha = nn.MultiheadAttention(16, 2, batch_first=True).eval()
    x = torch.randn(2, 5, 16)
    path = tmp_path / "shapes.json"
    with torch.inference_mode(), autotune_cli.record(path):
        encoder(x)
        mha(x, x, x)
    err = capsys.readouterr().err
    assert "0 matmul problems" in err and "left as it was" in err
    assert ("skipped 3 calls autotune cannot tune: transformer_encoder_layer_fwd [2, 5, 16] float32 x2, "
            "native_multi_head_attention [2, 5, 16] float32 x1") in err


def test_under_inference_mode_the_same_list_as_under_no_grad(tmp_path):
    """inference_mode hands the mode linear and matmul whole (their decomposition below it):
    they are decomposed in the mode, so the list is no_grad's, and the values torch's."""
    model, args = Tiny(), inputs()
    lists = []
    for context in (torch.no_grad, torch.inference_mode):
        path = tmp_path / f"{context.__name__}.json"
        with context(), autotune_cli.record(path):
            got = model(*args)
        with torch.no_grad():
            for value, want in zip(got, model(*args)):
                torch.testing.assert_close(value, want)
        lists.append(listed(path))
    assert lists[0] == lists[1] == [dict(entry, count=1) for entry in FORWARD]


def test_under_inference_mode_groups_rnns_and_tensordot_are_listed_as_under_no_grad(tmp_path):
    """The other composite ops that carry matmuls (an RNN, tensordot) and linears of one input
    (their group) come out as under no_grad; a nested tensor's linear runs as torch runs it."""
    torch.manual_seed(0)
    q, k, v = (nn.Linear(16, 16) for _ in range(3))
    rnn = nn.RNN(16, 8)
    x, w = torch.randn(2, 4, 16), torch.randn(5, 16)

    def program():
        return q(x), k(x), v(x), rnn(torch.randn(3, 2, 16, generator=torch.Generator().manual_seed(1)))[0], \
            torch.tensordot(x, w, dims=([2], [1]))

    lists = []
    for context in (torch.no_grad, torch.inference_mode):
        path = tmp_path / f"{context.__name__}.json"
        with context(), autotune_cli.record(path):
            program()
        lists.append(listed(path))
    assert lists[0] == lists[1]
    assert any(entry.get("group") for entry in lists[0]) and len(lists[0]) >= 4

    lin = nn.Linear(16, 8)
    with torch.no_grad():
        nested = torch.nested.nested_tensor([torch.randn(3, 16), torch.randn(5, 16)])
        want = lin(nested)
        with autotune_cli.record(tmp_path / "nested.json"):
            got = lin(nested)
    for a, b in zip(got.unbind(), want.unbind()):
        torch.testing.assert_close(a, b)


def test_the_environment_variable_records_a_process(tmp_path):
    path = tmp_path / "env.json"
    code = ("import os, torch, autotune_cli\n"
            "assert 'AUTOTUNE_RECORD' not in os.environ  # its children do not record\n"
            "lin = torch.nn.Linear(16, 8)\n"
            "for _ in range(3):\n"
            "    lin(torch.randn(5, 16))\n")
    env = dict(os.environ, AUTOTUNE_RECORD=str(path))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert listed(path) == [{"m": 5, "n": 8, "k": 16, "dtype": "float32", "layout": "nt", "bias": True, "count": 3}]
    assert f"written to {path}" in proc.stderr
    # without the variable, importing autotune_cli imports no torch and records nothing
    env.pop("AUTOTUNE_RECORD")
    proc = subprocess.run([sys.executable, "-c", "import sys, autotune_cli; print('torch' in sys.modules)"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.stdout.strip() == "False"


def test_an_outer_product_is_skipped_as_model_and_compile_skip_it(tmp_path, capsys):
    """K = 1 (a rotary embedding's [64, 1] x [1, T]) is no problem to tune: named as skipped."""
    path = tmp_path / "outer.json"
    with autotune_cli.record(path):
        torch.randn(2, 8, 1) @ torch.randn(2, 1, 12)
        torch.randn(8, 16) @ torch.randn(16, 4)
    assert listed(path) == [{"m": 8, "n": 4, "k": 16, "dtype": "float32", "layout": "nn", "count": 1}]
    assert "skipped 1 call autotune cannot tune: bmm [2, 8, 1] x [2, 1, 12] float32 x1" in capsys.readouterr().err


class Branches(nn.Module):
    """Tiny's forward in the branch torch.cond picks (the other branch a linear of another
    width), then a torch.while_loop applying a square linear three times."""

    def __init__(self):
        super().__init__()
        self.tiny, self.other = Tiny(), nn.Linear(16, 12)
        self.square = nn.Linear(24, 24, bias=False)

    def forward(self, flag, x, a, b, q, k):
        h, ab, qk = torch.cond(flag, lambda *t: self.tiny(*t),
                               lambda x, a, b, q, k: (self.other(x), b[:, :5].clone(), q[..., :5].clone()),
                               (x, a, b, q, k))
        g = torch.zeros(2, 24)
        _, g = torch.while_loop(lambda i, g: i < 3, lambda i, g: (i + 1, self.square(g)), (torch.tensor(0), g))
        return h, ab, qk, g


@pytest.mark.parametrize("context", [torch.no_grad, torch.inference_mode])
def test_the_matmuls_in_torch_cond_and_while_loop_bodies_are_recorded(tmp_path, context):
    """A higher-order op's body runs under the record (below autograd, where linear comes to
    it whole): the branch taken and each loop iteration list their matmuls; values torch's."""
    model, args = Branches().eval(), inputs()
    path = tmp_path / "r.json"
    with context(), autotune_cli.record(path):
        got = model(torch.tensor(True), *args)
    with torch.no_grad():
        for value, want in zip(got, model(torch.tensor(True), *args)):
            torch.testing.assert_close(value, want)
    square = {"m": 2, "n": 24, "k": 24, "dtype": "float32", "layout": "nt", "count": 3}
    assert listed(path) == [dict(entry, count=1) for entry in FORWARD] + [square]


@pytest.mark.usefixtures("fresh_compile")
def test_code_compiled_inside_a_record_compiles_after_it(tmp_path):
    """torch.compile runs code eagerly while a record is open, and compiles it once the record
    is closed: Dynamo meeting it under the record's dispatch mode had marked it to skip, and
    neither it nor another module of its class compiled again in the process."""
    compiled_graphs: list = []

    def backend(gm, example_inputs):
        compiled_graphs.append(gm)
        return gm.forward

    model = nn.Sequential(nn.Linear(16, 8))
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(4, 16)
    with torch.no_grad():
        with autotune_cli.record(tmp_path / "r.json"):
            torch.testing.assert_close(compiled(x), model(x))
        assert compiled_graphs == [] and listed(tmp_path / "r.json")[0]["m"] == 4  # recorded, run eagerly
        compiled(x)
        assert len(compiled_graphs) == 1
        torch.compile(nn.Sequential(nn.Linear(8, 8)), backend=backend)(torch.randn(2, 8))
        assert len(compiled_graphs) == 2


@pytest.mark.parametrize("x_shape,bias_shape,op", [
    ((2, 3, 16), (8,), "addmm"),
    ((2, 3, 16), (1, 8), "addmm"),  # torch squeezes the bias to decide
    ((2, 3, 16), (3, 8), "mm"),  # a bias per position: the product, then the bias added
    ((2, 2, 3, 16), (1, 8), "addmm"),
    ((2, 2, 3, 16), (3, 8), "mm"),
    ((2, 3, 16), (), "mm"),  # a 0-d bias: added after
])
@pytest.mark.usefixtures("fresh_compile")  # each case compiled anew: no dynamic shapes from the one before
def test_a_linears_bias_is_fused_where_torch_fuses_it(tmp_path, cache_dir, x_shape, bias_shape, op):
    """record lists what at::linear runs for each bias shape; autotune_cli.linear, compile
    and `autotune model` (the exported program) pose that same problem, with torch's values."""
    api.reset()
    g = torch.Generator().manual_seed(3)
    x, weight, bias = torch.randn(*x_shape, generator=g), torch.randn(8, 16, generator=g), torch.randn(bias_shape,
                                                                                                  generator=g)
    path = tmp_path / "shapes.json"
    with torch.no_grad(), autotune_cli.record(path):
        want = torch.nn.functional.linear(x, weight, bias)
    (entry,) = listed(path)
    assert ("addmm" if entry.get("bias") else "mm") == op
    with torch.no_grad():
        torch.testing.assert_close(autotune_cli.linear(x, weight, bias), want)
        info = api.Dispatcher(cache_dir).dispatch_info(x.reshape(-1, 16), weight.t(), bias if op == "addmm" else None)
        assert info.problem.op == op
        routes: list = []
        got = autotune_cli.compile(torch.nn.functional.linear, backend="eager", tune=False, routes=routes)(x, weight,
                                                                                                          bias)
    torch.testing.assert_close(got, want)
    assert [(r.op, r.reason.split(" (")[0]) for r in routes] == [(op, "nothing cached for it on this machine")]

    class Linear(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight, self.bias = nn.Parameter(weight), nn.Parameter(bias)

        def forward(self, x):
            return torch.nn.functional.linear(x, self.weight, self.bias)

    torch.export.save(torch.export.export(Linear(), (x,)), str(tmp_path / "m.pt2"))
    assert [f.problem.op for f in find_gemms(str(tmp_path / "m.pt2"), device="cpu")] == [op]


def test_matmuls_in_place_and_of_other_kinds_are_named_as_skipped(tmp_path, capsys):
    """In-place products (the result written into self), int8 and vector products, and the
    bilinear form are no problem autotune poses: each is counted and named, none dropped."""
    w, v = torch.randn(32, 48), torch.randn(32)
    path = tmp_path / "skipped.json"
    with torch.no_grad(), autotune_cli.record(path):
        torch.randn(8, 48).addmm_(torch.randn(8, 32), w)
        torch.randn(2, 8, 48).baddbmm_(torch.randn(2, 8, 32), w.expand(2, 32, 48))
        torch._int_mm(torch.ones(32, 32, dtype=torch.int8), torch.ones(32, 32, dtype=torch.int8))
        torch.vdot(v, v)
        torch.addr(torch.randn(32, 32), v, v)
        torch.nn.functional.bilinear(torch.randn(4, 32), torch.randn(4, 32), torch.randn(5, 32, 32))
    line = capsys.readouterr().err.strip()
    assert "0 matmul problems" in line and not path.exists()
    assert "skipped 6 calls autotune cannot tune: " in line and line.endswith(" and 2 more")  # 4 named
    for name in ("addmm_ [8, 48] x [8, 32] x [32, 48]", "baddbmm_", "int_mm [32, 32] x [32, 32] int8",
                 "vdot [32] x [32]"):
        assert name in line, (name, line)


def test_a_list_saved_with_a_byte_order_mark_is_merged(tmp_path, capsys):
    """The list as `--from` reads it (UTF-8 with or without a byte-order mark): a record adds
    its counts to such a file instead of moving it aside as unreadable."""
    path = tmp_path / "shapes.json"
    path.write_text('{"problems": [{"m": 4, "n": 8, "k": 16, "dtype": "float32", "count": 2}]}',
                    encoding="utf-8-sig")
    with torch.no_grad(), autotune_cli.record(path):
        torch.randn(4, 16) @ torch.randn(16, 8)
    assert not list(tmp_path.glob("*.unreadable*"))
    assert listed(path) == [{"m": 4, "n": 8, "k": 16, "dtype": "float32", "layout": "nn", "count": 3}]
