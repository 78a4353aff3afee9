"""What a list's tune prints per problem fits an 80-column terminal: a Triton winner's
params and the candidates' counts go on lines of their own, not wrapped mid-phrase."""

import json

from autotune_cli.cli import console


def test_each_tuned_problem_is_told_in_lines_that_fit_80_columns(tmp_path, cache_dir, cli, monkeypatch):
    monkeypatch.setattr(console.err, "width", 80)
    shapes = tmp_path / "shapes.json"
    shapes.write_text(json.dumps([{"m": 16, "n": 16, "k": 16}, {"m": 16, "n": 32, "k": 16}]))
    code, _, err = cli("mm", "--from", shapes, "--device", "cpu", "--templates", "triton::mm")
    assert code == 0
    lines = err.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("tuned: mm 16x16x16 float16 nn -> triton::mm "))
    assert " ms, " in lines[first] and lines[first].endswith("TFLOP/s")
    assert lines[first + 1].startswith("  BM") and lines[first + 2].startswith("  [") and "ok" in lines[first + 2]
    assert any(line.startswith("tuned: mm 16x32x16 float16 nn -> triton::mm ") for line in lines)
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
