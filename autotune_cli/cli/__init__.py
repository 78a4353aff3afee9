"""The command line: parse, build objects, call, format. Nothing else lives here.

app.py holds the typer app and what the commands share; tune.py (mm, model), from_list.py
(mm --from) and cache.py (the cache commands) register on it when this package imports
them. torch and triton are imported lazily inside the commands that need them; `autotune
cache show` imports neither. User errors print one line and exit 2; data goes to stdout and
progress to stderr, so `--json` pipes cleanly.
"""

from __future__ import annotations

import sys
from typing import List, Optional

import typer

try:  # typer >= 0.29 carries its own copy of click
    from typer._click import exceptions as click_errors
except ImportError:  # older typer runs on click itself
    from click import exceptions as click_errors
from ..errors import UserError
from . import cache, tune  # noqa: F401  (they register their commands on app)
from .app import Stopped, app, err, out


def run() -> None:
    """The `autotune` command: main(), then the forkserver is stopped (it holds the command's
    stdout and stderr open: runner/processes.stop_forkserver) before the process exits."""
    import signal

    def terminate(signum, frame):  # SIGTERM stops the command as Ctrl-C does (errors.Terminated)
        from ..errors import Terminated

        raise Terminated()

    signal.signal(signal.SIGTERM, terminate)
    try:
        code = main()
    finally:
        processes = sys.modules.get("autotune_cli.runner.processes")
        if processes is not None:  # not imported: no worker, no forkserver was started
            processes.stop_forkserver()
    sys.exit(code)


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point: one line and exit 2 for usage errors and bad input."""
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
        err.print(f"autotune: error: {exc.format_message()}", markup=False)
        return 2
    except typer.Abort:
        err.print("aborted")
        return 1
    except click_errors.ClickException as exc:
        err.print(f"autotune: error: {exc.format_message()}", markup=False)
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130
    return result if isinstance(result, int) else 0
