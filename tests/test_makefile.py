"""`make install`'s torch: PyTorch's CPU wheel index where there is no GPU (the default index's
torch is the CUDA build, ~3 GB), left out where it cannot be reached, where a GPU is found,
and where TORCH_INDEX is empty (CI). Read from `make -n`: nothing is installed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _outside_make() -> dict:
    """This environment less what a make that runs pytest (`make test`, CI's) hands its
    children: its flags, and its command-line variables, which reach them as environment
    variables (TORCH_INDEX= in CI) and would stand in for the Makefile's `?=` defaults."""
    defaults = set(re.findall(r"^(\w+) \?=", (ROOT / "Makefile").read_text(), re.M))
    dropped = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", *defaults}
    return {k: v for k, v in os.environ.items() if k not in dropped}


def torch_install(tmp_path: Path, *variables: str, gpu: bool = False) -> tuple[str, str]:
    """The pip line that installs torch in `make -n install`, and make's stderr. `gpu`: an
    nvidia-smi on PATH; without, PATH holds no nvidia-smi."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "sh").unlink(missing_ok=True)
    (bin_dir / "sh").symlink_to(shutil.which("sh"))
    smi = bin_dir / "nvidia-smi"
    smi.unlink(missing_ok=True)
    if gpu:
        smi.write_text("#!/bin/sh\nexit 0\n")
        smi.chmod(0o755)
    proc = subprocess.run([shutil.which("make"), "-n", "install", f"VENV={tmp_path / 'venv'}",
                           f"PYTHON={sys.executable}", *variables],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**_outside_make(), "PATH": str(bin_dir)})
    assert proc.returncode == 0, proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if "pip install" in line and "torch==" in line]
    return line, proc.stdout + proc.stderr


def test_without_a_gpu_torch_comes_from_the_cpu_index_where_it_answers(tmp_path):
    index = tmp_path / "index"  # a reachable index: a local folder, as pip takes one
    index.mkdir()
    line, _ = torch_install(tmp_path, f"TORCH_INDEX=file://{index}")
    assert f"--extra-index-url file://{index}" in line and "--index-url" not in line.replace("--extra-index-url", "")


def test_the_cpu_index_is_the_default_without_a_gpu_and_left_out_where_unreachable(tmp_path):
    line, said = torch_install(tmp_path)  # CI's machines, this one: download.pytorch.org unreachable
    reachable = CPU_INDEX in line
    assert reachable or f"note: {CPU_INDEX} cannot be reached; torch from the default index" in said
    line, said = torch_install(tmp_path, "TORCH_INDEX=http://127.0.0.1:9/simple")  # nothing listens
    assert "index-url" not in line and "127.0.0.1:9/simple cannot be reached" in said


def test_a_gpu_or_an_empty_torch_index_keeps_the_default_index(tmp_path):
    line, said = torch_install(tmp_path, gpu=True)
    assert "index-url" not in line and "cannot be reached" not in said
    line, said = torch_install(tmp_path, "TORCH_INDEX=")
    assert "index-url" not in line and "cannot be reached" not in said


def test_ci_opts_out_of_the_cpu_index():
    run = (ROOT / ".ci" / "run").read_text()
    (make,) = [line for line in run.splitlines() if line.startswith("make test")]
    assert make.split()[-1] == "TORCH_INDEX="
