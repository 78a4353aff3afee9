"""What the command says, read as a newcomer reads it: counts in the right number, no
claim that something runs when nothing does, tables and messages a pipe or a log can hold
(80 columns unless COLUMNS says otherwise; messages wrapped at words by one rule), and a
namesake distribution named when it is installed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len

from autotune_cli.text import article, plural
from conftest import messages

ROOT = Path(__file__).resolve().parents[1]


def run(*args, cwd=None, env=None, **extra) -> subprocess.CompletedProcess:
    """The command as a script runs it: stdout and stderr are pipes, not a terminal."""
    return subprocess.run([sys.executable, "-m", "autotune_cli", *map(str, args)], capture_output=True,
                          text=True, timeout=300, cwd=cwd, env={**os.environ, **(env or {})}, **extra)


def test_counted_nouns_and_articles():
    assert [plural(n, "candidate") for n in (0, 1, 2)] == ["0 candidates", "1 candidate", "2 candidates"]
    assert plural(1, "entry", "entries") == "1 entry" and plural(3, "entry", "entries") == "3 entries"
    assert [article(w) for w in ("int", "float", "Optional[int]")] == ["an int", "a float", "an Optional[int]"]


def test_one_candidate_and_one_entry_are_singular(cache_dir, tmp_path):
    env = {"AUTOTUNE_CACHE_DIR": str(cache_dir), "COLUMNS": "200"}
    tuned = run("mm", "--m", 16, "--n", 16, "--k", 16, "--device", "cpu", "--templates", "aten", env=env)
    assert tuned.returncode == 0, tuned.stderr
    assert ": 1 candidate of 1 config (pruned: none)" in tuned.stderr, tuned.stderr
    exported = run("cache", "export", "--format", "autotune", "-o", tmp_path / "one.json", env=env)
    assert "exported 1 entry to" in exported.stderr, exported.stderr
    imported = run("cache", "import", tmp_path / "one.json", "--cache-dir", tmp_path / "other", env=env)
    assert "of 1 entry from" in imported.stderr, imported.stderr
    pruned = run("cache", "prune", "--filter", "mm", "--dry-run", env=env)
    assert "would remove 1 of 1 entry from" in pruned.stderr, pruned.stderr


def test_tables_to_a_pipe_fit_80_columns_unless_columns_says(cache_dir):
    env = {"AUTOTUNE_CACHE_DIR": str(cache_dir)}
    tuned = run("mm", "--m", 24, "--n", 40, "--k", 16, "--device", "cpu", "--templates", "aten,triton::mm",
                env={**env, "COLUMNS": ""})
    assert tuned.returncode == 0, tuned.stderr
    shown = run("cache", "show", env={**env, "COLUMNS": ""})
    for text in (tuned.stdout, shown.stdout):
        widths = [cell_len(line) for line in text.splitlines()]
        assert widths and max(widths) <= 80, text
        assert max(widths) >= 60  # drawn at 80, not squeezed
    wide = run("cache", "show", env={**env, "COLUMNS": "200"})
    assert max(cell_len(line) for line in wide.stdout.splitlines()) > 80


def test_columns_zero_is_no_width_and_silences_nothing(tmp_path):
    """COLUMNS=0 (set by some CI runners and shells) draws as if it were unset: the error,
    the JSON document and the table all print (rich, given 0, printed nothing at all)."""
    from test_cache_tools import synthetic, write

    write(tmp_path, synthetic(m=64, device_name="NVIDIA H200"))
    env = {"AUTOTUNE_CACHE_DIR": str(tmp_path), "COLUMNS": "0"}
    bad = run("mm", "--m", 0, "--n", 16, "--k", 16, "--device", "cpu", env=env)
    assert bad.returncode == 2 and "autotune: error: --m must be at least 1, got 0" in bad.stderr, bad
    document = run("cache", "show", "--json", env=env)
    assert document.returncode == 0 and len(json.loads(document.stdout)["entries"]) == 1, document
    table = run("cache", "show", env=env)
    widths = [cell_len(line) for line in table.stdout.splitlines()]
    assert "mm 64x64x64 float16 nn" in table.stdout and 60 <= max(widths) <= 80, table.stdout


@pytest.mark.parametrize("group", [[], ["cache"]])
def test_command_lists_at_80_columns_say_each_command_whole(group):
    """The commands' one-line summaries in `autotune -h` and `autotune cache -h` end where
    they end, not cut into "... or a..." by the list's width."""
    shown = run(*group, "--help", env={"COLUMNS": "80"})
    assert shown.returncode == 0, shown.stderr
    listed = shown.stdout.split("Commands:", 1)[1].strip().splitlines()
    assert len(listed) >= 3 and not any(line.rstrip().endswith("...") for line in listed), listed
    assert all(cell_len(line) <= 80 for line in listed), listed


def test_a_plan_does_not_say_anything_runs(cache_dir, tmp_path):
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(16, 32)).eval()
    path = tmp_path / "one.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(4, 16),)), str(path))
    env = {"AUTOTUNE_CACHE_DIR": str(cache_dir), "PATH": "/usr/bin:/bin"}  # no nvidia-smi: no GPU
    planned = run("model", path, "--plan", env=env)
    assert planned.returncode == 0, planned.stderr
    assert "running on the CPU" not in planned.stderr and "addmm 4x32x16" in planned.stdout + planned.stderr


def test_a_namesake_distribution_is_named_when_installed(tmp_path):
    site = tmp_path / "site"
    info = site / "autotune_cli-0.3.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: autotune-cli\nVersion: 0.3.1\n")
    plain = run("--version", cwd=tmp_path)
    assert plain.returncode == 0 and "note:" not in plain.stderr
    beside = run("--version", cwd=tmp_path, env={"PYTHONPATH": f"{site}{os.pathsep}{ROOT}"})
    assert beside.returncode == 0 and beside.stdout == plain.stdout
    (note,) = messages(beside.stderr)  # one note, wrapped under its text
    assert all(line.startswith(" " * len("note: ")) for line in beside.stderr.splitlines()[1:]), beside.stderr
    assert note.startswith("note: autotune-cli 0.3.1 is installed here too") and "pip uninstall autotune-cli" in note


def test_profile_on_a_cache_hit_says_where_its_tune_went(cache_dir):
    env = {"AUTOTUNE_CACHE_DIR": str(cache_dir)}
    args = ("mm", "--m", 16, "--n", 16, "--k", 16, "--device", "cpu", "--templates", "aten", "--profile")
    assert run(*args, env=env).returncode == 0
    hit = run(*args, env=env)
    assert hit.returncode == 0, hit.stderr
    (line,) = [line for line in hit.stderr.splitlines() if line.startswith("phases:")]
    assert line.startswith("phases: a cache hit; when it was tuned, phases (s): total "), line


def header_cells(table: str) -> list[str]:
    """A table's column headers, each whole (a header of two words may take two lines)."""
    lines = [line.strip("┃").split("┃") for line in table.splitlines() if line.startswith("┃")]
    return [" ".join(filter(None, (line[i].strip() for line in lines))) for i in range(len(lines[0]))]


def test_the_candidates_table_has_the_columns_readme_names(cache_dir):
    """`kernel` (the uid, its params under it) at every width, aten rows alone included: not
    a `template | params` table with an empty `params` column where README says `kernel`."""
    assert "| `kernel` |" in (ROOT / "README.md").read_text()
    env = {"AUTOTUNE_CACHE_DIR": str(cache_dir)}
    for args, columns in (((), "80"), (("--top", 1), "80"), (("--templates", "aten"), "80"),
                          (("--templates", "aten"), "200")):
        shown = run("mm", "--m", 48, "--n", 64, "--k", 64, "--device", "cpu", *args, env={**env, "COLUMNS": columns})
        assert shown.returncode == 0, shown.stderr
        assert header_cells(shown.stdout) == ["#", "kernel", "ms", "TFLOP/s", "% of best", "status"], shown.stdout


def laid_out(text: str, width: int) -> list[str]:
    """`text`'s lines, each checked against the one rule every message is printed by: none
    wider than `width`, none ending in a space."""
    lines = text.splitlines()
    assert all(cell_len(line) <= width for line in lines), "\n".join(line for line in lines if cell_len(line) > width)
    assert not [line for line in lines if line.endswith(" ")], text
    return lines


def test_every_message_wraps_at_words_under_its_label(cache_dir):
    """Notes, progress, summaries and --profile break at spaces to the width, never inside an
    aside in brackets, the lines after the first under the text after the label (`note: `:
    6 columns); an error stays one line, whole, for a script or grep."""
    env = {"AUTOTUNE_CACHE_DIR": str(cache_dir), "COLUMNS": "60", "PATH": "/usr/bin:/bin"}  # no nvidia-smi
    args = ("mm", "--m", 16, "--n", 16, "--k", 16, "--templates", "aten", "--profile")
    tuned = run(*args, env=env)
    assert tuned.returncode == 0, tuned.stderr
    lines = laid_out(tuned.stderr, 60)
    note = next(i for i, line in enumerate(lines) if line.startswith("note: no GPU found;"))
    assert lines[note + 1].startswith(" " * 6 + lines[note + 1].strip()) and lines[note + 1][6] != " "
    assert "running on the CPU through Triton's interpreter" in " ".join(line.strip() for line in lines)
    assert any("(pruned: none)" in line for line in lines), lines  # an aside moves whole
    phases = next(i for i, line in enumerate(lines) if line.startswith("phases (s): total "))
    assert lines[phases + 1].startswith("  ") and not lines[phases + 1].startswith("   ")
    laid_out(tuned.stdout, 60)
    hit = run(*args, env=env)
    assert hit.returncode == 0, hit.stderr
    lines = laid_out(hit.stderr, 60)
    cached = next(i for i, line in enumerate(lines) if line.startswith("cached: mm 16x16x16 float16 nn -> "))
    assert lines[cached + 1].startswith(" " * len("cached: ") + "20"), lines  # the date, under the text
    assert lines[cached + 1].endswith(" (--force re-tunes)"), lines
    bad = run("mm", "--from", "list.json", "--m", 4, "--device", "cpu", env=env)
    (line,) = bad.stderr.splitlines()
    assert bad.returncode == 2 and cell_len(line) > 60
    assert line == "autotune: error: --from takes each problem's fields from the file; --m goes there (field 'm')"


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    """A static and a dynamic program of one linear: nn.Sequential names its input `input`."""
    torch = pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("tiny")
    model = torch.nn.Sequential(torch.nn.Linear(16, 32)).eval()
    torch.export.save(torch.export.export(model, (torch.randn(4, 16),)), str(folder / "static.pt2"))
    batch = torch.export.Dim("batch", max=64)
    torch.export.save(torch.export.export(model, (torch.randn(4, 16),), dynamic_shapes=({0: batch},)),
                      str(folder / "dyn.pt2"))
    return folder


def test_the_plan_has_a_hint_column_only_for_dynamic_dims(cache_dir, tiny_models):
    env = {"AUTOTUNE_CACHE_DIR": str(cache_dir), "COLUMNS": "80"}
    static = run("model", tiny_models / "static.pt2", "--plan", "--device", "cpu", env=env)
    assert static.returncode == 0, static.stderr
    assert "hint" not in header_cells(static.stdout) and "from" in header_cells(static.stdout)
    dynamic = run("model", tiny_models / "dyn.pt2", "--plan", "--device", "cpu", env=env)
    assert dynamic.returncode == 0, dynamic.stderr
    assert header_cells(dynamic.stdout)[-1] == "hint"
    # each dim labelled by a name --hint takes: the input's name and dim, not torch's s31
    assert "input.0=1 " in dynamic.stdout and not re.search(r"\bs\d+=", dynamic.stdout), dynamic.stdout


def test_a_hint_names_a_dim_the_model_has(cache_dir, tiny_models):
    """--help's example reads for any model; a name the program does not have is one line,
    exit 2, listing the names it has, even where it has one dynamic dim (the Dim's own name
    is not saved: `batch` and a typo look alike)."""
    env = {"AUTOTUNE_CACHE_DIR": str(cache_dir), "COLUMNS": "80"}
    helped = run("model", "--help", env=env)
    assert "input.0=1,16,128" in helped.stdout and "batch=" not in helped.stdout, helped.stdout
    for name in ("nope", "batch"):
        bad = run("model", tiny_models / "dyn.pt2", "--plan", "--device", "cpu", "--hint", f"{name}=4", env=env)
        (line,) = bad.stderr.splitlines()
        assert bad.returncode == 2 and bad.stdout == ""
        assert line.startswith(f"autotune: error: unknown dynamic dim '{name}' in --hint; known: input.0 (s"), line
    planned = run("model", tiny_models / "dyn.pt2", "--plan", "--json", "--device", "cpu", "--hint", "input.0=4,8",
                  env=env)
    assert planned.returncode == 0, planned.stderr
    assert [(row["problem"]["m"], row["hint"]) for row in json.loads(planned.stdout)["plan"]] == [
        (4, {"input.0": 4}), (8, {"input.0": 8})]


def test_the_estimate_under_the_winners_wraps_at_words(cache_dir, tiny_models):
    env = {"AUTOTUNE_CACHE_DIR": str(cache_dir), "COLUMNS": "60"}
    tuned = run("model", tiny_models / "dyn.pt2", "--device", "cpu", "--templates", "aten", "--workers", 1,
                "--hint", "input.0=4", env=env)
    assert tuned.returncode == 0, tuned.stderr
    lines = laid_out(tuned.stdout, 60)
    first = next(i for i, line in enumerate(lines) if line.startswith("estimated GEMM time per forward pass"))
    assert lines[first + 1].startswith("  ") and re.search(r"\(saves -?\d+\.\d+ ms\)$", lines[first + 1]), lines
    laid_out(tuned.stderr, 60)
