import os

# Triton's interpreter must be chosen before triton is imported anywhere in this process.
os.environ.setdefault("TRITON_INTERPRET", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

PLUGINS = Path(__file__).parent / "plugins"


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except Exception:
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(path))
    return path


@pytest.fixture
def cli(capsys):
    """Run the CLI in-process: returns (exit code, stdout, stderr)."""
    from autotune_cli.cli import main

    def run(*args):
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


@pytest.fixture(autouse=True)
def isolated_registries():
    """Plugins register templates globally: give each test the built-in registries back."""
    from autotune_cli import plugins
    from autotune_cli.heuristics import registry as heuristics
    from autotune_cli.templates import registry as templates

    saved = (dict(templates._TEMPLATES), dict(heuristics._HEURISTICS), set(plugins._LOADED))
    yield
    templates._TEMPLATES.clear()
    templates._TEMPLATES.update(saved[0])
    heuristics._HEURISTICS.clear()
    heuristics._HEURISTICS.update(saved[1])
    plugins._LOADED.clear()
    plugins._LOADED.update(saved[2])
