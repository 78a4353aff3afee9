"""Error types that cross layers.

`UserError` is bad input from the person running the tool: the CLI prints its message on
one line and exits with code 2. Anything else is an internal error and keeps its traceback.
"""

from __future__ import annotations

import os
import sys
import warnings


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


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn_caller(message: str, category: type[Warning]) -> None:
    """warnings.warn pointing at the first frame outside this package (the user's line that
    called into it), however deep in the package the warning is raised."""
    frame, level = sys._getframe(1), 2
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
