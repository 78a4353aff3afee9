"""Plugins as a careless or hostile user writes them: one that does not load is one line and
exit 2; what a plugin's candidate prints never reaches the command's stdout."""

import json
import os
import subprocess
import sys

import pytest

from conftest import PLUGINS


def run_cli(*args, cache_dir, timeout=240):
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": str(cache_dir)}
    return subprocess.run([sys.executable, "-m", "autotune_cli", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=timeout)


@pytest.mark.parametrize("source, message", [
    ("def oops(:\n", "SyntaxError"),
    ("raise RuntimeError('planted failure at import')\n", "RuntimeError: planted failure at import"),
    ("raise SystemExit(3)\n", "SystemExit"),
])
def test_a_plugin_that_fails_to_load_is_one_line_exit_2(tmp_path, source, message):
    plugin = tmp_path / "bad_plugin.py"
    plugin.write_text(source)
    proc = run_cli("mm", "--device", "cpu", "--m", 16, "--n", 16, "--k", 16, "--plugin", plugin,
                   cache_dir=tmp_path / "cache")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("autotune: error: plugin") and message in lines[0], lines


def test_a_printing_candidate_leaves_json_on_stdout_intact(tmp_path):
    proc = run_cli("mm", "--device", "cpu", "--json", "--m", 16, "--n", 16, "--k", 16, "--workers", 1,
                   "--plugin", PLUGINS / "chatty.py", "--templates", "test::chatty,aten::mm",
                   cache_dir=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # nothing but the document
    assert {c["uid"] for c in doc["candidates"]} == {"test::chatty", "aten::mm"}
    assert all(c["status"] == "ok" for c in doc["candidates"])
    assert "chatty: building" in proc.stderr and "chatty: raw }" in proc.stderr  # where it went
