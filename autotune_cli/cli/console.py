"""The command's two consoles (stdout for data, stderr for notes and progress), apart from
typer so that the commands answered without it (`cache show`: cli/show.py) print alike;
both lay out their text by the package's one rule (autotune_cli/console.py). And the guard
on stdout that turns a failed write into one line.
"""

from __future__ import annotations

from ..console import message_console

out = message_console(stderr=False)
err = message_console(stderr=True)


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
