"""The command line: parse, build objects, call, format. Nothing else lives here.

app.py holds the typer app and what the commands share; tune.py (mm, model), from_list.py
(mm --from) and cache.py (the cache commands) register on it when commands.py imports
them. A plain `cache show` is answered by show.py before typer is imported (typer and what
it loads are most of that command's time); tables.py draws the commands' tables. torch and
triton are imported lazily inside the commands that need them; `autotune cache show` imports
neither. User errors print one line and exit 2; data goes to stdout and progress to stderr,
so `--json` pipes cleanly.
"""

from __future__ import annotations

import sys
from typing import List, Optional


def run() -> None:
    """The `autotune` command: main(), then the forkserver is stopped (it holds the command's
    stdout and stderr open: runner/processes.stop_forkserver) before the process exits. A
    failed write to stdout is one line and exit 1 (console.StdoutFailed)."""
    import signal

    from .console import GuardedStdout, StdoutFailed

    def terminate(signum, frame):  # SIGTERM stops the command as Ctrl-C does (errors.Terminated)
        from ..errors import Terminated

        raise Terminated()

    signal.signal(signal.SIGTERM, terminate)
    sys.stdout = GuardedStdout(sys.stdout)
    try:
        try:
            code = main()
            sys.stdout.flush()  # what is still buffered fails here, not unreported at exit
        except StdoutFailed as exc:
            _stdout_failed(exc)
            code = 1
    finally:
        processes = sys.modules.get("autotune_cli.runner.processes")
        if processes is not None:  # not imported: no worker, no forkserver was started
            processes.stop_forkserver()
    sys.exit(code)


def _stdout_failed(exc: Exception) -> None:
    """Say so in one line; then stdout goes to the null device, so that the interpreter's
    own flush at exit (of what could not be written) neither fails nor prints."""
    import os

    from .console import err

    err.print(f"autotune: error: cannot write to stdout: {exc}", markup=False, highlight=False)
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno())
    except (OSError, AttributeError, ValueError):
        pass


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point: one line and exit 2 for usage errors and bad input."""
    from .show import plain_show

    args = plain_show(sys.argv[1:] if argv is None else list(argv))
    if args is None:
        from .commands import main as typer_main

        _note_namesakes()
        return typer_main(argv)
    from ..errors import UserError
    from .console import err
    from .show import show

    try:
        show(**args)
    except UserError as exc:
        err.print(f"autotune: error: {exc}", markup=False)
        return 2
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130
    return 0


def _note_namesakes() -> None:
    """One line naming an unrelated distribution installed here that ships the command
    `autotune` or the package `autotune_cli` too: the likely cause of whatever goes wrong."""
    from ..version import DISTRIBUTION, namesakes_installed
    from .console import err

    for found in namesakes_installed():
        name = found.split()[0]
        err.print(f"note: {found} is installed here too, an unrelated project that also ships the "
                  f"command autotune and the package autotune_cli; if autotune misbehaves: pip "
                  f"uninstall {name}, then reinstall {DISTRIBUTION}", markup=False, highlight=False)
