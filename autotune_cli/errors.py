"""Error types that cross layers.

`UserError` is bad input from the person running the tool: the CLI prints its message on
one line and exits with code 2. Anything else is an internal error and keeps its traceback.
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad input: a flag, a file, a size. Printed as one line, exit code 2."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt, so that whatever
    stops cleanly on Ctrl-C (workers killed, finished results saved) does on SIGTERM too."""


class Interrupted(KeyboardInterrupt):
    """A tune stopped by a signal, after saving what had finished: `message` (one line) says
    what was saved; the command exits with `code` (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
