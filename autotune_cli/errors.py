"""Error types that cross layers.

`UserError` is bad input from the person running the tool: the CLI prints its message on
one line and exits with code 2. Anything else is an internal error and keeps its traceback.
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad input: a flag, a file, a size. Printed as one line, exit code 2."""


class CacheError(RuntimeError):
    """The cache file could not be read or written."""
