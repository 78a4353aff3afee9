"""Plugins: modules (or .py files) that register extra templates and heuristics.

`--plugin PATH_OR_MODULE` loads them in the CLI process and in every worker, so a user's
own template is enumerated, benchmarked and verified like a built-in one.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path

from .errors import UserError

_LOADED: set[str] = set()


def load_plugins(specs: tuple[str, ...] | list[str]) -> None:
    for spec in specs:
        if spec in _LOADED:
            continue
        path = Path(spec)
        if spec.endswith(".py"):
            if not path.is_file():
                raise UserError(f"plugin file not found: {spec}")
            name = "autotune_plugin_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
            module_spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module
            module_spec.loader.exec_module(module)
        else:
            try:
                importlib.import_module(spec)
            except ModuleNotFoundError as exc:
                raise UserError(f"plugin module {spec!r} not found: {exc}") from None
        _LOADED.add(spec)
