"""The typer side of the command line: the commands registered on the app (tune.py:
mm, model; cache.py: the cache commands), and `main`, which runs the app and turns what it
raises into one line and an exit code."""

from __future__ import annotations

import re
from typing import List, Optional

import typer

try:  # typer >= 0.29 carries its own copy of click
    from typer._click import exceptions as click_errors
except ImportError:  # older typer runs on click itself
    from click import exceptions as click_errors
from ..errors import UserError
from . import cache, tune  # noqa: F401  (they register their commands on app)
from .app import Stopped, app, err, out


def one_line(message: str) -> str:
    """click's message on one line (a missing choice lists the choices one a line), without
    the "Value error, " that typer's validation puts before a bad choice."""
    return re.sub(r"\s*\n\s*", " ", message.strip()).replace(": Value error, ", ": ")


def main(argv: Optional[List[str]] = None) -> int:
    """One line and exit 2 for usage errors and bad input."""
    try:
        result = app(args=argv, prog_name="autotune", standalone_mode=False)
    except UserError as exc:
        err.print(f"autotune: error: {exc}", markup=False)
        return 2
    except Stopped as exc:
        err.print(f"autotune: {exc}", markup=False, highlight=False)
        return exc.code
    except click_errors.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare command: show its help
            out.print(exc.format_message(), markup=False, soft_wrap=True)
            return 0
        err.print(f"autotune: error: {one_line(exc.format_message())}", markup=False)
        return 2
    except typer.Abort:
        err.print("aborted")
        return 1
    except click_errors.ClickException as exc:
        err.print(f"autotune: error: {one_line(exc.format_message())}", markup=False)
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130
    return result if isinstance(result, int) else 0
