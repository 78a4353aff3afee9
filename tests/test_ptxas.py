"""One ptxas for every process: torch's, as Inductor sets it (hardware/ptxas.py)."""
import os
import subprocess
import sys

from autotune_cli.hardware import ptxas


def fake_package(root, name, with_ptxas=True):
    folder = root / name
    (folder / "bin").mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    if with_ptxas:
        tool = folder / "bin" / "ptxas"
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)
    return folder


def test_torch_ptxas_is_the_packages_bin_ptxas(tmp_path, monkeypatch):
    folder = fake_package(tmp_path, "fake_torch_with")
    fake_package(tmp_path, "fake_torch_without", with_ptxas=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert ptxas.torch_ptxas("fake_torch_with") == folder / "bin" / "ptxas"
    assert ptxas.torch_ptxas("fake_torch_without") is None
    assert ptxas.torch_ptxas("no_such_package_here") is None


def test_the_variable_is_set_once_and_a_users_choice_stands(tmp_path, monkeypatch):
    tool = fake_package(tmp_path, "fake_torch") / "bin" / "ptxas"
    monkeypatch.setattr(ptxas, "torch_ptxas", lambda package="torch": tool)
    monkeypatch.delenv(ptxas.VARIABLE, raising=False)
    assert ptxas.use_compilers_ptxas() == str(tool)
    assert os.environ[ptxas.VARIABLE] == str(tool)
    monkeypatch.setenv(ptxas.VARIABLE, "/opt/mine/ptxas")
    assert ptxas.use_compilers_ptxas() == "/opt/mine/ptxas"


def test_importing_the_package_sets_it_where_torch_ships_one():
    """In a fresh interpreter: the package's import sets the variable exactly where torch has
    a bin/ptxas (a CUDA build), before anything could build a kernel."""
    env = {k: v for k, v in os.environ.items() if k != ptxas.VARIABLE}
    code = ("import os, autotune_cli\nfrom autotune_cli.hardware.ptxas import torch_ptxas\n"
            "want = torch_ptxas()\nprint(os.environ.get('TRITON_PTXAS_PATH') == (None if want is None else str(want)))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True", out.stderr
