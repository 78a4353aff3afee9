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
    """Import each plugin once. A plugin that cannot be found or fails while it loads (a
    syntax error, an exception at import) is the user's error, one line: its name and the
    first line of what went wrong."""
    for spec in specs:
        if spec in _LOADED:
            continue
        if not spec.strip():
            raise UserError("--plugin needs a module name or a .py file, got an empty string")
        path = Path(spec)
        if ("/" in spec or spec in (".", "..")) and path.is_dir():  # a path, never a module name
            raise UserError(f"--plugin {spec} is a folder: give a module name or a .py file")
        if spec.endswith(".py"):
            if not path.is_file():
                raise UserError(f"plugin file not found: {spec}")
            name = "autotune_plugin_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
            try:
                module_spec = importlib.util.spec_from_file_location(name, path)
                module = importlib.util.module_from_spec(module_spec)
                sys.modules[name] = module
                module_spec.loader.exec_module(module)
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - whatever the plugin raised is one line
                sys.modules.pop(name, None)
                raise UserError(f"plugin {spec} failed to load: {_first_line(exc)}") from None
        else:
            try:
                importlib.import_module(spec)
            except ModuleNotFoundError as exc:
                raise UserError(f"plugin module {spec!r} not found: {exc}") from None
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - '.', a relative name, or the module raised
                raise UserError(f"plugin module {spec!r} failed to load: {_first_line(exc)}") from None
        _LOADED.add(spec)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    where = ""
    if isinstance(exc, SyntaxError) and exc.lineno:
        where = f" (line {exc.lineno})"
        text = [exc.msg or ""]
    return f"{type(exc).__name__}: {text[0] if text else ''}{where}"[:300]
