"""The command's two consoles (stdout for data, stderr for notes and progress), apart from
typer so that the commands answered without it (`cache show`: cli/show.py) print alike."""

from __future__ import annotations

import os
import sys

from rich.console import Console


def _width(stream) -> int | None:
    """The width to draw at: COLUMNS where it is a positive number; else a terminal's own
    (None: rich asks it as it draws); else 80. COLUMNS=0, as some CI runners and shells set
    it, is no width: rich would read it and draw at 0 columns, which prints nothing at all,
    errors and --json included."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if stream is None or not stream.isatty():
        return 80
    if not columns.isdigit():  # unset or not a number: rich leaves it alone
        return None
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (OSError, ValueError, AttributeError):
        return 80


def _console(stderr: bool) -> Console:
    """Without a terminal (a pipe, a file), draw 80 columns, as a terminal of the usual
    width shows: what a script or a log keeps reads the same. COLUMNS overrides both
    (`_width`).

    Prose on stdout (fingerprints, totals) wraps at words to the width; JSON is printed
    with soft_wrap=True, unbroken. Errors on stderr stay one line each, wrapped by the
    terminal, so that a script reading them gets one line."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, highlight=False, soft_wrap=stderr, width=_width(stream))


out = _console(stderr=False)
err = _console(stderr=True)


class StdoutFailed(Exception):
    """The command's data could not be written to stdout (a full disk, a closed file): one
    line and exit 1, not a traceback. A broken pipe is not this: rich exits on it quietly."""


class GuardedStdout:
    """A stream standing for `stream` (the process's stdout) whose failed writes raise
    StdoutFailed, whoever writes (rich, print, a plain write): the command's entry point
    (cli.run) installs it, so that one place reports the failure. Everything else is the
    stream's."""

    def __init__(self, stream) -> None:
        self._stream = stream  # None where the command was started with stdout closed

    def write(self, text: str) -> int:
        if self._stream is None:
            raise StdoutFailed("it is closed")
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutFailed(exc.strerror or str(exc)) from None

    def flush(self) -> None:
        if self._stream is None:
            return
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutFailed(exc.strerror or str(exc)) from None

    def __getattr__(self, name: str):
        return getattr(self._stream, name)
