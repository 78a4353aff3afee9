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


def test_a_long_head_puts_the_times_on_a_line_of_their_own():
    """A problem described at length and a long uid: the times move under it, each line <= 80."""
    from types import SimpleNamespace

    from autotune_cli.problem import make_problem
    from autotune_cli.store.entry import Entry, Winner
    from autotune_cli.tune.report import tuned_lines

    problem = make_problem(m=16, n=50, k=32, dtype="float16", layout="nt", bias="n", device="cpu")
    winner = Winner(uid="aten::mm_aligned", params={}, ms=0.0094, tflops=0.00274)
    entry = Entry(problem=problem, fingerprint={}, winner=winner, tune_seconds=1.0)
    lines = tuned_lines(SimpleNamespace(problem=problem, entry=entry))
    assert all(len(line) <= 80 for line in lines), lines
    assert lines[0].endswith("-> aten::mm_aligned") and lines[1] == "  0.0094 ms, 0.00274 TFLOP/s"


def test_the_winner_line_keeps_its_counts_whole():
    """`mm`'s last line: where it would pass 80 columns, the counts go whole onto a second line."""
    from types import SimpleNamespace

    from autotune_cli.problem import make_problem
    from autotune_cli.store.entry import Entry, Winner
    from autotune_cli.store.results import Candidate
    from autotune_cli.tune.report import outcome_summary

    problem = make_problem(m=16, n=16, k=16, dtype="float16", device="cpu")
    params = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 8, "num_stages": 2, "num_warps": 4}
    winner = Winner(uid="triton::mm", params=params, ms=0.0123, tflops=0.0123)
    candidates = [Candidate(uid="triton::mm", params=params, status="ok", ms=0.0123)] * 6
    entry = Entry(problem=problem, fingerprint={}, winner=winner, candidates=candidates, tune_seconds=3.9)
    lines = outcome_summary(SimpleNamespace(problem=problem, entry=entry)).split("\n")
    assert all(len(line) <= 80 for line in lines), lines
    assert lines[-1] == "  [6 ok; tuned in 3.9 s]" and lines[0].startswith("winner: triton::mm")
