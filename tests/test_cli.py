"""The CLI end to end on the CPU: real worker processes, the Triton interpreter, the cache."""

import json
import os
import subprocess
import sys

import pytest


from conftest import PLUGINS, is_pick, messages


def tune_json(cli, *args):
    code, out, err = cli("mm", "--device", "cpu", "--json", *args)
    assert code == 0, err
    return json.loads(out), err


def assert_verified_winner(doc):
    winner = doc["winner"]
    assert winner is not None and winner["ms"] > 0
    ok = [c for c in doc["candidates"] if c["status"] == "ok"]
    assert is_pick(winner, doc["candidates"])  # the fastest, or cuBLAS within the margin
    for cand in ok:
        assert cand["max_rel_error"] is not None and cand["max_rel_error"] < 2e-2
        assert 0 <= cand["worst_of_allowed"] <= 1  # every check's margin, the worst of them
    uids = {c["uid"] for c in doc["candidates"]}
    assert any(u.startswith("aten::") for u in uids) and any(u.startswith("triton::") for u in uids)


@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_mm_all_layouts_fp16(cli, cache_dir, layout):
    doc, _ = tune_json(cli, "--m", 64, "--n", 48, "--k", 80, "--dtype", "float16", "--layout", layout)
    assert doc["problem"]["layout"] == layout and doc["from_cache"] is False
    assert_verified_winner(doc)
    assert all(c["status"] == "ok" for c in doc["candidates"])


def test_mm_fp32_then_cache_hit(cli, cache_dir):
    args = ("--m", 96, "--n", 64, "--k", 64, "--dtype", "float32")
    first, _ = tune_json(cli, *args)
    assert_verified_winner(first)
    second, err = tune_json(cli, *args)
    assert second["from_cache"] is True and "cached:" in err
    assert second["winner"] == first["winner"]
    # --force re-tunes; another dtype is another entry
    forced, _ = tune_json(cli, *args, "--force")
    assert forced["from_cache"] is False
    other, _ = tune_json(cli, "--m", 96, "--n", 64, "--k", 64, "--dtype", "bfloat16", "--templates", "aten")
    assert other["from_cache"] is False
    code, out, _ = cli("cache", "show", "--json")
    assert code == 0
    entries = json.loads(out)["entries"]
    assert len(entries) == 2 and all(e["winner"] for e in entries.values())


def test_addmm_and_bmm(cli, cache_dir):
    addmm, _ = tune_json(cli, "--m", 48, "--n", 64, "--k", 32, "--bias", "--dtype", "bfloat16")
    assert addmm["problem"]["op"] == "addmm" and addmm["problem"]["bias"] == "n"
    assert {"aten::addmm", "triton::mm"} <= {c["uid"] for c in addmm["candidates"]}
    assert_verified_winner(addmm)
    bmm, _ = tune_json(cli, "--m", 32, "--n", 48, "--k", 64, "--batch", 3, "--dtype", "float32")
    assert bmm["problem"]["op"] == "bmm" and bmm["problem"]["b"] == 3
    assert {"aten::bmm", "triton::bmm"} <= {c["uid"] for c in bmm["candidates"]}
    assert_verified_winner(bmm)


def test_planted_wrong_candidate_never_wins(cli, cache_dir):
    doc, _ = tune_json(cli, "--m", 64, "--n", 64, "--k", 64, "--plugin", PLUGINS / "wrong_mm.py",
                       "--templates", "aten,test::wrong_mm")
    by_uid = {c["uid"]: c for c in doc["candidates"]}
    wrong = by_uid["test::wrong_mm"]
    assert wrong["status"] == "wrong_result" and "element" in wrong["error"] or "relative" in wrong["error"]
    assert wrong["worst_of_allowed"] > 1  # the failing check's margin, though the norm decided
    assert doc["winner"]["uid"] == "aten::mm"


def test_table_output(cli, cache_dir):
    code, out, err = cli("mm", "--device", "cpu", "--m", 32, "--n", 32, "--k", 32, "--templates", "aten")
    assert code == 0
    assert "aten::mm" in out and "winner: aten::mm" in out and "% of best" in out
    assert "winner: aten::mm  0." in out  # no params: the fields two spaces apart, as elsewhere
    assert "tuning mm 32x32x32 float16 nn on cpu" in err


@pytest.mark.parametrize("args, message", [
    (["mm", "--m", "0", "--n", "4", "--k", "4"], "--m must be at least 1"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--batch", "0"], "--batch must be at least 1"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "-b", str(2**40)], "--batch is 1099511627776, larger than"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--top", "0"], "--top must be at least 1, got 0"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--bias-shape", "mn"], "--bias-shape mn needs --bias"),
    (["cache", "export"], "Missing option '--format' / '-f'. Choose from: inductor, autotune"),
    (["mm", "--m", "x", "--n", "4", "--k", "4"], "'--m'"),
    (["mm", "--m", "4", "--n", "4"], "--k"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--dtype", "int8"], "unsupported dtype"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--layout", "xx"], "unknown layout"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--device", "tpu"], "'--device': 'tpu' is not one of 'cuda', 'cpu'"),
    (["cache", "export", "--format", "nope"], "'--format' / '-f': 'nope' is not one of 'inductor', 'autotune'"),
    (["model", ""], "'MODEL': an empty path; give a file"),
    (["mm", "--from", ""], "'--from': an empty path; give a file"),
    (["cache", "import", ""], "'FILE': an empty path; give a file"),
    (["cache", "export", "--format", "autotune", "-o", " "], "'--output' / '-o': an empty path; give a file"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--space", ""], "'--space': an empty path; give a file"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--device", "cpu", "--templates", "nope::mm"], "unknown template"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--device", "cpu", "--templates", " , "], "--templates names no"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--device", "cpu", "--space", "/no/such.json"], "space file not found"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--dtype", "float16", "--allow-tf32"], "only applies to float32"),
    (["mm", "--m", "4000000", "--n", "4000000", "--k", "4", "--device", "cpu"], "does not fit"),
    (["nosuchcommand"], "No such command"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--device", "cpu", "--timeout", "nan"], "--timeout must be a positive"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--device", "cpu", "--timeout", "-1"], "--timeout must be a positive"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--device", "cpu", "--interpreter-budget", "nan"],
     "--interpreter-budget must be a positive"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--device", "cpu", "--interpreter-budget", "0"],
     "--interpreter-budget must be a positive"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--device", "cpu", "--budget", "inf"], "--budget must be a positive"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--device", "cpu", "--workers", "1000000000000"],
     "--workers must be between 1 and"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--device", "cpu", "--compile-workers", "100000"],
     "--compile-workers must be between 0 and"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--device", "cpu", "--seed", str(2**64)],
     "--seed must be between 0 and"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--device", "cpu", "--seed", "-1"], "--seed must be between 0 and"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--device", "cpu", "--plugin", ""], "--plugin needs a module"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--device", "cpu", "--plugin", "."], "--plugin . is a folder"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--device", "cpu", "--plugin", "/"], "--plugin / is a folder"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--device", "cpu", "--plugin", "no_such_module_here"],
     "plugin module 'no_such_module_here' not found"),
    (["mm", "--m", "4", "--n", "4", "--k", "4", "--device", "cpu", "--space", "/"], "space file / is not a regular"),
    (["mm", "--m", "64", "--n", "64", "--k", "64", "--device", "cpu", "--templates", "triton::gemv"],
     "no candidates for mm 64x64x64 float16 nn: no template selected offers a config"),
])
def test_bad_input_is_one_line_exit_2(cache_dir, args, message):
    proc = subprocess.run([sys.executable, "-m", "autotune_cli", *args], capture_output=True, text=True,
                          env={**os.environ, "AUTOTUNE_CACHE_DIR": str(cache_dir)}, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("note:")]
    assert len(lines) == 1 and lines[0].startswith("autotune: error:") and message in lines[0]
    assert not (cache_dir / "autotune-cache.json").exists()


def test_without_a_gpu_the_cpu_note_waits_until_the_input_has_passed(cache_dir):
    """Found no GPU, the command says it runs on the CPU, but only once its input passed the
    checks: a bad input's error is stderr's one line."""
    from autotune_cli.cli.app import gpu_present

    if gpu_present():
        pytest.skip("this machine has a GPU: no note")

    def run(*args):
        return subprocess.run([sys.executable, "-m", "autotune_cli", "mm", *args], capture_output=True,
                              text=True, env={**os.environ, "AUTOTUNE_CACHE_DIR": str(cache_dir)}, timeout=300)

    for bad in (("--templates", "nope::mm"), ("--m", "4000000", "--n", "4000000"),
                ("--space", "/no/such.json")):
        proc = run("--m", "16", "--n", "16", "--k", "16", *bad)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert proc.stderr.startswith("autotune: error:")
    for _ in ("tuned", "cached"):
        proc = run("--m", "16", "--n", "16", "--k", "16", "--templates", "aten")
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr.startswith("note: no GPU found") and proc.stderr.count("note: no GPU") == 1


def test_without_a_gpu_a_model_says_the_cpu_note_and_its_own_notes_once(cache_dir, tmp_path):
    from autotune_cli.cli.app import gpu_present

    if gpu_present():
        pytest.skip("this machine has a GPU: no note")
    import torch

    class WithOuter(torch.nn.Module):  # a K = 1 matmul (an outer product): noted, not tuned
        def __init__(self):
            super().__init__()
            self.wide, self.outer = torch.nn.Linear(16, 8), torch.nn.Linear(1, 8)

        def forward(self, x):
            return self.wide(x) + self.outer(x[:, :1])

    path = tmp_path / "outer.pt2"
    torch.export.save(torch.export.export(WithOuter(), (torch.randn(4, 16),)), str(path))
    proc = subprocess.run([sys.executable, "-m", "autotune_cli", "model", str(path), "--templates", "aten"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "AUTOTUNE_CACHE_DIR": str(cache_dir)})
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if line.startswith("note:")]
    assert sum("no GPU found" in n for n in notes) == 1, proc.stderr
    assert len(notes) == len(set(notes)), proc.stderr
    assert any("K = 1" in n for n in notes), proc.stderr


def test_cache_commands_import_neither_torch_nor_triton(cache_dir, cli):
    tune_json(cli, "--m", 16, "--n", 16, "--k", 16, "--templates", "aten")
    code = ("import sys; from autotune_cli.cli import main; rc = main(['cache', 'show']);"
            "assert rc == 0; bad = [m for m in ('torch', 'triton') if m in sys.modules];"
            "print('IMPORTED', bad)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "AUTOTUNE_CACHE_DIR": str(cache_dir), "COLUMNS": "250"}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "IMPORTED []" in proc.stdout and "mm 16x16x16 float16 nn" in proc.stdout
    assert "fingerprint" in proc.stdout
    assert " yes " in proc.stdout  # the entry was measured on this machine's CPU


@pytest.mark.parametrize("extra", [[], ["--json"], ["--filter", "fp16"], ["--filter=bf16"],
                                   ["--cache-dir", "CACHE", "--json"], ["--cache-dir=CACHE"]])
def test_plain_cache_show_needs_no_typer_and_prints_what_typer_prints(cache_dir, cli, extra):
    """A plain `cache show` is answered before typer is imported (cli/show.py), with the
    output, errors and exit code of the typer command."""
    tune_json(cli, "--m", 16, "--n", 16, "--k", 16, "--templates", "aten")
    argv = ["cache", "show"] + [a.replace("CACHE", str(cache_dir)) for a in extra]
    runs = {}
    for entry in ("autotune_cli.cli", "autotune_cli.cli.commands"):
        code = (f"import sys; from {entry} import main; rc = main({argv!r}); "
                "print('RC', rc, 'TYPER', 'typer' in sys.modules, 'PROGRESS', 'rich.progress' in sys.modules)")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "AUTOTUNE_CACHE_DIR": str(cache_dir), "COLUMNS": "250"})
        runs[entry] = proc
    plain, typer_run = runs["autotune_cli.cli"], runs["autotune_cli.cli.commands"]
    assert "RC 0 TYPER False PROGRESS False" in plain.stdout, plain.stderr
    assert "RC 0 TYPER True" in typer_run.stdout, typer_run.stderr
    assert plain.stdout.split("RC")[0] == typer_run.stdout.split("RC")[0]
    assert plain.stderr == typer_run.stderr
    if extra == ["--filter=bf16"]:  # the one float16 entry does not match
        assert plain.stdout.startswith("RC 0") and "match 'bf16'" in plain.stderr
    else:
        assert "aten::mm" in plain.stdout


@pytest.mark.parametrize("argv", [
    ["cache", "show", "-h"], ["cache", "show", "--help"], ["cache", "show", "--cache-dir", ""],
    ["cache", "show", "--cache-dir="], ["cache", "show", "--filter"], ["cache", "show", "--jsn"],
    ["cache", "show", "--json=1"], ["cache", "show", "extra"], ["cache", "show", "--filter", "--json"],
    ["cache", "clear"], ["cache"], ["mm", "show"],
])
def test_what_is_not_a_plain_cache_show_goes_through_typer(argv):
    from autotune_cli.cli.show import plain_show

    assert plain_show(argv) is None


def test_plain_cache_show_reads_its_options_as_typer_does():
    from pathlib import Path

    from autotune_cli.cli.show import plain_show

    assert plain_show(["cache", "show"]) == {"cache_dir": None, "json_out": False, "filter_text": None}
    assert plain_show(["cache", "show", "--filter", "a", "--json", "--filter=b", "--cache-dir", "x"]) == \
        {"cache_dir": Path("x"), "json_out": True, "filter_text": "b"}


@pytest.mark.parametrize("argv", [["cache", "path"], ["cache", "show", "--json"]])
def test_a_tilde_in_a_path_option_is_the_home_folder(tmp_path, monkeypatch, cli, argv):
    """`--cache-dir=~/x` reaches us with its ~ (the shell expands none after "="): it is the
    home folder's x, as AUTOTUNE_CACHE_DIR=~/x is, not a folder named "~" in the current one."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(*argv, "--cache-dir=~/tuned")
    assert code == 0, err
    assert str(tmp_path / "home" / "tuned" / "autotune-cache.json") in out
    assert not (tmp_path / "~").exists()


def test_a_tilde_in_from_is_the_home_folder(tmp_path, monkeypatch, cli):
    home = tmp_path / "home"
    home.mkdir()
    (home / "list.json").write_text("[]")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("mm", "--from=~/list.json", "--device", "cpu")
    assert code == 2 and f"{home / 'list.json'}: the list of problems is empty" in err, err


def test_an_empty_cache_dir_is_refused_on_either_path(cache_dir):
    for entry in ("autotune_cli.cli", "autotune_cli.cli.commands"):
        code = f"import sys; from {entry} import main; sys.exit(main(['cache', 'show']))"
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "AUTOTUNE_CACHE_DIR": " "})
        assert proc.returncode == 2 and proc.stderr.startswith("autotune: error: AUTOTUNE_CACHE_DIR is set but empty")


def test_cache_path_and_clear(cli, cache_dir):
    tune_json(cli, "--m", 16, "--n", 16, "--k", 16, "--templates", "aten")
    code, out, _ = cli("cache", "path")
    assert out.strip() == str(cache_dir / "autotune-cache.json")
    code, _, err = cli("cache", "clear", "--yes")
    assert code == 0 and "removed 1 entry" in err
    code, out, _ = cli("cache", "show", "--json")
    assert json.loads(out)["entries"] == {}


def test_cache_clear_empties_entries_filed_under_the_wrong_key(cli, cache_dir):
    """An entry not used (under a key that does not describe it) is in the file all the
    same: clear removes it and counts it."""
    tune_json(cli, "--m", 16, "--n", 16, "--k", 16, "--templates", "aten")
    path = cache_dir / "autotune-cache.json"
    document = json.loads(path.read_text())
    document["entries"] = {key.replace("/m16/", "/m17/"): e for key, e in document["entries"].items()}
    path.write_text(json.dumps(document))
    code, _, err = cli("cache", "clear", "--yes")
    assert code == 0 and "is not used" in err and "removed 1 entry" in err, err
    assert json.loads(path.read_text())["entries"] == {}


def _clear_with_stdin(cache_dir, stdin, *args):
    return subprocess.run([sys.executable, "-m", "autotune_cli", "cache", "clear", *args],
                          stdin=stdin, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "AUTOTUNE_CACHE_DIR": str(cache_dir)})


def test_cache_clear_without_a_terminal_needs_yes(cli, cache_dir):
    """`echo n | autotune cache clear` asks nobody: it refuses, one line, exit 2."""
    tune_json(cli, "--m", 16, "--n", 16, "--k", 16, "--templates", "aten")
    before = (cache_dir / "autotune-cache.json").read_text()
    read, write = os.pipe()
    os.write(write, b"n\n")
    os.close(write)
    try:
        proc = _clear_with_stdin(cache_dir, read)
    finally:
        os.close(read)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "without a terminal" in proc.stderr and "--yes" in proc.stderr
    assert (cache_dir / "autotune-cache.json").read_text() == before


def test_cache_clear_on_a_terminal_asks(cli, cache_dir):
    """On a terminal, "n" keeps the entries and "y" removes them."""
    import pty

    tune_json(cli, "--m", 16, "--n", 16, "--k", 16, "--templates", "aten")
    for answer, code, left in (("n", 1, 1), ("y", 0, 0)):
        leader, follower = pty.openpty()
        try:
            os.write(leader, f"{answer}\n".encode())
            proc = _clear_with_stdin(cache_dir, follower)
        finally:
            os.close(leader)
            os.close(follower)
        assert proc.returncode == code, proc.stderr
        assert "remove 1 entry" in proc.stdout
        assert len(json.loads(cli("cache", "show", "--json")[1])["entries"]) == left


def test_a_space_file_is_checked_before_the_cache_and_a_new_space_is_tuned(cli, cache_dir, tmp_path):
    """--space on a cached problem: a bad file is said (exit 2, nothing changed), a space
    other than the one the entry was tuned with is tuned, the same space again is a hit."""
    base = ("--m", 32, "--n", 32, "--k", 32, "--templates", "aten,triton::mm")
    first, _ = tune_json(cli, *base)
    bad = tmp_path / "bad.json"
    bad.write_text('[{"BLOCK_M": 48, "BLOCK_N": 16, "BLOCK_K": 16, "num_stages": 1, "num_warps": 1}]')
    before = (cache_dir / "autotune-cache.json").read_bytes()
    code, out, err = cli("mm", "--device", "cpu", *base, "--space", bad)
    assert code == 2 and out == "" and "BLOCK_M=48 must be a power of two" in err, err
    assert (cache_dir / "autotune-cache.json").read_bytes() == before
    space = tmp_path / "space.json"
    space.write_text('[{"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "num_stages": 1, "num_warps": 1}]')
    tuned, err = tune_json(cli, *base, "--space", space)
    assert not tuned["from_cache"] and "tuned with other configs" in err
    triton = [c["params"] for c in tuned["candidates"] if c["uid"] == "triton::mm"]
    assert [(p["BLOCK_M"], p["BLOCK_N"], p["BLOCK_K"]) for p in triton] == [(16, 16, 16)]
    assert (16, 16, 16) not in [(c["params"]["BLOCK_M"], c["params"]["BLOCK_N"], c["params"]["BLOCK_K"])
                                for c in first["candidates"] if c["uid"] == "triton::mm"]
    again, _ = tune_json(cli, *base, "--space", space)
    assert again["from_cache"]
    # --force tunes whatever the entry holds: the space is not said to differ
    other = tmp_path / "other.json"
    other.write_text('[{"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "num_stages": 1, "num_warps": 1}]')
    forced, err = tune_json(cli, *base, "--space", other, "--force")
    assert not forced["from_cache"] and "other configs" not in err, err
    # the entry now holds the winner of other.json's configs: a lookup without --space is
    # answered by it, saying so; the exhaustive search is not (it lists its own space)
    plain, err = tune_json(cli, *base)
    assert plain["from_cache"] and plain["winner"] == forced["winner"]
    assert (f"the cached winner of mm 32x32x32 float16 nn is the best of the configs {other} lists "
            "(--space); --force tunes the default search") in "\n".join(messages(err)), err
    stored = json.loads((cache_dir / "autotune-cache.json").read_text())["entries"]
    assert [e["space"] for e in stored.values()] == [str(other)]
    _, err = tune_json(cli, *base, "--space", other)
    assert "--space" not in err
    # a selection of templates that take no configs: the space changed nothing it asks
    aten = ("--m", 32, "--n", 32, "--k", 32, "--templates", "aten")
    _, err = tune_json(cli, *aten)
    assert "--space" not in err
    # a tune of other configs' source keeps none of the space's results: the exhaustive
    # search of aten alone, then of both, is no hit on the space's tile
    tune_json(cli, *aten, "--search", "exhaustive", "--force")
    wider, _ = tune_json(cli, *base, "--search", "exhaustive")
    assert not wider["from_cache"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a device that is always full)")
@pytest.mark.parametrize("args", [["mm", "--m", "4", "--n", "4", "--k", "4", "--device", "cpu", "--templates", "aten"],
                                  ["cache", "show", "--json"], ["cache", "show"], ["cache", "path"],
                                  ["cache", "export", "-f", "autotune"]],
                         ids=["mm", "show-json", "show", "path", "export"])
def test_a_failed_write_to_stdout_is_one_line_exit_1(cache_dir, args):
    """stdout on a full disk: one line on stderr and exit 1, in every command, whoever writes."""
    subprocess.run([sys.executable, "-m", "autotune_cli", "mm", "--m", "4", "--n", "4", "--k", "4",
                    "--device", "cpu", "--templates", "aten"], capture_output=True,
                   env={**os.environ, "AUTOTUNE_CACHE_DIR": str(cache_dir)}, timeout=300, check=True)
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "autotune_cli", *args], stdout=full, stderr=subprocess.PIPE,
                              text=True, env={**os.environ, "AUTOTUNE_CACHE_DIR": str(cache_dir)}, timeout=300)
    said = [line for line in proc.stderr.splitlines() if line.startswith("autotune:")]
    assert proc.returncode == 1, proc.stderr
    assert said == ["autotune: error: cannot write to stdout: No space left on device"], proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr


def test_a_closed_pipe_on_stdout_stays_quiet(cache_dir):
    """A reader that stops early (`| head -1`): no error, no traceback."""
    reader = subprocess.Popen([sys.executable, "-m", "autotune_cli", "cache", "show", "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "AUTOTUNE_CACHE_DIR": str(cache_dir), "COLUMNS": "80"})
    reader.stdout.close()  # before the command writes anything
    err = reader.stderr.read()
    reader.wait(timeout=60)
    assert "Traceback" not in err and "error" not in err, err
