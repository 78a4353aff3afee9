"""`autotune mm --from FILE`: the file's format, its errors (one line, exit 2, naming the
entry and the field), and a list tuned in one process with one executor, resumed from the
cache."""

import json
import re
import subprocess
import sys

import pytest

from autotune_cli.tune import tuner as tuner_module
from autotune_cli.errors import UserError
from autotune_cli.model.shapes_file import read_problems


def write(tmp_path, data, name="shapes.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_every_field_of_the_flags(tmp_path):
    path = write(tmp_path, {"problems": [
        {"m": 1, "n": 4096, "k": 4096, "dtype": "bf16", "layout": "NT"},
        {"m": 64, "n": 32, "k": 16, "bias": True, "bias_shape": "mn", "dtype": "float32", "allow_tf32": True},
        {"m": 8, "n": 8, "k": 8, "batch": 3, "dtype": "float16"},
        {"m": 8, "n": 8, "k": 8, "batch": None, "bias": False},
    ]})
    first, second, third, fourth = read_problems(path, "cpu")
    assert (first.op, first.m, first.n, first.k, first.dtype, first.layout) == ("mm", 1, 4096, 4096, "bfloat16", "nt")
    assert (second.op, second.bias, second.allow_tf32) == ("addmm", "mn", True)
    assert (third.op, third.b) == ("bmm", 3)
    assert (fourth.op, fourth.dtype, fourth.layout, fourth.device) == ("mm", "float16", "nn", "cpu")


def test_a_list_saved_with_a_byte_order_mark_is_read(tmp_path):
    """Windows editors and PowerShell's Out-File begin UTF-8 with a BOM, which json refuses."""
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps([{"m": 16, "n": 32, "k": 64, "dtype": "bf16"}]).encode())
    (problem,) = read_problems(path, "cpu")
    assert (problem.m, problem.n, problem.k, problem.dtype) == (16, 32, 64, "bfloat16")


def test_a_space_saved_with_a_byte_order_mark_is_read(tmp_path):
    from autotune_cli.heuristics.spaces import load_space_file

    config = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 2, "num_warps": 4}
    path = tmp_path / "space.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps([config]).encode())
    assert load_space_file(path)["*"][0]["BLOCK_M"] == 32


@pytest.mark.parametrize("data, message", [
    ("[{\"m\": 1,", "not JSON"),
    ({"m": 1, "n": 2, "k": 3}, "must hold a list of problems"),
    ([], "the list of problems is empty"),
    ([{"m": 4, "n": 4, "k": 4}, 7], "entry 2: must be an object"),
    ([{"m": 4, "n": 4}], "entry 1: field 'k' is missing"),
    ([{"m": 4, "n": 4, "k": 4}, {"m": 4, "n": 4, "k": 4, "M": 4}], "entry 2: field 'M' is unknown"),
    ([{"m": 0, "n": 4, "k": 4}], "entry 1: field 'm' must be between 1 and"),
    ([{"m": 4, "n": "4", "k": 4}], "entry 1: field 'n' must be an integer"),
    ([{"m": 4, "n": 4, "k": True}], "entry 1: field 'k' must be an integer"),
    ([{"m": 4, "n": 4, "k": 4, "batch": 2.0}], "entry 1: field 'batch' must be an integer"),
    ([{"m": 4, "n": 4, "k": 4, "dtype": "int8"}], "entry 1: field 'dtype' is 'int8': choose one of"),
    ([{"m": 4, "n": 4, "k": 4, "layout": "xn"}], "entry 1: field 'layout' is 'xn': choose one of nn"),
    ([{"m": 4, "n": 4, "k": 4, "bias": "yes"}], "entry 1: field 'bias' must be true or false"),
    ([{"m": 4, "n": 4, "k": 4, "bias": True, "bias_shape": "m"}], "entry 1: field 'bias_shape' is 'm'"),
    ([{"m": 4, "n": 4, "k": 4, "bias_shape": "mn"}], "entry 1: field 'bias_shape' needs"),
    ([{"m": 4, "n": 4, "k": 4, "bias": True, "batch": 2}], "entry 1: field 'bias' cannot go with 'batch'"),
    ([{"m": 4, "n": 4, "k": 4, "allow_tf32": True}], "entry 1: field 'allow_tf32' only applies to float32"),
])
def test_a_bad_file_is_one_line_exit_2(tmp_path, cache_dir, cli, data, message):
    path = write(tmp_path, data)
    with pytest.raises(UserError, match=message):
        read_problems(path, "cpu")
    code, out, err = cli("mm", "--from", path, "--device", "cpu")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and out == "" and len(lines) == 1
    assert lines[0].startswith(f"autotune: error: {path}: ") and message in lines[0]
    assert not (cache_dir / "autotune-cache.json").exists()


def test_from_refuses_problem_flags_and_a_missing_file(tmp_path, cache_dir, cli):
    path = write(tmp_path, [{"m": 4, "n": 4, "k": 4}])
    code, _, err = cli("mm", "--from", path, "--dtype", "bfloat16", "--device", "cpu")
    assert code == 2 and "--dtype goes there" in err
    code, _, err = cli("mm", "--from", tmp_path / "none.json", "--device", "cpu")
    assert code == 2 and "file not found" in err
    code, _, err = cli("mm", "--m", 4, "--n", 4, "--device", "cpu")
    assert code == 2 and "missing option '--k'" in err


def test_no_traceback_from_the_command(tmp_path, cache_dir):
    path = write(tmp_path, [{"m": 4, "n": 4, "k": 4, "dtype": "int8"}])
    proc = subprocess.run([sys.executable, "-m", "autotune_cli", "mm", "--from", str(path), "--device", "cpu"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"autotune: error: {path}: entry 1: field 'dtype' is 'int8': "
                                                "choose one of float16, bfloat16, float32, float8_e4m3fn"]


@pytest.fixture
def executors(monkeypatch):
    """Counts the executors the tuner makes (each starts its own worker pool)."""
    made = []

    class Counted(tuner_module.LocalExecutor):
        def __init__(self, *args, **kwargs):
            made.append(self)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(tuner_module, "LocalExecutor", Counted)
    return made


def test_a_list_is_tuned_with_one_executor_and_resumes(tmp_path, cache_dir, cli, executors):
    entries = [{"m": 8, "n": 8, "k": 8}, {"m": 4, "n": 12, "k": 8, "dtype": "float32", "bias": True},
               {"m": 8, "n": 8, "k": 8, "batch": 2, "layout": "nt"}]
    path = write(tmp_path, entries[:1])
    code, out, _ = cli("mm", "--from", path, "--device", "cpu", "--templates", "aten", "--json")
    assert code == 0 and json.loads(out)["problems"][0]["from_cache"] is False
    assert len(executors) == 1
    path = write(tmp_path, entries)  # the first is in the cache now: as after an interruption
    code, out, err = cli("mm", "--from", path, "--device", "cpu", "--templates", "aten", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["from"] == str(path)
    rows = doc["problems"]
    assert [r["describe"] for r in rows] == ["mm 8x8x8 float16 nn", "addmm 4x12x8 float32 nn bias[n]",
                                             "bmm 2x8x8x8 float16 nt"]
    assert [r["from_cache"] for r in rows] == [True, False, False]
    assert [r["winner"]["uid"] for r in rows] == ["aten::mm", "aten::addmm", "aten::bmm"]
    assert [r["sources"] for r in rows] == [["entry 1"], ["entry 2"], ["entry 3"]]
    assert len(executors) == 2  # one more for the two problems tuned together
    assert "cached: mm 8x8x8" in err and "tuned: bmm 2x8x8x8" in err
    # all cached: the table, and no executor at all
    code, out, _ = cli("mm", "--from", path, "--device", "cpu", "--templates", "aten")
    assert code == 0 and len(executors) == 2
    assert "winners" in out and "aten::addmm" in out and out.count("yes") == 3


@pytest.mark.parametrize("flags, message", [
    (["--dtype", "float16"], "--dtype goes there (field 'dtype')"),  # its default, given: refused all the same
    (["--layout", "nn"], "--layout goes there"),
    (["--fast-accum"], "--fast-accum goes there"),
    (["--top", "10"], "--top does not apply to --from: its table has one row per problem"),
])
def test_from_refuses_what_it_would_ignore_even_at_its_default(tmp_path, cache_dir, cli, flags, message):
    """A flag given with --from is refused whatever its value: the file's fields say, and
    the winners' table has no per-problem rows for --top to bound."""
    path = write(tmp_path, [{"m": 4, "n": 4, "k": 4}])
    code, out, err = cli("mm", "--from", path, *flags, "--device", "cpu")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and out == "" and len(lines) == 1 and message in lines[0], err
    assert not (cache_dir / "autotune-cache.json").exists()


def test_from_help_names_every_field_the_file_takes():
    from autotune_cli.cli.app import FROM_HELP
    from autotune_cli.model.shapes_file import FIELDS

    assert [name for name in FIELDS if not re.search(rf"\b{name}\b", FROM_HELP)] == []
    assert "--top" in FROM_HELP
