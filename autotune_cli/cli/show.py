"""`autotune cache show`, and the selection (`--filter`) the cache commands share, without
typer: `run` answers a plain `cache show` before typer (and what it imports) is loaded, the
typer command (cli/cache.py) calls the same `show`, so both print the same.

A plain `cache show` is one whose every argument `plain_show` understands (--cache-dir,
--json, --filter, with their values); anything else (-h, a misspelt option, an empty
--cache-dir) goes through typer, which says what it says about it.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Iterable, List, Optional

from ..store.entry import Entry
from ..problem import DTYPE_ALIASES, OPS
from ..text import plural, printable
from .console import err, out

Items = List[tuple]  # [(key, Entry)]
_VALUED = {"--cache-dir": "cache_dir", "--filter": "filter_text"}
_SIZES = re.compile(r"\d+(?:x\d+)*")  # a problem's sizes as the table shows them: 32x256x64


def entry_matches(key: str, entry: Entry, text: str) -> bool:
    """Whether an entry matches a `--filter` text.

    A dtype name or alias (bf16, fp16, float32, …) matches that dtype exactly, and an op name
    (mm, addmm, bmm) that op exactly: "fp16" does not match bfloat16 entries, nor "mm" addmm
    ones. Text with a "/" matches whole parts of the key ("mm/m64" is neither "addmm/m64"
    nor "mm/m640"). Whole words of the problem as the table shows it match too ("64x64x64",
    "mm 64x64x64 bf16"; not addmm's), sizes by their start as well ("32x256" is 32x256x64's
    first two, not 32x2560x64's nor 4x32x256x64's). Anything else is a substring of the key,
    the device name or the fingerprint digest.
    """
    needle = text.strip().lower()
    if needle in DTYPE_ALIASES:
        return entry.problem.dtype == DTYPE_ALIASES[needle]
    if needle in OPS:
        return entry.problem.op == needle
    haystack = key.lower()
    if "/" in needle:  # whole parts of the key: bf16/nn -> bfloat16/nn
        needle = "/".join(DTYPE_ALIASES.get(part, part) for part in needle.strip("/").split("/"))
        return re.search(re.escape("/" + needle) + r"(?=[/@]|$)", "/" + haystack) is not None
    # bf16 -> bfloat16; sizes (NxN...) also match as the first of the sizes the table shows
    words = r"\s+".join(re.escape(word) + r"(?:x\d+)*" if _SIZES.fullmatch(word)
                        else re.escape(DTYPE_ALIASES.get(word, word)) for word in needle.split())
    if re.search(r"(?<!\S)" + words + r"(?!\S)", entry.problem.describe().lower()):
        return True
    device_name = entry.device_name.lower()
    return needle in haystack or needle in device_name


def select(items: Iterable[tuple], filter_text: Optional[str]) -> Items:
    items = list(items)
    if not filter_text:
        return items
    return [(k, e) for k, e in items if entry_matches(k, e, filter_text)]


def winners_only(items: Items) -> Items:
    """The entries that hold a winner: one without (every candidate failed, or a tune was
    interrupted) is the next tune's record, never shown, exported or imported as a result."""
    return [(k, e) for k, e in items if e.winner is not None]


def open_cache(cache_dir: Optional[Path]):
    from ..store.cache import Cache
    from ..settings import default_cache_dir

    return Cache(cache_dir if cache_dir is not None else default_cache_dir())


def print_json(document: dict) -> None:
    """A cache command's --json: the one JSON document on stdout; notes stay on stderr."""
    from ..tune.report import dumps

    out.print(dumps(document), markup=False, soft_wrap=True)


def print_notices(cache) -> None:
    for notice in cache.notices:
        err.print(f"note: {notice}", markup=False)
    cache.notices.clear()


def show(cache_dir: Optional[Path], json_out: bool, filter_text: Optional[str]) -> None:
    """List the cached winners: a table (and each fingerprint's line), or one JSON document."""
    from ..tune.selections import stale_reason

    cache = open_cache(cache_dir)
    items = select(cache.items(), filter_text)
    print_notices(cache)
    # winners the installed templates no longer serve (a template's source changed since)
    stale = {key: why for key, entry in items if (why := stale_reason(entry))}
    if json_out:
        print_json({"path": str(cache.path),
                    "entries": {key: entry.to_dict(copy_=False) for key, entry in items}, "stale": stale})
        return
    without = [key for key, entry in items if entry.winner is None]
    items = winners_only(items)
    if without:  # a failed or interrupted tune: a record for the next tune, not a result
        err.print(f"note: {plural(len(without), 'entry', 'entries')} without a winner (a failed or "
                  f"interrupted tune, tuned again by the next run) not listed; --json shows them",
                  markup=False)
    if not items:
        if filter_text:
            err.print(f"no winners in {cache.path} match {filter_text!r}", markup=False)
        elif not without and cache.newer_schema is None:  # a newer autotune's: its note says so
            err.print(f"the cache at {cache.path} is empty", markup=False)
        return
    from .tables import cache_table

    cpu_machine = None  # this host's CPU digest, which only CPU entries are compared with
    if any(entry.fingerprint.get("device_type") == "cpu" for _, entry in items):
        from ..store.fingerprint import Fingerprint
        from ..hardware.device import probe_device

        cpu_machine = Fingerprint.of(probe_device("cpu"), {}).machine_digest()  # imports no torch
    out.print(cache_table(items, current_machine=cpu_machine, stale=stale))
    for key, entry in items:
        if key in stale:
            print_wrapped(f"stale, not served: {entry_title(entry)} {stale[key]}; `cache prune --stale` removes it")
    from ..templates import registered_template

    # a plugin's winner: served only where its module is loaded (--plugin), so not judged here
    foreign = sorted({entry.winner.uid for _, entry in items if registered_template(entry.winner.uid) is None})
    if foreign:
        err.print(printable(f"note: winners of {', '.join(foreign)}, not registered here: served only where "
                            "the plugin that registers them is loaded (--plugin)"), markup=False, highlight=False)
    # a digest is the machine's alone: the templates are those of all its entries (a uid
    # tuned at two sources of its template lists both hashes)
    fingerprints: dict = {}
    used: dict = {}
    for _, e in items:
        if e.fingerprint_digest is not None:
            fingerprints.setdefault(e.fingerprint_digest, e.fingerprint)
            hashes = used.setdefault(e.fingerprint_digest, {})
            for uid, source in (e.fingerprint.get("templates") or {}).items():
                hashes.setdefault(uid, set()).add(str(source)[:8])
    for digest, fp in fingerprints.items():
        templates = ", ".join(f"{uid}={'/'.join(sorted(h))}" for uid, h in sorted(used[digest].items()))
        line = printable(f"fingerprint {digest}: {fp.get('device_name')} cc{fp.get('capability') or '-'} "
                         f"SMs {fp.get('sm_count')} driver {fp.get('driver') or '-'} "
                         f"runtime {fp.get('runtime') or '-'} torch {fp.get('torch')} triton {fp.get('triton')}; "
                         f"templates {templates}")
        print_wrapped(line)


def entry_title(entry: Entry, machine: bool = False) -> str:
    """An entry as a line names it: its problem as the table shows it, and its device (a
    key, with its digest, can be wider than a line); with `machine`, the machine's short
    digest too, which tells apart entries of one device model on other drivers or torch."""
    if machine:
        from ..store.fingerprint import machine_digest_of

        return f"{entry.problem.describe()} ({entry.device_name}, machine {machine_digest_of(entry.fingerprint)})"
    return f"{entry.problem.describe()} ({entry.device_name})"


def print_wrapped(line: str, indent: str = "") -> None:
    """`line` on stdout, wrapped here at words (`indent` before each line after the first),
    each part printed whole: rich's wrap leaves a space at each end."""
    for part in textwrap.wrap(printable(line), width=max(20, out.width), subsequent_indent=indent,
                              break_on_hyphens=False):
        out.print(part, markup=False, soft_wrap=True)


def plain_show(argv: List[str]) -> Optional[dict]:
    """`show`'s arguments when `argv` is a plain `cache show` (see the module), else None.
    As typer parses them: `--opt value` or `--opt=value`, the last one given wins."""
    if argv[:2] != ["cache", "show"]:
        return None
    found: dict = {"cache_dir": None, "json_out": False, "filter_text": None}
    rest = argv[2:]
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg == "--json":
            found["json_out"] = True
            i += 1
            continue
        name, eq, value = arg.partition("=")
        if name not in _VALUED:
            return None
        if not eq:
            if i + 1 >= len(rest) or rest[i + 1].startswith("-"):
                return None  # a missing value (or one typer would take for an option): typer says
            value = rest[i + 1]
            i += 1
        i += 1
        if name == "--cache-dir":
            if not value.strip():
                return None  # typer's refusal of an empty path
            found["cache_dir"] = Path(value).expanduser()  # as typer's parser (app._path_arg)
        else:
            found["filter_text"] = value
    return found
