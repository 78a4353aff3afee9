"""`autotune model`'s report read as its user reads it: the per-pass estimate is one pass's
(one line per set of dynamic-dim values, never their sum), a tune without cuBLAS says it
has no baseline rather than 0 ms, a dim is shown by the name --hint gave it, and the ops
that do a model's work without being tuned (convolutions, attention) are named."""

from __future__ import annotations

import json
import re

import pytest

torch = pytest.importorskip("torch")

def pass_estimates(rows, scenarios=({},)):
    from autotune_cli.cli.rows import pass_estimates

    return pass_estimates(rows, list(scenarios))


def row(hint, ms, aten, count=1):
    return {"hint": hint, "count": count, "winner": {"ms": ms} if ms else None, "aten_ms": aten,
            "saved_ms": None if aten is None or ms is None else (aten - ms) * count}


def test_each_pass_sums_its_own_problems():
    rows = [row(None, 1.0, 1.5, count=2), row({"batch": 1}, 0.1, 0.2), row({"batch": 16}, 1.1, 1.2)]
    lines = pass_estimates(rows, [{"batch": 1}, {"batch": 16}])
    assert lines == [
        "estimated GEMM time per forward pass at batch=1: aten 3.2000 ms, tuned 2.1000 ms (saves 1.1000 ms)",
        "estimated GEMM time per forward pass at batch=16: aten 4.2000 ms, tuned 3.1000 ms (saves 1.1000 ms)"]
    static = pass_estimates([row(None, 1.0, 1.5, count=2)])
    assert static == ["estimated GEMM time per forward pass: aten 3.0000 ms, tuned 2.0000 ms (saves 1.0000 ms)"]
    # two dims paired: a problem of one dim runs in each pass its value agrees with
    paired = [row({"b": 1}, 1.0, 1.0), row({"b": 1, "s": 8}, 2.0, 2.0), row({"b": 4, "s": 64}, 3.0, 3.0)]
    at = [{"b": 1, "s": 8}, {"b": 4, "s": 64}]
    assert [line.split(":")[0] for line in pass_estimates(paired, at)] == [
        "estimated GEMM time per forward pass at b=1, s=8", "estimated GEMM time per forward pass at b=4, s=64"]
    assert "aten 3.0000 ms" in pass_estimates(paired, at)[0]


def test_a_pass_sums_the_problems_of_independent_dims_at_its_values():
    """Two inputs' dims, each in its own matmul: a pass runs both, so each scenario's line
    sums both problems (not one line per problem's own hint)."""
    rows = [row({"nx": 1}, 1.0, 1.0), row({"ny": 1}, 2.0, 2.0), row({"nx": 8}, 3.0, 3.0), row({"ny": 8}, 4.0, 4.0)]
    lines = pass_estimates(rows, [{"nx": 1, "ny": 1}, {"nx": 8, "ny": 8}])
    assert lines == [
        "estimated GEMM time per forward pass at nx=1, ny=1: aten 3.0000 ms, tuned 3.0000 ms (saves 0.0000 ms)",
        "estimated GEMM time per forward pass at nx=8, ny=8: aten 7.0000 ms, tuned 7.0000 ms (saves 0.0000 ms)"]


def test_the_json_passes_are_the_scenarios_of_two_inputs(cli, cache_dir, saved):
    code, out, err = cli("model", saved / "two.pt2", "--json", "--device", "cpu", "--hint", "x.0=1,8",
                         "--hint", "y.0=1,8", "--templates", "aten", "--workers", "1")
    assert code == 0, err
    doc = json.loads(out)
    assert [p["at"] for p in doc["passes"]] == [{"x.0": 1, "y.0": 1}, {"x.0": 8, "y.0": 8}]
    assert [p["problems"] for p in doc["passes"]] == [2, 2]
    for one in doc["passes"]:
        ran = [r for r in doc["problems"] if r["hint"].items() <= one["at"].items()]
        assert one["aten_ms"] == pytest.approx(sum(r["aten_ms"] * r["count"] for r in ran))
    code, out, err = cli("model", saved / "two.pt2", "--device", "cpu", "--hint", "x.0=1", "--hint", "y.0=1",
                         "--templates", "aten", "--workers", "1")
    assert code == 0 and "x.0=1" in out.split("estimated")[0] and "y.0=1" in out.split("estimated")[0], out


def test_the_json_totals_are_each_pass_s_never_their_sum(cli, cache_dir, saved):
    """`model --json` with two hint values: a total per pass ("passes"), and no single
    per-pass figure (it summed both passes)."""
    code, out, err = cli("model", saved / "dyn.pt2", "--json", "--device", "cpu", "--hint", "input.0=1,16",
                         "--templates", "aten", "--workers", "1")
    assert code == 0, err
    doc = json.loads(out)
    assert [p["at"] for p in doc["passes"]] == [{"input.0": 1}, {"input.0": 16}]
    for one in doc["passes"]:
        ran = [r for r in doc["problems"] if not r["hint"] or r["hint"].items() <= one["at"].items()]
        assert one["aten_ms"] == pytest.approx(sum(r["aten_ms"] * r["count"] for r in ran))
    assert doc["aten_ms_per_pass"] is None and doc["saved_ms_per_pass"] is None


def test_without_cublas_timed_the_estimate_says_so_not_zero():
    (line,) = pass_estimates([row(None, 2.0, None, count=3), row(None, 1.0, None)])
    assert "0.0000" not in line and "tuned 7.0000 ms over 2 of 2 problem(s)" in line and "aten not timed" in line


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("report")

    class Conv(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
            self.head = torch.nn.Linear(16, 10)

        def forward(self, x):
            attended = torch.nn.functional.scaled_dot_product_attention(x, x, x)
            return self.head(self.conv(attended).mean((2, 3)))

    torch.export.save(torch.export.export(Conv().eval(), (torch.randn(2, 3, 8, 8),)), str(folder / "conv.pt2"))
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16)).eval()
    batch = torch.export.Dim("batch", max=512)
    torch.export.save(torch.export.export(mlp, (torch.randn(8, 16),), dynamic_shapes=({0: batch},)),
                      str(folder / "dyn.pt2"))

    class TwoInputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(16, 16, bias=False), torch.nn.Linear(16, 16, bias=False)

        def forward(self, x, y):
            return self.a(x).sum() + self.b(y).sum()

    dims = ({0: torch.export.Dim("nx", max=64)}, {0: torch.export.Dim("ny", max=64)})
    torch.export.save(torch.export.export(TwoInputs().eval(), (torch.randn(8, 16), torch.randn(4, 16)),
                                          dynamic_shapes=dims), str(folder / "two.pt2"))
    return folder


def test_a_dim_is_shown_by_the_name_the_user_gave(cli, cache_dir, saved):
    """As --hint named it (its symbol, its input dim); unhinted, by its input dim, a name
    --hint takes (torch's s77 tells the user nothing)."""
    (symbol,) = map(str, torch.export.load(str(saved / "dyn.pt2")).range_constraints)
    for name in (symbol, "input.0"):
        code, out, err = cli("model", saved / "dyn.pt2", "--plan", "--json", "--device", "cpu",
                             "--hint", f"{name}=1,16")
        assert code == 0, err
        assert {tuple(p["hint"]) for p in json.loads(out)["plan"]} == {(name,)}
    code, out, err = cli("model", saved / "dyn.pt2", "--plan", "--device", "cpu")
    assert code == 0 and "input.0=512" in out and not re.search(r"\bs\d+=", out), out


def test_what_is_not_tuned_is_named(cli, cache_dir, saved):
    code, out, err = cli("model", saved / "conv.pt2", "--plan", "--device", "cpu")
    assert code == 0, err
    notes = [line for line in err.splitlines() if line.startswith("note: not tuned:")]
    assert len(notes) == 1 and "1 attention op" in notes[0] and "1 convolution" in notes[0], err
    assert "share is of the matmuls listed" in notes[0]
