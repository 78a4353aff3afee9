"""`autotune cache …`: see, move and trim what autotune has learned.

The commands register themselves on `app.cache_app` when the cli package imports this
module. The plain functions above the commands (exporting, pruning) and cache_import.py
(merging another machine's entries) hold the logic; the commands parse, call them, and
print. Only `prune --not-this-machine` on a GPU and `export --format inductor` with Triton
winners import torch; the rest import neither torch nor triton.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import date, datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Callable, List, Optional

import typer

from .app import CacheDirOpt, Device, JsonOpt, PluginOpt, cache_app, err, file_arg, gpu_present, out
from ..store.entry import Entry, tuned_time
from ..errors import UserError
from ..text import plural, printable
from .cache_import import IDENTICAL, ImportPlan, check_import, describe_import, plan_import, read_export, skip_lines
from .show import (Items, entry_matches, entry_title, open_cache, print_json, print_notices, print_wrapped, select,
                   show, winners_only)


# -- exporting ---------------------------------------------------------------------------------

def autotune_document(items: Items) -> dict:
    """Our own export: a cache document holding the selected entries (`cache import` reads it,
    and so does autotune as a cache file)."""
    from ..version import __version__
    from ..store.cache_document import SCHEMA

    return {
        "schema": SCHEMA,
        "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "tool_version": __version__,
        "entries": {key: entry.to_dict(copy_=False) for key, entry in sorted(items)},
    }


def refuse_cache_file(target: Optional[str], cache_file: Path) -> None:
    """UserError where `target` is `cache_file` by any name (a link, a hard link): an export
    written there would replace the entries it is read from, losing what it leaves out (all
    of them, as a lookup table)."""
    if target in (None, "-"):
        return
    try:
        same = os.path.samefile(target, cache_file)
    except OSError:  # either is missing: nothing of the cache's to write over
        return
    if same:
        raise UserError(f"--output {target} is the cache file itself; write the export to another file")


def write_output(text: str, target: Optional[str]) -> None:
    if target in (None, "-"):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    path = Path(target)
    if path.is_dir():
        raise UserError(f"--output {target} is a directory")
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {target}: {exc.strerror or exc}") from None


# -- importing ---------------------------------------------------------------------------------

# -- pruning -----------------------------------------------------------------------------------

def parse_date(text: str) -> datetime:
    """An ISO date (2026-11-01, midnight UTC) or date-time; UserError otherwise."""
    value = text.strip()
    try:
        if len(value) == 10:
            day = date.fromisoformat(value)
            return datetime(day.year, day.month, day.day, tzinfo=timezone.utc)
        when = datetime.fromisoformat(value)
    except ValueError:
        raise UserError(f"--older-than {text!r} is not an ISO date such as 2026-11-01") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def this_machine_digests(device: Optional[str]) -> dict[str, set]:
    """{device type: machine digests of this machine}. `device` None: the CPU and, where a
    GPU is present, every visible GPU. Neither is probed through torch where the driver answers."""
    from ..store.fingerprint import Fingerprint
    from ..hardware.device import cuda_device_count, probe_device

    kinds = [device] if device else (["cpu", "cuda"] if gpu_present() else ["cpu"])
    digests: dict[str, set] = {}
    for kind in kinds:
        if kind == "cuda":
            infos = [probe_device("cuda", i) for i in range(cuda_device_count())]
        else:
            infos = [probe_device(kind)]
        digests[kind] = {Fingerprint.of(info, {}).machine_digest() for info in infos}
    return digests


def entry_machine(entry: Entry) -> str | None:
    """The entry's machine digest, recomputed from its fingerprint when not stored."""
    from ..store.fingerprint import Fingerprint

    if entry.machine is not None:
        return entry.machine
    try:
        return Fingerprint.from_dict(entry.fingerprint).machine_digest()
    except TypeError:
        return None


def prune_predicate(older_than: Optional[datetime], machines: Optional[dict[str, set]],
                    filter_text: Optional[str], device: Optional[str] = None,
                    stale: bool = False) -> Callable[[str, Entry], bool]:
    """Remove an entry when every given condition holds. `device`: entries whose key names
    that device type (`--device cpu` leaves GPU entries alone). `machines` ({device type:
    digests}, from `this_machine_digests`): entries whose machine is not among them.
    `stale`: entries whose winner the installed templates no longer serve
    (selections.stale_reason, as `cache show` marks them).
    """
    from ..tune.selections import stale_reason

    def remove(key: str, entry: Entry) -> bool:
        if filter_text and not entry_matches(key, entry, filter_text):
            return False
        if stale and not stale_reason(entry):
            return False
        if device is not None and entry.problem.device != device:
            return False
        if older_than is not None:
            when = tuned_time(entry)
            if when is None or when >= older_than:
                return False
        if machines is not None:
            if entry_machine(entry) in machines.get(entry.device_type, set()):
                return False
        return True

    return remove


def pruned(path: Path, dry_run: bool, judged: dict[str, bool]) -> dict:
    """`cache prune --json`: the keys it removed (or would remove) and those it kept."""
    return {"path": str(path), "dry_run": dry_run, "removed": [key for key, gone in judged.items() if gone],
            "kept": [key for key, gone in judged.items() if not gone]}


# -- the commands ------------------------------------------------------------------------------

FilterOpt = typer.Option(None, "--filter", help="Only entries matching this text: a dtype (bf16), "
                         "an op (mm), key parts (mm/m64), the problem as the table shows it (64x64x64, "
                         "\"mm 64x64x64 bf16\"; sizes by their start: 32x256 is 32x256x64), or a device "
                         "name (H200).")


@cache_app.command("path")
def cache_path(cache_dir: Optional[Path] = CacheDirOpt, json_out: bool = JsonOpt) -> None:
    """Print the cache file's path."""
    path = open_cache(cache_dir).path
    if json_out:
        print_json({"path": str(path), "exists": path.exists()})
        return
    out.print(str(path), markup=False, soft_wrap=True)


@cache_app.command("show")
def cache_show(
    cache_dir: Optional[Path] = CacheDirOpt,
    json_out: bool = JsonOpt,
    filter_text: Optional[str] = FilterOpt,
) -> None:
    """List the cached winners (imports neither torch nor triton)."""
    show(cache_dir, json_out, filter_text)


@cache_app.command("clear")
def cache_clear(
    cache_dir: Optional[Path] = CacheDirOpt,
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask."),
    json_out: bool = JsonOpt,
) -> None:
    """Remove every entry."""
    cache = open_cache(cache_dir)
    cache.check_writable()  # a newer autotune's file: refused before the question
    count = len(cache.load()) + len(cache.unused)  # those not used are removed too
    if count and not yes:
        if not sys.stdin.isatty():  # a pipe's "n" is no answer to a question never shown
            raise UserError(f"cache clear would remove {plural(count, 'entry', 'entries')} from {cache.path}: "
                            "without a terminal to confirm on, pass --yes")
        # asked on stderr under --json: stdout holds the one JSON document
        typer.confirm(f"remove {plural(count, 'entry', 'entries')} from {cache.path}?", abort=True, err=json_out)
    removed = cache.clear()
    print_notices(cache)
    if json_out:
        print_json({"path": str(cache.path), "removed": removed})
        return
    err.print(f"removed {plural(removed, 'entry', 'entries')} from {cache.path}", markup=False)


class ExportFormat(str, Enum):
    inductor = "inductor"
    autotune = "autotune"


@cache_app.command("export", short_help="Write the winners for torch.compile or another machine's cache.")
def cache_export(
    format_: ExportFormat = typer.Option(..., "--format", "-f", help="inductor: torch.compile's lookup "
                                         "table; autotune: entries for `cache import` on another machine."),
    output: Optional[str] = typer.Option(None, "--output", "-o", metavar="FILE",
                                         parser=lambda text: str(file_arg(text)),
                                         help="File to write (default or '-': stdout)."),
    filter_text: Optional[str] = FilterOpt,
    allow_tf32: bool = typer.Option(False, "--allow-tf32", help="inductor: export float32 entries tuned "
                                    "with TF32 (for a program that enables it) instead of IEEE ones."),
    no_hash: bool = typer.Option(False, "--no-hash", help="inductor: leave out template_hash (for a "
                                 "program running another torch version)."),
    plugin: Optional[List[str]] = PluginOpt,
    cache_dir: Optional[Path] = CacheDirOpt,
    json_out: bool = typer.Option(False, "--json", help="Print what was exported as one JSON document "
                                  "(needs --output FILE)."),
) -> None:
    """Write the cached winners for torch.compile, or for another machine's cache."""
    from ..plugins import load_plugins

    if json_out and output in (None, "-"):  # stdout holds the export itself
        raise UserError("--json needs --output FILE: without it the export itself is written to stdout")
    load_plugins(tuple(plugin or ()))  # an entry of a plugin's template is checked by its declaration
    cache = open_cache(cache_dir)
    refuse_cache_file(output, cache.path)
    items = winners_only(select(cache.items(), filter_text))
    print_notices(cache)
    where = "stdout" if output in (None, "-") else output
    from ..templates.params import entry_problem  # the package registers the built-ins

    # what `cache import` would refuse, with the whole file, and the lookups never build: in
    # Inductor's table too, where it would be the one config Inductor compiles, unchecked
    refused = {key: why for key, entry in items if (why := entry_problem(entry))}
    if not json_out:  # under --json, the document's "left_out"
        for key, why in refused.items():
            err.print(printable(f"note: left out {key}: {why}"), markup=False, highlight=False)
    items = [(key, entry) for key, entry in items if key not in refused]
    done = {"path": str(cache.path), "format": format_.value, "output": output,
            "entries": [key for key, _ in items], "left_out": refused}
    if format_ is ExportFormat.autotune:
        write_output(json.dumps(autotune_document(items), indent=1) + "\n", output)
        if json_out:
            print_json({**done, "notes": []})
            return
        err.print(f"exported {plural(len(items), 'entry', 'entries')} to {where}", markup=False)
        return
    from ..export import inductor_export

    built = inductor_export([entry for _, entry in items], allow_tf32=allow_tf32, include_hash=not no_hash)
    write_output(json.dumps(built.table, indent=1) + "\n", output)
    used = [key for i, (key, _) in enumerate(items) if i not in built.left_out]
    if json_out:  # "entries": those the table was built from; "left_out" and "notes": why the others are not
        print_json({**done, "entries": used,
                    "left_out": {**refused, **{items[i][0]: why for i, why in built.left_out.items()}},
                    "notes": built.notes, "lookup_table_keys": len(built.table)})
        return
    for note in built.notes:
        err.print(f"note: {note}", markup=False)
    err.print(f"exported {plural(len(built.table), 'lookup-table key')} from "
              f"{plural(len(used), 'entry', 'entries')} to {where}", markup=False)


@cache_app.command("import", short_help="Merge another machine's entries into this cache.")
def cache_import(
    path: Path = typer.Argument(..., metavar="FILE", parser=file_arg,
                                help="A file written by `autotune cache export --format autotune` (or another "
                                "machine's cache file)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only say what would change."),
    cache_dir: Optional[Path] = CacheDirOpt,
    plugin: Optional[List[str]] = PluginOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Merge another machine's entries into this cache (a later tuning replaces an earlier one).
    Every entry is checked first (each winner's params against its template's declared ones):
    one that does not pass refuses the whole import. Lists what it adds on stdout."""
    from ..plugins import load_plugins

    load_plugins(tuple(plugin or ()))  # their templates declare their params
    cache = open_cache(cache_dir)
    cache.check_writable()  # a newer autotune's file: a dry run says the import would be refused
    theirs, refused = read_export(path)
    check_import(theirs, path)
    if dry_run:
        plan = plan_import(cache.load(), theirs, refused)
    else:  # planned against the file as it is under the lock: a tune's newer entry stays
        plans: list[ImportPlan] = []

        def planned_writes(current: dict) -> dict:
            plans.append(plan_import(current, theirs, refused))
            return plans[-1].writes

        cache.merge(planned_writes)
        plan = plans[-1]
    print_notices(cache)
    if json_out:
        print_json({"path": str(cache.path), "source": str(path), "dry_run": dry_run,
                    "imported": list(plan.imported), "replaced": list(plan.replaced),
                    "skipped": dict(plan.skipped)})
        return
    for line in skip_lines(plan.skipped, "would skip" if dry_run else "skipped"):
        err.print(line, markup=False)
    for verb, entries in (("import", plan.imported), ("replace", plan.replaced)):
        for entry in entries.values():
            print_wrapped(describe_import(("would " if dry_run else "") + verb, entry), indent="  ")
    # A dry run changed nothing, so every count reads as what would happen.
    verbs = ("would import", "replace", "skip") if dry_run else ("imported", "replaced", "skipped")
    identical = sum(why == IDENTICAL for _, why in plan.skipped)  # said here: no line of their own
    err.print(f"{verbs[0]} {len(plan.imported)}, {verbs[1]} {len(plan.replaced)}, {verbs[2]} "
              f"{len(plan.skipped)} of {plural(len(theirs) + len(refused), 'entry', 'entries')} from {path}"
              + (f" ({identical} {IDENTICAL})" if identical else ""), markup=False)


@cache_app.command("prune")
def cache_prune(
    older_than: Optional[str] = typer.Option(None, "--older-than", help="Entries tuned before this ISO date "
                                             "(2026-11-01)."),
    not_this_machine: bool = typer.Option(False, "--not-this-machine", help="Entries whose machine "
                                          "(device, driver, runtime, torch, triton) is not this one's."),
    device: Optional[Device] = typer.Option(None, "--device", help="Entries of this device type "
                                            "(without it, --not-this-machine judges the CPU, and the GPUs if any)."),
    stale: bool = typer.Option(False, "--stale", help="Entries whose winner is no longer served here (a "
                               "template's source changed since: `cache show` marks them)."),
    filter_text: Optional[str] = FilterOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="Only list what would be removed."),
    cache_dir: Optional[Path] = CacheDirOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Remove entries that match every condition given."""
    filter_text = (filter_text or "").strip() or None  # blank matches all: no condition
    if older_than is None and not not_this_machine and not filter_text and device is None and not stale:
        raise UserError("cache prune needs --older-than DATE, --not-this-machine, --stale, --device "
                        "and/or --filter TEXT")
    cutoff = parse_date(older_than) if older_than is not None else None
    kind = device.value if device else None
    machines = this_machine_digests(kind) if not_this_machine else None
    predicate = prune_predicate(cutoff, machines, filter_text, kind, stale)
    cache = open_cache(cache_dir)
    cache.check_writable()  # a newer autotune's file: a dry run says the prune would be refused
    if dry_run:
        items = list(cache.items())
        judged = {key: predicate(key, entry) for key, entry in items}
        print_notices(cache)
        if json_out:
            print_json(pruned(cache.path, True, judged))
            return
        for key, entry in items:
            if judged[key]:
                print_wrapped(entry_title(entry, machine=True), indent="  ")
        err.print(f"would remove {sum(judged.values())} of {plural(len(items), 'entry', 'entries')} "
                  f"from {cache.path}", markup=False)
        return
    judged: dict[str, bool] = {}  # as judged under the lock, where another writer's entries are seen too

    def remove(key: str, entry: Entry) -> bool:
        judged[key] = predicate(key, entry)
        return judged[key]

    removed = cache.remove(remove)
    print_notices(cache)
    if json_out:
        print_json(pruned(cache.path, False, judged))
        return
    err.print(f"removed {plural(removed, 'entry', 'entries')} from {cache.path}", markup=False)

