"""The package's layout (docs/architecture.md, "The package's layout"): few modules at the
root, and an import graph, imports inside functions and under TYPE_CHECKING included, with
no circle and no import from a package up to one above it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "autotune_cli"
# Low to high: a module may import its own package, the root and what is listed before it.
LAYERS = [
    {"errors", "text", "console", "version", "safe_read", "problem", "plugins"},
    {"hardware"}, {"settings"}, {"store"}, {"templates"}, {"heuristics", "model"},
    {"candidates"}, {"runner"}, {"search"}, {"tune"}, {"export", "api"}, {"scaleout"},
    {"routing"}, {"cli"}, {"__init__", "__main__"},
]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """{module: the package's modules it imports}, read from every file's syntax tree."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.split(".")[0] == "autotune_cli")
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target.split(".")[0] != "autotune_cli":
                    continue
                for alias in node.names:  # `from . import x` names a module where x is one
                    sub = f"{target}.{alias.name}"
                    is_module = (PACKAGE.parent / sub.replace(".", "/")).with_suffix(".py").exists() or \
                        (PACKAGE.parent / sub.replace(".", "/")).is_dir()
                    found.add(sub if is_module else target)
    return graph


def part(module: str) -> str:
    """The root module or the package a module belongs to ("__init__" for the root itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_the_root_holds_ten_modules_or_fewer():
    assert len(list(PACKAGE.glob("*.py"))) <= 10


def test_every_module_has_a_layer():
    assert {part(m) for m in imports()} <= set(RANK)


def test_no_import_goes_up_a_layer():
    upward = [f"{m} -> {t}" for m, targets in imports().items() for t in sorted(targets)
              if RANK[part(t)] > RANK[part(m)]
              or (RANK[part(t)] == RANK[part(m)] and part(t) != part(m) and RANK[part(m)] > 0)]
    assert not upward, upward


def test_no_import_circle():
    graph = imports()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circles = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1 and target != module:
                circles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not circles, circles
