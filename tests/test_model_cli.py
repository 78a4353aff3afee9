"""`autotune model` end to end on the CPU: models built here, saved both ways, tuned, cached.

Each model is saved as TorchScript (torch.jit.trace or torch.jit.script, then torch.jit.save)
and as a torch.export program (torch.export.export + torch.export.save). Sizes stay <= 64 and
most runs use `--templates aten` to keep tuning cheap; one run uses the default templates
(Triton under the interpreter) to exercise the whole pipeline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

from autotune_cli.store.cache import Cache  # noqa: E402
from autotune_cli.problem import GemmProblem  # noqa: E402
from autotune_cli.tune.report import fmt_ms  # noqa: E402
from autotune_cli.templates import vendor_uids  # noqa: E402
from conftest import is_pick  # noqa: E402

ATEN = ("--templates", "aten", "--workers", "1")  # one candidate per problem: one worker
TRUST = "--trust-torchscript"  # the TorchScript files here are the tests' own


# -- models -------------------------------------------------------------------------------

class MLPBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(32, 64)
        self.l2 = nn.Linear(64, 64)
        self.l3 = nn.Linear(64, 16)

    def forward(self, x):
        h = torch.relu(self.l1(x))
        h = torch.relu(self.l2(h))
        h = torch.relu(self.l2(h))  # the same layer again: count 2
        return self.l3(h)


class MLPNoBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(16, 48, bias=False)
        self.down = nn.Linear(48, 16, bias=False)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


class Attention(nn.Module):
    def __init__(self, d: int = 16):
        super().__init__()
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.o = nn.Linear(d, d)

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        s1 = torch.bmm(q, k.transpose(1, 2))      # bmm, B transposed
        s2 = torch.matmul(q, k.transpose(1, 2))   # the same problem through matmul
        p = torch.softmax(s1 + s2, -1)
        o = torch.bmm(p, v)                       # bmm nn
        return self.o(o)


class Transposed(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 32))
        self.a = nn.Parameter(torch.randn(32, 24))

    def forward(self, x):
        y = x @ self.w.t()                    # mm nt
        z = x.t() @ y                         # mm tn
        u = torch.mm(self.a.t(), self.w.t())  # mm tt
        return y.sum() + z.sum() + u.sum()


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


def save_both(model, inputs, folder, name, *, script=False, dynamic_shapes=None):
    model = model.eval()
    ts, pt2 = folder / f"{name}.pt", folder / f"{name}.pt2"
    with torch.no_grad():
        program = torch.jit.script(model) if script else torch.jit.trace(model, inputs)
    torch.jit.save(program, str(ts))
    torch.export.save(torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes), str(pt2))
    shapes = [f"{'x'.join(map(str, t.shape))}:{str(t.dtype).removeprefix('torch.')}" for t in inputs]
    return ts, pt2, shapes


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("models")
    out = {
        "mlp_bias": save_both(MLPBias(), (torch.randn(2, 4, 32),), folder, "mlp_bias"),
        "mlp_nobias": save_both(MLPNoBias(), (torch.randn(8, 16),), folder, "mlp_nobias", script=True),
        "attention": save_both(Attention(), (torch.randn(2, 8, 16),), folder, "attention", script=True),
        "transposed": save_both(Transposed().half(), (torch.randn(4, 32, dtype=torch.float16),),
                                folder, "transposed"),
        "dynamic": save_both(Dynamic(), (torch.randn(3, 4, 16),), folder, "dynamic",
                             dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=64)},)),
        "nomatmul": save_both(NoMatmul(), (torch.randn(4, 4),), folder, "nomatmul"),
    }
    ckpt = folder / "weights.pt"
    torch.save(MLPBias().state_dict(), ckpt)
    out["checkpoint"] = ckpt
    notes = folder / "notes.txt"
    notes.write_text("not a model\n")
    out["notes"] = notes
    return out


# -- helpers ------------------------------------------------------------------------------

def rows(problems: list[dict]) -> list[tuple]:
    """(op, m, n, k, b, dtype, layout, bias, count) per listed problem, in order."""
    return [(p["problem"]["op"], p["problem"]["m"], p["problem"]["n"], p["problem"]["k"],
             p["problem"]["b"], p["problem"]["dtype"], p["problem"]["layout"], p["problem"]["bias"],
             p["count"]) for p in problems]


def model_json(cli, path, *args):
    code, out, err = cli("model", path, "--device", "cpu", "--json", *args)
    assert code == 0, err
    return json.loads(out), err


def cache_entries(cli) -> dict:
    code, out, err = cli("cache", "show", "--json")
    assert code == 0, err
    return json.loads(out)["entries"]


def assert_tuned_and_cached(cli, cache_dir, doc):
    """Every listed problem has a winner, and its entry is in the cache under
    problem.key() + "@" + fingerprint digest."""
    entries = cache_entries(cli)
    direct = Cache(cache_dir).load()
    assert set(direct) == set(entries)
    for row in doc["problems"]:
        problem = GemmProblem.from_dict(row["problem"])
        assert problem.device == "cpu"
        assert row["describe"] == problem.describe()
        winner = row["winner"]
        assert winner is not None and winner["ms"] > 0
        key = row["key"]
        prefix, _, digest = key.partition("@")
        assert prefix == problem.key() and digest
        entry = entries[key]
        assert entry["fingerprint_digest"] == digest
        assert entry["problem"] == row["problem"]
        assert entry["winner"] == winner
        # aten is timed for every problem; the saving is per forward pass (x count)
        assert row["aten_ms"] > 0 and row["aten_ms"] >= winner["ms"]
        assert row["saved_ms"] == pytest.approx((row["aten_ms"] - winner["ms"]) * row["count"])
    if len(doc["passes"]) > 1:  # a pass runs at one set of hint values: no single total
        assert doc["saved_ms_per_pass"] is None and doc["aten_ms_per_pass"] is None
        return entries
    ran = [r for r in doc["problems"] if not r["group"]]  # a group's one GEMM: not run besides its linears
    assert doc["saved_ms_per_pass"] == pytest.approx(sum(r["saved_ms"] for r in ran))
    assert doc["aten_ms_per_pass"] == pytest.approx(sum(r["aten_ms"] * r["count"] for r in ran))
    return entries


def assert_shares(problems):
    weights = [2 * p["problem"]["m"] * p["problem"]["n"] * p["problem"]["k"] * p["problem"]["b"]
               * p["count"] for p in problems]
    assert [p["share"] for p in problems] == pytest.approx([w / sum(weights) for w in weights])
    for p in problems:
        assert p["gflop"] == pytest.approx(2 * p["problem"]["m"] * p["problem"]["n"]
                                           * p["problem"]["k"] * p["problem"]["b"] / 1e9)


# -- exact problems, tuned and cached ---------------------------------------------------------

MLP_BIAS = [
    ("addmm", 8, 64, 32, 1, "float32", "nt", "n", 1),
    ("addmm", 8, 64, 64, 1, "float32", "nt", "n", 2),
    ("addmm", 8, 16, 64, 1, "float32", "nt", "n", 1),
]


def test_mlp_with_bias_both_formats(cli, cache_dir, models):
    ts, pt2, shapes = models["mlp_bias"]
    first, _ = model_json(cli, ts, TRUST, "--input-shape", *shapes, *ATEN)
    assert first["model"] == str(ts)
    assert rows(first["problems"]) == MLP_BIAS
    assert all(p["sources"] == ["aten.linear"] and p["hint"] is None for p in first["problems"])
    assert all(p["from_cache"] is False for p in first["problems"])
    # shares of GEMM FLOPs: 8*64*32 : 2*8*64*64 : 8*16*64 = 2 : 8 : 1
    assert [p["share"] for p in first["problems"]] == pytest.approx([2 / 11, 8 / 11, 1 / 11])
    assert_shares(first["problems"])
    entries = assert_tuned_and_cached(cli, cache_dir, first)
    assert len(entries) == 3

    # the exported program lists the same problems, so they all come from the cache
    second, err = model_json(cli, pt2, *ATEN)
    assert rows(second["problems"]) == MLP_BIAS
    assert all(p["from_cache"] is True for p in second["problems"])
    assert [p["key"] for p in second["problems"]] == [p["key"] for p in first["problems"]]
    assert err.count("cached:") == 3 and "tuned:" not in err
    assert len(cache_entries(cli)) == 3


def test_mlp_without_bias_scripted(cli, cache_dir, models):
    ts, pt2, shapes = models["mlp_nobias"]
    expected = [("mm", 8, 48, 16, 1, "float32", "nt", None, 1),
                ("mm", 8, 16, 48, 1, "float32", "nt", None, 1)]
    for path, args in ((pt2, ()), (ts, (TRUST, "--input-shape", *shapes))):
        doc, _ = model_json(cli, path, *args, *ATEN)
        assert rows(doc["problems"]) == expected
        assert all(p["problem"]["bias"] is None and p["sources"] == ["aten.linear"]
                   for p in doc["problems"])
        assert [p["problem"]["allow_tf32"] for p in doc["problems"]] == [False, False]
        assert_tuned_and_cached(cli, cache_dir, doc)
    assert [p["from_cache"] for p in doc["problems"]] == [True, True]  # the same problems
    assert len(cache_entries(cli)) == 2
    # the stage marks of a run (seconds since the command began), in order
    stages = doc["stages_s"]
    assert list(stages) == ["found", "checked", "probed", "devices", "tuned", "closed"]
    assert list(stages.values()) == sorted(stages.values())
    # --allow-tf32 makes float32 problems other problems
    doc, _ = model_json(cli, pt2, "--allow-tf32", "--plan")
    assert [p["problem"]["allow_tf32"] for p in doc["plan"]] == [True, True]
    assert all(GemmProblem.from_dict(p["problem"]).key().endswith("/tf32/cpu") for p in doc["plan"])


def test_attention_block_with_bmm(cli, cache_dir, models):
    ts, pt2, shapes = models["attention"]
    expected = [
        ("mm", 16, 16, 16, 1, "float32", "nt", None, 3),    # q, k, v projections
        ("bmm", 8, 8, 16, 2, "float32", "nt", None, 2),     # q @ k^T via bmm and matmul
        ("bmm", 8, 16, 8, 2, "float32", "nn", None, 1),     # p @ v
        ("addmm", 16, 16, 16, 1, "float32", "nt", "n", 1),  # output projection
    ]
    exported, _ = model_json(cli, pt2, *ATEN)
    assert rows(exported["problems"]) == expected
    assert exported["problems"][1]["sources"] == ["aten.bmm", "aten.matmul"]
    assert_shares(exported["problems"])
    assert not any(p["from_cache"] for p in exported["problems"])
    entries = assert_tuned_and_cached(cli, cache_dir, exported)
    assert len(entries) == 4
    assert {e["winner"]["uid"] for e in entries.values()} == {"aten::mm", "aten::bmm", "aten::addmm"}

    # a second run re-tunes nothing: every problem comes from the cache, which is unchanged
    before = Cache(cache_dir).load()
    again, err = model_json(cli, pt2, *ATEN)
    assert all(p["from_cache"] for p in again["problems"])
    assert err.count("cached:") == 4 and "tuned:" not in err
    assert [p["winner"] for p in again["problems"]] == [p["winner"] for p in exported["problems"]]
    assert Cache(cache_dir).load() == before

    # the scripted TorchScript model lists the same problems: all cached
    scripted, _ = model_json(cli, ts, TRUST, "--input-shape", *shapes, *ATEN)
    assert rows(scripted["problems"]) == expected
    assert all(p["from_cache"] for p in scripted["problems"])
    assert Cache(cache_dir).load() == before


def test_groups_tune_the_one_gemm_of_q_k_v(cli, cache_dir, models):
    """--groups: the one GEMM of q, k and v follows the list, is tuned and cached like the rest,
    its share the linears' it holds (the others still sum to 1)."""
    _, pt2, _ = models["attention"]
    doc, _ = model_json(cli, pt2, "--groups", *ATEN)
    problems = doc["problems"]
    assert rows(problems)[-1] == ("mm", 16, 48, 16, 1, "float32", "nt", None, 1)
    assert problems[-1]["sources"] == ["grouped linears"] and problems[-1]["group"] and problems[-1]["winner"]
    assert not any(p["group"] for p in problems[:-1])
    assert_shares(problems[:-1])
    assert problems[-1]["share"] == pytest.approx(problems[0]["share"])  # q, k and v's row
    assert len(assert_tuned_and_cached(cli, cache_dir, doc)) == 5
    alone, _ = model_json(cli, pt2, *ATEN)  # a forward's GEMM time: the group's is its linears' again
    assert [{k: t[k] for k in ("problems", "aten_ms", "tuned_ms")} for t in doc["passes"]] == [
        {k: t[k] for k in ("problems", "aten_ms", "tuned_ms")} for t in alone["passes"]]


def test_transposed_matmuls_fp16(cli, cache_dir, models):
    ts, pt2, shapes = models["transposed"]
    expected = [
        ("mm", 4, 16, 32, 1, "float16", "nt", None, 1),
        ("mm", 32, 16, 4, 1, "float16", "tn", None, 1),
        ("mm", 24, 16, 32, 1, "float16", "tt", None, 1),
    ]
    doc, _ = model_json(cli, ts, TRUST, "--input-shape", *shapes, *ATEN)
    assert rows(doc["problems"]) == expected
    assert [p["sources"] for p in doc["problems"]] == [["aten.matmul"], ["aten.matmul"], ["aten.mm"]]
    entries = assert_tuned_and_cached(cli, cache_dir, doc)
    assert sorted(k.partition("@")[0] for k in entries) == sorted([
        "mm/m4/n16/k32/float16/nt/cpu", "mm/m32/n16/k4/float16/tn/cpu", "mm/m24/n16/k32/float16/tt/cpu"])
    plan, _ = model_json(cli, pt2, "--plan")
    assert rows(plan["plan"]) == expected


def test_dynamic_batch_hints_one_problem_per_value(cli, cache_dir, models):
    _, pt2, _ = models["dynamic"]
    doc, _ = model_json(cli, pt2, "--hint", "x.0=2,4", *ATEN)
    # linear flattens [B, 4, 16] -> M = 4B; the static mm is listed once
    assert rows(doc["problems"]) == [
        ("addmm", 8, 32, 16, 1, "float32", "nt", "n", 1),
        ("mm", 8, 8, 16, 1, "float32", "nn", None, 1),
        ("addmm", 16, 32, 16, 1, "float32", "nt", "n", 1),
    ]
    assert [p["hint"] for p in doc["problems"]] == [{"x.0": 2}, None, {"x.0": 4}]
    entries = assert_tuned_and_cached(cli, cache_dir, doc)
    assert len(entries) == 3

    # the symbol's own name works too; those problems are cached now
    sym = dynamic_symbol(pt2)
    again, err = model_json(cli, pt2, "--hint", f"{sym}=4", *ATEN)
    assert [(p["problem"]["m"], p["hint"], p["from_cache"]) for p in again["problems"]] == [
        (16, {sym: 4}, True), (8, None, True)]
    assert err.count("cached:") == 2 and "tuned:" not in err
    assert len(cache_entries(cli)) == 3


def test_dynamic_batch_plan_defaults_and_input_shape(cli, cache_dir, models):
    _, pt2, _ = models["dynamic"]
    # Dim(min=1, max=64): default values {1, 8, 64}, the dim shown as x.0 (a name --hint takes)
    plan, _ = model_json(cli, pt2, "--plan")
    sym = "x.0"
    assert [(p["problem"]["op"], p["problem"]["m"], p["hint"]) for p in plan["plan"]] == [
        ("addmm", 4, {sym: 1}), ("mm", 8, None), ("addmm", 32, {sym: 8}), ("addmm", 256, {sym: 64})]
    bound, err = model_json(cli, pt2, "--plan", "--input-shape", "5x4x16")
    assert [(p["problem"]["m"], p["hint"]) for p in bound["plan"]] == [(20, {sym: 5}), (8, None)]
    assert "outside the range" not in err
    # past the exported range: kept (another export may run it), and said, the dim named as
    # the --input-shape set it (the input's name and dim), not by torch's symbol
    _, err = model_json(cli, pt2, "--plan", "--input-shape", "100x4x16")
    assert f"{dynamic_symbol(pt2)}=" not in err
    assert "x.0=100: outside the range the program was exported for (1 to 64)" in err
    _, half, _ = models["transposed"]  # a float16 program: a shape without a dtype takes its inputs' own
    assert model_json(cli, half, "--plan", "--input-shape", "4x32")[0]["plan"]
    beyond, err = model_json(cli, pt2, "--plan", "--hint", f"{dynamic_symbol(pt2)}=1,100")
    assert [p["problem"]["m"] for p in beyond["plan"]] == [4, 8, 400]
    said = f"{dynamic_symbol(pt2)}=100: outside the range the program was exported for (1 to 64); kept all the same"
    assert f"note: {said}" in err and beyond["notes"] == [said]  # named as --hint named it
    assert bound["notes"] == []  # a script reads what stderr said
    assert not (cache_dir / "autotune-cache.json").exists()


def dynamic_symbol(pt2) -> str:
    """torch's name (s77) for the one dynamic dim of the program at `pt2`."""
    (symbol,) = torch.export.load(str(pt2)).range_constraints
    return str(symbol)


def test_hint_by_input_dim_or_symbol(cli, models):
    """Dim("batch") is saved as a symbol of torch's choosing: x.0= and the symbol itself name
    it; `batch` is refused as any unknown name is (the file does not hold it: it and a typo
    look alike), though the program has that one dynamic dim."""
    _, pt2, _ = models["dynamic"]
    sym = dynamic_symbol(pt2)
    plans = {name: model_json(cli, pt2, "--plan", "--hint", f"{name}=1,16,128")[0]["plan"]
             for name in ("x.0", sym)}
    for name, plan in plans.items():  # the same problems, the dim named as the user named it
        assert [(p["problem"]["m"], p["hint"]) for p in plan] == [
            (4, {name: 1}), (8, None), (64, {name: 16}), (512, {name: 128})]
    code, out, err = cli("model", pt2, "--device", "cpu", "--plan", "--hint", "batch=2")
    assert code == 2 and out == ""
    assert f"unknown dynamic dim 'batch' in --hint; known: x.0 ({sym})." in one_error_line(err)


class TwoDims(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 8)

    def forward(self, x):
        return self.lin(x)


def test_hint_names_with_two_dynamic_dims(cli, tmp_path):
    """Two dynamic dims: a Dim's own name cannot be told apart (the file does not hold it);
    the error lists the dims and the forms that name them."""
    dims = {0: torch.export.Dim("batch", max=64), 1: torch.export.Dim("seq", max=512)}
    pt2 = tmp_path / "two.pt2"
    torch.export.save(torch.export.export(TwoDims().eval(), (torch.randn(2, 3, 16),),
                                          dynamic_shapes=(dims,)), str(pt2))
    doc, _ = model_json(cli, pt2, "--plan", "--hint", "x.0=2", "--hint", "x.1=5")
    assert [p["problem"]["m"] for p in doc["plan"]] == [10]
    code, out, err = cli("model", pt2, "--device", "cpu", "--plan", "--hint", "batch=2")
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert "unknown dynamic dim 'batch'" in line and "x.0 (s" in line and "x.1 (s" in line
    assert "<input>.<dim>" in line and "does not save Dim names" in line


def test_saved_counts_against_plain_cublas(cli):
    """The baseline is plain aten::mm/addmm/bmm on the operands as given: a winning
    aten::mm_aligned (cuBLAS on padded copies) saves its lead over aten::mm."""
    from types import SimpleNamespace

    from autotune_cli.cli.rows import StageClock, aten_ms, result_row
    from autotune_cli.store.entry import Entry, Winner
    from autotune_cli.problem import GemmProblem
    from autotune_cli.store.results import Candidate

    def cand(uid, ms, status="ok"):
        return Candidate(uid, {}, status, ms)

    def entry_of(*candidates):
        return Entry(GemmProblem("mm", 8, 8, 8), {"device_name": "x"}, None, candidates)

    entry = entry_of(cand("aten::mm", 0.40), cand("aten::mm_aligned", 0.10),
                     cand("triton::mm", 0.20), cand("aten::bmm", 0.05, "runtime_error"))
    assert aten_ms(entry) == 0.40
    assert aten_ms(entry_of(cand("aten::mm_aligned", 0.1))) is None
    item = SimpleNamespace(count=3)
    outcome = SimpleNamespace(winner=Winner("aten::mm_aligned", {}, 0.10, 1.0), entry=entry,
                              key="k", from_cache=True)
    row = result_row(item, {"describe": "d", "count": 3}, outcome, StageClock())
    assert row["aten_ms"] == 0.40
    assert row["saved_ms"] == pytest.approx((0.40 - 0.10) * 3)
    # a plain cuBLAS winner saves nothing; without a plain cuBLAS time, nothing is claimed
    outcome.winner = Winner("aten::mm", {}, 0.40, 1.0)
    assert result_row(item, {}, outcome, StageClock())["saved_ms"] == 0
    outcome.entry = entry_of(cand("aten::mm_aligned", 0.1), cand("triton::mm", 0.2))
    outcome.winner = Winner("aten::mm_aligned", {}, 0.1, 1.0)
    assert result_row(item, {}, outcome, StageClock())["saved_ms"] is None


# -- the plan, the summary, the cache on a second run ------------------------------------------

def test_human_output_plan_first_then_summary(cli, cache_dir, models):
    _, pt2, _ = models["mlp_bias"]
    code, out, err = cli("model", pt2, "--device", "cpu", *ATEN)
    assert code == 0, err
    # the plan table comes first, on stderr
    assert "matmuls found" in err and "share" in err and "GFLOP each" in err
    assert err.index("matmuls found") < err.index("tuned:")
    for describe, share in (("addmm 8x64x32 float32 nt bias[n]", "18.2%"),
                            ("addmm 8x64x64 float32 nt bias[n]", "72.7%"),
                            ("addmm 8x16x64 float32 nt bias[n]", "9.1%")):
        plan_line = next(line for line in err.splitlines() if describe in line)
        assert share in plan_line and "aten.linear" in plan_line
    assert err.count("tuned:") == 3
    assert "matmuls found" not in out

    # the summary table on stdout: per problem its winner, aten time and saved time
    assert "winners" in out and "aten ms" in out and "saved/pass ms" in out
    assert "estimated GEMM time per forward pass: aten" in out
    doc, err2 = model_json(cli, pt2, *ATEN)  # the same numbers, from the cache
    assert all(p["from_cache"] for p in doc["problems"]) and "tuned:" not in err2
    for row in doc["problems"]:
        line = next(line for line in out.splitlines() if row["describe"] in line)
        assert row["winner"]["uid"] in line
        assert fmt_ms(row["aten_ms"]) in line and fmt_ms(row["saved_ms"]) in line
        assert f" {row['count']} " in line
    assert f"aten {doc['aten_ms_per_pass']:.4f} ms" in out
    assert f"saves {doc['saved_ms_per_pass']:.4f} ms" in out

    # a second human run: everything cached, marked so, nothing re-tuned
    code, out3, err3 = cli("model", pt2, "--device", "cpu", *ATEN)
    assert code == 0
    assert err3.count("cached:") == 3 and "tuned:" not in err3
    summary = [line for line in out3.splitlines() if "bias[n]" in line]
    assert len(summary) == 3 and all("yes" in line for line in summary)


def test_plan_only_lists(cli, cache_dir, models):
    ts, pt2, shapes = models["mlp_bias"]
    doc, _ = model_json(cli, ts, TRUST, "--plan", "--input-shape", *shapes)
    assert set(doc) == {"model", "plan", "not_tuned", "notes"}
    assert rows(doc["plan"]) == MLP_BIAS
    assert_shares(doc["plan"])
    for p in doc["plan"]:
        assert set(p) == {"problem", "describe", "count", "gflop", "share", "sources", "hint", "group"}
    code, out, err = cli("model", pt2, "--device", "cpu", "--plan")
    assert code == 0, err
    assert "matmuls found" in out and "addmm 8x64x64 float32 nt bias[n]" in out
    assert "tuned:" not in err and "winners" not in out
    assert not (cache_dir / "autotune-cache.json").exists()
    assert cache_entries(cli) == {}


def test_default_templates_end_to_end(cli, cache_dir, models):
    """No --templates: aten and Triton (under the interpreter) compete, results verified."""
    _, pt2, _ = models["mlp_nobias"]
    doc, _ = model_json(cli, pt2)
    assert rows(doc["problems"]) == [("mm", 8, 48, 16, 1, "float32", "nt", None, 1),
                                     ("mm", 8, 16, 48, 1, "float32", "nt", None, 1)]
    entries = assert_tuned_and_cached(cli, cache_dir, doc)
    for row in doc["problems"]:
        candidates = entries[row["key"]]["candidates"]
        uids = {c["uid"] for c in candidates}
        assert "aten::mm" in uids and any(u.startswith("triton::") for u in uids)
        ok = [c for c in candidates if c["status"] == "ok"]
        assert any(c["uid"].startswith("triton::") for c in ok)
        assert is_pick(row["winner"], candidates)
        assert row["aten_ms"] == min(c["ms"] for c in ok if c["uid"] in vendor_uids())


# -- bad input: one line, exit 2, no traceback --------------------------------------------------

def bad_cases(models, tmp_path):
    ts, pt2, shapes = models["mlp_bias"]
    return [
        ([tmp_path / "missing.pt2"], "model file not found"),
        ([models["notes"]], "is not a saved model"),
        ([models["checkpoint"]], "torch.save checkpoint"),
        ([tmp_path], "is a directory"),
        ([models["nomatmul"][1]], "no matmuls found"),
        ([models["nomatmul"][0], TRUST, "--input-shape", "4x4"], "no matmuls found"),
        ([ts, "--input-shape", shapes[0]], "TorchScript, which is code"),
        ([ts, "--plan", "--input-shape", shapes[0]], "Pass --trust-torchscript"),
        ([ts, TRUST], "TorchScript, which does not store sizes"),
        ([ts, TRUST, "--input-shape", shapes[0], "--input-shape", shapes[0]], "takes 1 tensor input(s) (x); got 2"),
        ([pt2, "--input-shape", shapes[0], "--input-shape", "4x4"], "takes 1 tensor input(s) (x); got 2"),
        ([ts, TRUST, "--input-shape", "2x4x33"], "failed (check --input-shape): RuntimeError: mat1 and mat2 shapes"),
        # an input of another dtype than the weights: torch's own refusal, though a meta run let it through
        ([models["transposed"][0], TRUST, "--input-shape", "4x32:float32"], "to have the same dtype"),
        ([models["transposed"][1], "--input-shape", "4x32:float32"], "input 'x' is float16; --input-shape gives"),
        ([ts, TRUST, "--input-shape", "2x4x"], "cannot parse input shape"),
        ([ts, TRUST, "--input-shape", shapes[0], "--hint", "s0=2"], "--hint applies to exported programs"),
        ([pt2, "--hint", "x.0=2"], "no dynamic dims"),
        ([models["dynamic"][1], "--hint", "x.1=2"], "'x.1': that dim is static (4)"),
        ([models["dynamic"][1], "--hint", "y.0=2"], "unknown dynamic dim 'y.0'"),
        ([models["dynamic"][1], "--hint", "x.0=0"], "not a size from 1 to 2147483647"),
        ([models["dynamic"][1], "--hint", "b=" + "9" * 5000], "not a size from 1 to 2147483647"),
        ([models["dynamic"][1], "--hint", "b=" + ",".join(map(str, range(1, 70)))],
         "lists 69 values; at most 64"),
        # bad tuning options fail before the plan is shown
        ([pt2, "--templates", "nope::mm"], "unknown template 'nope::mm'"),
        ([pt2, "--plugin", tmp_path / "no_such_plugin.py"], "plugin file not found"),
        ([pt2, "--workers", "0"], "--workers must be between 1 and"),
    ]


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("autotune: error:")
    return lines[0]


def test_bad_input_in_process(cli, cache_dir, models, tmp_path):
    # the case's own options come last, so that they win over ATEN's
    cases = [(["--device", "cpu", *ATEN, *args], message) for args, message in bad_cases(models, tmp_path)]
    if not torch.cuda.is_available():
        cases.append(([models["mlp_bias"][1], "--device", "cuda"], "no CUDA GPU is visible"))
    for args, message in cases:
        code, out, err = cli("model", *args)
        assert code == 2, (args, err)
        assert message in one_error_line(err), (args, err)
        assert out == ""
    assert not (cache_dir / "autotune-cache.json").exists()


def test_more_worker_groups_than_cores_is_one_line_before_the_model_is_read(cli, cache_dir, models):
    """--gpus on the CPU past its cores: the one error line, nothing read or drawn before it
    (a model tuned before drew its plan first)."""
    import os

    assert cli("model", models["mlp_bias"][1], "--device", "cpu", *ATEN)[0] == 0
    code, out, err = cli("model", models["mlp_bias"][1], "--device", "cpu", *ATEN,
                         "--gpus", str((os.cpu_count() or 1) + 1))
    assert code == 2 and out == ""
    assert "worker groups (one per core)" in one_error_line(err)


@pytest.mark.parametrize("gpus", [[], ["--gpus", "2"]])
def test_a_problem_that_cannot_fit_is_refused_before_any_tune(cli, cache_dir, tmp_path, gpus):
    """Each problem's memory is checked before the first tune, on one device or several: one
    that cannot fit is an error naming the values it was read at and --hint, and nothing
    was tuned (x.0=1's problem, listed first, is not in the cache)."""
    pt2 = tmp_path / "batch.pt2"
    torch.export.save(torch.export.export(TwoDims().eval(), (torch.randn(2, 3, 16),),
                                          dynamic_shapes=({0: torch.export.Dim("batch")},)), str(pt2))
    code, out, err = cli("model", pt2, "--device", "cpu", *ATEN, "--hint", "x.0=1,700000000", *gpus)
    assert code == 2 and out == "", err
    line = one_error_line(err)
    assert "addmm 2100000000x8x16 float32 nt bias[n] needs" in line and "does not fit" in line
    assert "read at x.0=700000000" in line and "--hint" in line
    assert not (cache_dir / "autotune-cache.json").exists()


@pytest.mark.parametrize("case", ["notes", "wrong_count", "huge_hint"])
def test_bad_input_subprocess_no_traceback(cache_dir, models, case):
    ts, pt2, shapes = models["mlp_bias"]
    args, message = {
        "notes": ([models["notes"]], "is not a saved model"),
        "wrong_count": ([ts, TRUST, "--input-shape", shapes[0], "--input-shape", shapes[0]],
                        "got 2 --input-shape"),
        "huge_hint": ([models["dynamic"][1], "--hint", "b=" + "9" * 5000], "not a size from 1 to"),
    }[case]
    proc = subprocess.run([sys.executable, "-m", "autotune_cli", "model", *map(str, args), "--device", "cpu"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "AUTOTUNE_CACHE_DIR": str(cache_dir)})
    assert proc.returncode == 2, proc.stderr
    assert message in one_error_line(proc.stderr)
    assert proc.stdout == ""
    assert not (cache_dir / "autotune-cache.json").exists()
