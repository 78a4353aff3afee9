"""README's example scripts are files under examples/, the same text as README shows, and
they run: what they write is what README's next commands read."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]


def readme_block_after(marker: str) -> str:
    """The first ```python block of README after `marker`."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index(marker)
    match = re.search(r"```python\n(.*?)```", readme[start:], re.S)
    assert match, f"no python block after {marker!r}"
    return match.group(1)


def test_make_model_is_shipped_as_readme_shows_it():
    assert "`examples/make_model.py`" in (ROOT / "README.md").read_text()
    assert readme_block_after("`examples/make_model.py` writes") == (ROOT / "examples" / "make_model.py").read_text()


@pytest.mark.slow
def test_make_model_writes_what_readmes_commands_read(tmp_path):
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": str(tmp_path / "cache")}
    made = subprocess.run([sys.executable, str(ROOT / "examples" / "make_model.py")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env=env)
    assert made.returncode == 0, made.stderr
    assert {p.name for p in tmp_path.iterdir()} >= {"mlp.pt2", "dyn.pt2", "mlp.pt"}

    def plan(*args) -> list[dict]:
        proc = subprocess.run([sys.executable, "-m", "autotune_cli", "model", *args, "--plan", "--json",
                               "--device", "cpu"], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300, env=env)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["plan"]

    mlp = plan("mlp.pt2")
    assert sorted(row["describe"] for row in mlp) == ["addmm 32x256x64 float16 nt bias[n]",
                                                     "addmm 32x64x256 float16 nt bias[n]"]
    dynamic = plan("dyn.pt2", "--hint", "input.0=1,16,128")
    assert {tuple(row["hint"].values()) for row in dynamic} == {(1,), (16,), (128,)}
    scripted = plan("mlp.pt", "--input-shape", "32x64:float16", "--trust-torchscript")
    assert sorted(row["describe"] for row in scripted) == sorted(row["describe"] for row in mlp)
