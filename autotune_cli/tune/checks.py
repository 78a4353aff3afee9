"""A tune's settings checked before anything runs, wherever they come from: the command's
flags (cli/app.build_settings) or autotune_cli.compile's `tune` (routing/torch_compile.py).
Each failure is one UserError line naming the value as its source calls it."""

from __future__ import annotations

from typing import Callable

from ..errors import UserError
from ..settings import TuneSettings

__all__ = ["check_settings"]


def check_settings(settings: TuneSettings, name: Callable[[str], str]) -> None:
    """The values (TuneSettings.check), the search's name, and the space file (read: a bad
    one is said before a cache hit too). `name`: a field's name where the settings came from."""
    from ..heuristics.spaces import load_space_file
    from ..search import STRATEGIES

    settings.check(name)
    if settings.search not in STRATEGIES:
        raise UserError(f"{name('search')} takes {' or '.join(STRATEGIES)}, not {settings.search!r}")
    if settings.space_file is not None:
        load_space_file(settings.space_file)
