"""The command's two consoles (stdout for data, stderr for notes and progress), apart from
typer so that the commands answered without it (`cache show`: cli/show.py) print alike."""

from __future__ import annotations

import os
import sys

from rich.console import Console


def _console(stderr: bool) -> Console:
    """Without a terminal (a pipe, a file), draw 80 columns, as a terminal of the usual
    width shows: what a script or a log keeps reads the same. COLUMNS overrides both.

    Prose on stdout (fingerprints, totals) wraps at words to the width; JSON is printed
    with soft_wrap=True, unbroken. Errors on stderr stay one line each, wrapped by the
    terminal, so that a script reading them gets one line."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or os.environ.get("COLUMNS") else 80
    return Console(stderr=stderr, highlight=False, soft_wrap=stderr, width=width)


out = _console(stderr=False)
err = _console(stderr=True)
