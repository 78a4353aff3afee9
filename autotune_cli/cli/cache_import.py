"""What importing another machine's export (or cache file) into this cache does: the file
read and checked as a cache file is (`read_export`, `check_import`), and, entry by entry,
what is imported, what replaces ours and what is skipped and why (`plan_import`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError
from ..store.entry import Entry, tuned_time
from ..text import not_utf8, printable
from .show import entry_title

__all__ = ["IDENTICAL", "ImportPlan", "check_import", "describe_import", "plan_import", "read_export", "skip_lines"]

IDENTICAL = "already cached, identical"  # why an entry ours has as it is, byte for byte, is skipped


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
    from ..store.entry_checks import DamagedCache

    if not path.exists():
        raise UserError(f"import file not found: {path}")
    if path.is_dir():
        raise UserError(f"import file {path} is a directory")
    try:
        text = read_cache_file(path).decode("utf-8")
    except NotAFile as exc:
        raise UserError(f"cannot import: {exc}") from None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:  # a model, an archive: said as `mm --from` says it
        raise UserError(f"cannot read {path}: {not_utf8(exc)}") from None
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


def skip_lines(skipped: list, verb: str) -> list[str]:
    """Why entries were skipped (`verb`: "skipped", "would skip"), one line per reason: naming
    the entry where the reason is its own, counting them where several share it (their keys
    are in --json), so that 16 entries skipped alike are one line. Identical entries are left
    to the summary's count: nothing about them differs."""
    by_reason: dict[str, list[str]] = {}
    for key, why in skipped:
        if why != IDENTICAL:
            by_reason.setdefault(why, []).append(key)
    return [printable(f"{verb} {keys[0]}: {why}" if len(keys) == 1 else f"{verb} {len(keys)} entries: {why}")
            for why, keys in by_reason.items()]


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
            plan.skipped.append((key, IDENTICAL))
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
