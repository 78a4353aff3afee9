"""`autotune cache …`: see, move and trim what autotune has learned.

The commands register themselves on `app.cache_app` when the cli package imports this
module. The
plain functions above the commands (selecting, merging, pruning) hold the logic; the
commands parse, call them, and print. Only `prune --not-this-machine` on a GPU and
`export --format inductor` with Triton winners import torch; the rest import neither torch
nor triton.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Callable, List, Optional

import typer

from .app import CacheDirOpt, Device, JsonOpt, PluginOpt, cache_app, err, file_arg, gpu_present, out
from ..store.entry import Entry, tuned_time
from ..errors import UserError
from ..text import plural, printable
from .show import (Items, entry_matches, entry_title, open_cache, print_notices, print_wrapped, select, show,
                   winners_only)


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

@dataclass
class ImportPlan:
    """What merging another cache's entries into ours does, entry by entry."""

    imported: dict = field(default_factory=dict)  # new keys
    replaced: dict = field(default_factory=dict)  # keys we had, theirs tuned later
    skipped: list = field(default_factory=list)  # (key, why)

    @property
    def writes(self) -> dict:
        return {**self.imported, **self.replaced}


def read_export(path: Path) -> tuple[dict[str, Entry], dict[str, str]]:
    """The entries of an export (or of another machine's cache file), checked and migrated
    as a cache file is, and {key: why} of those that do not agree with their keys or are of
    the wrong shape (never imported). Any problem with the file itself is a UserError naming
    it."""
    from ..safe_read import NotAFile
    from ..store.cache_document import parse_document, read_cache_file
    from ..store.entry import DamagedCache

    if not path.exists():
        raise UserError(f"import file not found: {path}")
    if path.is_dir():
        raise UserError(f"import file {path} is a directory")
    try:
        text = read_cache_file(path).decode("utf-8")
    except NotAFile as exc:
        raise UserError(f"cannot import: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {path}: {exc}") from None
    try:
        document = parse_document(text)
        damaged = {key: f"damaged ({why})" for key, why in document.damaged.items()}
        return document.entries, {**document.refused, **damaged}
    except DamagedCache as exc:
        raise UserError(f"{path} is not an autotune export: {exc}") from None


def _cut_where_ours_is_whole(theirs: Entry, ours: Entry) -> bool:
    """Whether --budget left some of theirs untimed while ours timed every config of the
    templates theirs tuned, with the same sources: later, but knowing less."""
    if not theirs.cut_short or ours.partial:
        return False
    tuned = theirs.templates
    return (all(ours.templates.get(uid) == digest for uid, digest in tuned.items())
            and not any(c.cut_by_budget and c.uid in tuned for c in ours.candidates))


def check_import(theirs: dict, path: Path) -> None:
    """UserError naming the first entry, and its field, that must not be imported: a winner
    whose template is not registered here or whose params are not what it declares and
    derives (templates/params.py), or a candidate with undeclared params. Nothing from a
    file that holds one is imported."""
    from ..templates.params import entry_problem  # the package registers the built-ins

    for key, entry in theirs.items():
        why = entry_problem(entry)
        if why:
            raise UserError(printable(f"refusing to import {path}: entry {key}: {why} (nothing imported)"))


def describe_import(verb: str, entry: Entry) -> str:
    """What an import does with an entry: its problem, device and machine (show.entry_title),
    winner, params and time."""
    from ..tune.report import fmt_ms

    winner = entry.winner
    if winner is None:
        return printable(f"{verb} {entry_title(entry, machine=True)}: no winner")
    params = " ".join(f"{k}={v}" for k, v in winner.params.items()) or "-"
    return printable(f"{verb} {entry_title(entry, machine=True)}: {winner.uid} {params} {fmt_ms(winner.ms)} ms")


def plan_import(ours: dict, theirs: dict, refused: dict | None = None) -> ImportPlan:
    """New keys are imported; for a key we have, theirs replaces ours when it was tuned
    later, or when theirs is whole and ours is not (no winner, partial, stale or cut short
    by --budget: selections.whole), keeping ours's results of templates theirs did not tune
    (selections.stored_after); identical entries and older ones are skipped, and so are
    entries that do not agree with their keys (`refused` by the reader, or found here) and
    entries without a winner or partial (a failed or interrupted tune: nothing to use). Entries under another
    fingerprint have other keys, so they are kept alongside ours (and never used here)."""
    plan = ImportPlan(skipped=list((refused or {}).items()))
    for key, entry in theirs.items():
        why = (entry.disagreement(key) or ("no winner" if entry.winner is None else "")
               or ("an interrupted tune's (partial)" if entry.partial else ""))
        if why:
            plan.skipped.append((key, why))
            continue
        mine = ours.get(key)
        if mine is None:
            plan.imported[key] = entry
        elif mine.to_dict(copy_=False) == entry.to_dict(copy_=False):
            plan.skipped.append((key, "already here"))
        else:
            from ..tune.selections import judged_hashes, stored_after, template_hashes, unserved_reason, whole

            hashes = template_hashes(entry.problem)
            theirs_judged = judged_hashes(entry)
            theirs_whole, ours_whole = whole(entry, theirs_judged), whole(mine, judged_hashes(mine))
            new, old = tuned_time(entry), tuned_time(mine)
            if _cut_where_ours_is_whole(entry, mine):
                plan.skipped.append((key, "theirs was cut short by --budget where ours timed every config"))
            elif ours_whole and not theirs_whole:  # later, but not one the lookups would answer with
                why = unserved_reason(entry, theirs_judged) or "was cut short by --budget"
                plan.skipped.append((key, f"theirs {why}; ours is used here"))
            elif theirs_whole and not ours_whole or (new is not None and (old is None or new > old)):
                # ours's results of templates theirs did not tune stay (as a narrower tune's would)
                plan.replaced[key] = stored_after(entry, mine, hashes)
            else:
                plan.skipped.append((key, "ours was tuned at the same time or later"))
    return plan


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


# -- the commands ------------------------------------------------------------------------------

FilterOpt = typer.Option(None, "--filter", help="Only entries matching this text: a dtype (bf16), "
                         "an op (mm), key parts (mm/m64), the problem as the table shows it (64x64x64, "
                         "\"mm 64x64x64 bf16\"), or a device name (H200).")


@cache_app.command("path")
def cache_path(cache_dir: Optional[Path] = CacheDirOpt) -> None:
    """Print the cache file's path."""
    out.print(str(open_cache(cache_dir).path), markup=False, soft_wrap=True)


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
) -> None:
    """Remove every entry."""
    cache = open_cache(cache_dir)
    count = len(cache.load()) + len(cache.unused)  # those not used are removed too
    if count and not yes:
        if not sys.stdin.isatty():  # a pipe's "n" is no answer to a question never shown
            raise UserError(f"cache clear would remove {plural(count, 'entry', 'entries')} from {cache.path}: "
                            "without a terminal to confirm on, pass --yes")
        typer.confirm(f"remove {plural(count, 'entry', 'entries')} from {cache.path}?", abort=True)
    removed = cache.clear()
    print_notices(cache)
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
) -> None:
    """Write the cached winners for torch.compile, or for another machine's cache."""
    from ..plugins import load_plugins

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
    for key, why in refused.items():
        err.print(printable(f"note: left out {key}: {why}"), markup=False, highlight=False)
    items = [(key, entry) for key, entry in items if key not in refused]
    if format_ is ExportFormat.autotune:
        write_output(json.dumps(autotune_document(items), indent=1) + "\n", output)
        err.print(f"exported {plural(len(items), 'entry', 'entries')} to {where}", markup=False)
        return
    from ..export import inductor_table

    table, notes = inductor_table([entry for _, entry in items], allow_tf32=allow_tf32,
                                  include_hash=not no_hash)
    write_output(json.dumps(table, indent=1) + "\n", output)
    for note in notes:
        err.print(f"note: {note}", markup=False)
    err.print(f"exported {plural(len(table), 'lookup-table key')} from {plural(len(items), 'entry', 'entries')} "
              f"to {where}", markup=False)


@cache_app.command("import", short_help="Merge another machine's entries into this cache.")
def cache_import(
    path: Path = typer.Argument(..., metavar="FILE", parser=file_arg,
                                help="A file written by `autotune cache export --format autotune` (or another "
                                "machine's cache file)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only say what would change."),
    cache_dir: Optional[Path] = CacheDirOpt,
    plugin: Optional[List[str]] = PluginOpt,
) -> None:
    """Merge another machine's entries into this cache (a later tuning replaces an earlier one).
    Every entry is checked first (each winner's params against its template's declared ones):
    one that does not pass refuses the whole import. Lists what it adds on stdout."""
    from ..plugins import load_plugins

    load_plugins(tuple(plugin or ()))  # their templates declare their params
    cache = open_cache(cache_dir)
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
    for key, why in plan.skipped:
        if why != "already here":
            err.print(printable(f"skipped {key}: {why}"), markup=False)
    for verb, entries in (("import", plan.imported), ("replace", plan.replaced)):
        for entry in entries.values():
            print_wrapped(describe_import(("would " if dry_run else "") + verb, entry), indent="  ")
    # A dry run changed nothing, so every count reads as what would happen.
    verbs = ("would import", "replace", "skip") if dry_run else ("imported", "replaced", "skipped")
    err.print(f"{verbs[0]} {len(plan.imported)}, {verbs[1]} {len(plan.replaced)}, {verbs[2]} "
              f"{len(plan.skipped)} of {plural(len(theirs) + len(refused), 'entry', 'entries')} from {path}",
              markup=False)


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
    if dry_run:
        items = list(cache.items())
        doomed = [entry for key, entry in items if predicate(key, entry)]
        print_notices(cache)
        for entry in doomed:
            print_wrapped(entry_title(entry, machine=True), indent="  ")
        err.print(f"would remove {len(doomed)} of {plural(len(items), 'entry', 'entries')} from {cache.path}",
                  markup=False)
        return
    removed = cache.remove(predicate)
    print_notices(cache)
    err.print(f"removed {plural(removed, 'entry', 'entries')} from {cache.path}", markup=False)
