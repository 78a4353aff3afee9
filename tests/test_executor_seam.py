"""The Executor protocol (runner/__init__.py) is all its callers use: the tuner, the search and
scaleout/ neither probe an executor with getattr nor reach into its workers."""

from __future__ import annotations

import ast
from pathlib import Path

from autotune_cli.runner import Executor
from autotune_cli.runner.executor import LocalExecutor

PACKAGE = Path(__file__).resolve().parent.parent / "autotune_cli"
CALLERS = [PACKAGE / "tune" / "tuner.py", *sorted((PACKAGE / "search").glob("*.py")),
           *sorted((PACKAGE / "scaleout").glob("*.py"))]
# what LocalExecutor keeps for itself: its workers and their processes, its logs, its pool
WORKERS = {"timers", "compilers", "compile_log", "process", "_shareable", "_borrowed"}
OWN = {"compile_pool", "startups"}  # also ExecutorStats' fields: read on an executor, they are its insides


def test_callers_use_the_protocol_alone():
    found = []
    for path in CALLERS:
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr")
                    and node.args and "executor" in ast.unparse(node.args[0])):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
            if isinstance(node, ast.Attribute) and (node.attr in WORKERS or (
                    node.attr in OWN and "executor" in ast.unparse(node.value))):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert not found, found


def test_the_local_executor_implements_every_method_of_the_protocol():
    declared = {name for name, value in vars(Executor).items() if callable(value) and not name.startswith("_")}
    assert {"start", "run", "take_stats", "lendable", "borrow", "prefetch", "compiles_ahead", "close"} <= declared
    assert all(getattr(LocalExecutor, name) is not getattr(Executor, name) for name in declared)
