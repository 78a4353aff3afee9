import os
import shutil

# Without a GPU, Triton runs under its interpreter; that must be chosen before triton is
# imported anywhere in this process. With a GPU, in-process kernels compile for it (and the
# tests that run Triton on CPU tensors in-process are skipped, below).
GPU_PRESENT = os.path.exists("/dev/nvidiactl") or shutil.which("nvidia-smi") is not None
if not GPU_PRESENT:
    os.environ.setdefault("TRITON_INTERPRET", "1")
INTERPRETING = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
IN_PROCESS_CPU_KERNEL_MODULES = ("test_templates.py", "test_templates_persistent_tma_splitk.py",
                                 "test_templates_fp8.py", "test_decode_attention.py")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

PLUGINS = Path(__file__).parent / "plugins"


def ran_verified(candidate: dict) -> bool:
    """A candidate that built, ran and passed verification: timed OK, or given up after its
    first runs (far slower than the problem's best so far, TimingPolicy.give_up_over), which
    is checked like an OK one before it is recorded skipped."""
    from autotune_cli.runner.candidate import GAVE_UP

    return candidate["status"] == "ok" or (candidate["status"] == "skipped"
                                           and (candidate.get("error") or "").startswith(GAVE_UP))


def is_pick(winner: dict, candidates: list[dict]) -> bool:
    """Whether a stored entry's winner ({"uid", "params", ...}) is what pick.pick_winner
    picks from its stored candidates (their times and `confirmed` flags as the tune left them)."""
    from autotune_cli.search.pick import pick_winner
    from autotune_cli.store.results import Candidate

    pick = pick_winner([Candidate.from_dict(c) for c in candidates])
    return pick is not None and (pick.uid, pick.params) == (winner["uid"], winner["params"])


def recorded_and_compiled(cli, tmp_path, model, *inputs):
    """A model's problems recorded on an eager no-grad run, tuned from that list on the CPU
    (aten), then the model compiled over that cache (aot_eager, no tuning) and run: (eager
    output, compiled output, its routes, the list's path)."""
    import torch

    import autotune_cli

    path = tmp_path / "shapes.json"
    with torch.no_grad(), autotune_cli.record(path):
        want = model(*inputs)
    code, _, err = cli("mm", "--from", path, "--device", "cpu", "--templates", "aten", "--workers", "1")
    assert code == 0, err
    routes: list = []
    with torch.no_grad():
        got = autotune_cli.compile(model, backend="aot_eager", routes=routes, tune=False)(*inputs)
    return want, got, routes, path


def messages(text: str) -> list[str]:
    """The messages a command printed, each on one line: a message wraps at the width, its
    lines after the first indented (autotune_cli/console.message_lines); here they are joined again."""
    said: list[str] = []
    for line in text.splitlines():
        if line.startswith(" ") and said:
            said[-1] += " " + line.strip()
        elif line.strip():
            said.append(line)
    return said


def pytest_collection_modifyitems(config, items):
    if not INTERPRETING:
        needs = pytest.mark.skip(reason="runs Triton on CPU tensors in-process: needs TRITON_INTERPRET=1")
        for item in items:
            if item.fspath.basename in IN_PROCESS_CPU_KERNEL_MODULES and "gpu" not in item.keywords:
                item.add_marker(needs)
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
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
def fresh_compile():
    """Compile tests: the API's plans and Dynamo's compiled graphs forgotten before and after."""
    import torch

    from autotune_cli import api

    api.reset()
    torch._dynamo.reset()
    yield
    api.reset()
    torch._dynamo.reset()


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run the CLI in-process: returns (exit code, stdout, stderr). Its tables are drawn 160
    columns wide, so that a row reads whole; the width a pipe gets is tested on its own
    (test_cli_text.py)."""
    from autotune_cli.cli import main
    from autotune_cli.cli import console

    for stream in (console.out, console.err):
        monkeypatch.setattr(stream, "width", 160)

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
