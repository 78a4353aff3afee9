"""The wheel holds every package and data file of the checkout, under the project's name.

The other tests import the checkout itself, so they cannot see a subpackage the wheel leaves
out; this one builds the wheel (from a copy of what a commit would hold) and reads its file
list. `.ci/wheel_smoke.sh` then installs such a wheel and runs it.
"""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import autotune_cli

ROOT = Path(__file__).resolve().parents[1]

BUILD = """
import sys, warnings
from setuptools import build_meta
from setuptools.warnings import SetuptoolsDeprecationWarning
warnings.simplefilter("error", SetuptoolsDeprecationWarning)  # e.g. a license table
print(build_meta.build_wheel(sys.argv[1]))
"""


def source_files() -> list[str]:
    """Tracked files and untracked ones git does not ignore: what a commit would hold."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], capture_output=True, check=True).stdout
    return [name for name in listed.decode().split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    src = tmp_path_factory.mktemp("src")
    for name in source_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    dist = tmp_path_factory.mktemp("dist")
    built = subprocess.run([sys.executable, "-c", BUILD, str(dist)], cwd=src, capture_output=True,
                           text=True, timeout=300)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return zipfile.ZipFile(dist / built.stdout.strip().splitlines()[-1])


def expected_files() -> set[str]:
    """Every file under autotune_cli/ (modules and data alike: a data file of a new kind
    fails here until pyproject's package-data names it), and configs/ as autotune_cli/configs/."""
    wanted = set()
    for name in source_files():
        path = Path(name)
        if path.parts[0] == "autotune_cli":
            wanted.add(name)
        elif path.parts[0] == "configs":
            wanted.add("autotune_cli/" + name)
    return wanted


def test_wheel_holds_every_package_and_data_file(wheel):
    names = set(wheel.namelist())
    wanted = expected_files()
    packages = {str(Path(name).parent) for name in wanted if name.endswith(".py")}
    # the ones whose absence has broken installs, and the data the tuner reads
    assert {"autotune_cli/search", "autotune_cli/runner", "autotune_cli/templates",
            "autotune_cli/heuristics", "autotune_cli/configs"} <= packages
    assert any(n.startswith("autotune_cli/configs/") and n.endswith(".json") for n in wanted)
    assert any(n.startswith("autotune_cli/templates/") and n.endswith(".jinja") for n in wanted)
    missing = sorted(wanted - names)
    assert not missing, f"the wheel leaves out {missing}"
    strays = sorted(n for n in names if not n.startswith(("autotune_cli/", "gemm_autotune-")))
    assert not strays, f"the wheel holds files outside the package: {strays}"


def test_wheel_metadata_names_the_distribution(wheel):
    info = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    metadata = email.message_from_bytes(wheel.read(info))
    assert metadata["Name"] == autotune_cli.DISTRIBUTION == "gemm-autotune"
    assert metadata["Version"] == autotune_cli.__version__
    assert metadata["License-Expression"] == "BSD-3-Clause"
    entry_points = wheel.read(info.replace("METADATA", "entry_points.txt")).decode()
    assert "autotune = autotune_cli.cli:run" in entry_points


def test_version_names_the_distribution_without_torch():
    proc = subprocess.run([sys.executable, "-c", "import sys\nfrom autotune_cli.cli import main\n"
                           "code = main(['--version'])\nassert 'torch' not in sys.modules\n"
                           "sys.exit(code)"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"autotune {autotune_cli.__version__} (gemm-autotune)\n"


@pytest.mark.parametrize("args", [[], ["mm"], ["model"], ["cache"], ["cache", "show"],
                                  ["cache", "clear"], ["cache", "prune"], ["cache", "export"]])
def test_dash_h_is_help_on_every_command(cli, args):
    code, out, err = cli(*args, "-h")
    code_long, out_long, _ = cli(*args, "--help")
    assert code == code_long == 0, err
    assert out == out_long and out.startswith("Usage: autotune")
    assert "-h, --help" in out
