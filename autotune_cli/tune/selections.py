"""How one cache entry holds what every template selection's tune of a problem learned.

A key is a problem on a machine, whatever `--templates` said, so its entry gathers the
results of each selection tuned (their templates' sources as recorded): a narrower tune adds
to what a wider one learned (`stored_after`, `with_other_templates`), and a selection the
entry covers is answered with its own results and their pick (`answer`). An interrupted
tune's results (a partial entry) resume that tune alone, and a tune --budget cut short is
answered only by a tune with a budget (`cut_short_in`).

Plain Python: a hit imports neither torch nor triton (the pick is imported where needed).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from ..problem import GemmProblem
from ..store.entry import Entry, Winner
from ..store.results import COMPILE_ERROR, RUNTIME_ERROR, WRONG_RESULT
from ..templates import templates_for


def answer(entry: Entry, wanted: Mapping[str, str]) -> Entry | None:
    """`entry` as a tune of the templates `wanted` ({uid: source hash}) would have made it,
    or None where it cannot say: it must have been tuned with every one of them as its
    source is now (so none changed since, and none it never timed could beat it). An entry
    may hold results of templates the selection leaves out (a wider tune's, kept by a
    narrower one: `with_other_templates`): the answer is the selection's own results and
    their pick, which may win nothing. An interrupted tune's entry (partial) answers no
    selection, whatever winner it holds: it is resumed, never a hit."""
    recorded = entry.templates
    if entry.winner is None or entry.partial or not all(recorded.get(uid) == digest
                                                         for uid, digest in wanted.items()):
        return None
    view = selection_view(entry, wanted)
    return view if view.winner is not None else None


def selection_view(entry: Entry, wanted: Mapping[str, str]) -> Entry:
    """`entry` with only the results of the templates `wanted` and their pick as its winner
    (itself where it holds no other template's)."""
    if set(entry.templates) <= set(wanted) and (entry.winner is None or entry.winner.uid in wanted):
        return entry
    from ..search.pick import pick_winner  # only here: a hit needs no search machinery

    within = tuple(c for c in entry.candidates if c.uid in wanted)
    best = pick_winner(list(within))
    return replace(entry, candidates=within, winner=None if best is None else Winner.of(best, entry.problem))


def template_hashes(problem: GemmProblem) -> dict[str, str]:
    """{uid: source hash} of every template registered here that serves `problem`."""
    return {t.uid: t.source_hash() for t in templates_for(problem)}


def cut_short_in(entry: Entry) -> bool:
    """Whether --budget left some of `entry`'s results untimed (a selection's view of an
    entry answers for its own results alone)."""
    return entry.cut_short and any(c.cut_by_budget for c in entry.candidates)


def unserved_reason(entry: Entry, hashes: Mapping[str, str]) -> str:
    """Why the lookups do not answer with `entry` ("" where they do), worded to follow "its
    cached entry" (api/lookup.STALE): it has no winner, is partial, or a template it records
    has changed its source since (`hashes`: every serving template's; one not registered
    here is not judged)."""
    if entry.winner is None:
        return ("has no winner (every candidate failed, its tune was interrupted, "
                "or --budget ran out before any finished)")
    if entry.partial:
        return "is an interrupted tune's (the next run resumes it)"
    changed = sorted(uid for uid, digest in entry.templates.items() if hashes.get(uid, digest) != digest)
    if changed:
        return f"was tuned with an earlier {', '.join(changed)} (changed since: a tune again is due)"
    return ""


def serves(entry: Entry | None, hashes: Mapping[str, str]) -> bool:
    """Whether `entry` is one the lookups answer with (`unserved_reason` has none)."""
    return entry is not None and not unserved_reason(entry, hashes)


def judged_hashes(entry: Entry) -> dict[str, str]:
    """{uid: source hash here} of each template `entry` records that is registered here, ""
    for one that no longer serves its problem (changed, as far as the entry goes); one not
    registered (a plugin not loaded) is left out, not judged. What `unserved_reason` holds a
    stored entry against, wherever it is asked whether the lookups answer with it."""
    from ..templates import registered_template

    now = template_hashes(entry.problem)
    return {uid: now.get(uid, "") for uid in entry.templates if registered_template(uid) is not None}


def stale_reason(entry: Entry) -> str:
    """Why `entry`'s winner is no longer served by the templates installed here
    (`unserved_reason`), or is refused by its template (params it does not declare or
    derive for the problem: the lookups never build it), or "" where it is served, or where
    it has no winner to serve. A winner of a template not registered here (a plugin's) is
    not judged."""
    if entry.winner is None:
        return ""
    why = unserved_reason(entry, judged_hashes(entry))
    if why:
        return why
    from ..templates import registered_template
    from ..templates.params import winner_problem

    if registered_template(entry.winner.uid) is None:
        return ""
    refused = winner_problem(entry)
    return f"is refused: {refused}" if refused else ""


def whole(entry: Entry | None, hashes: Mapping[str, str]) -> bool:
    """Whether `entry` `serves` and --budget left none of its results untimed: one that is
    not never outranks one that is by being tuned later (it knows less)."""
    return serves(entry, hashes) and not cut_short_in(entry)


def stored_after(entry: Entry, current: Entry | None, hashes: Mapping[str, str]) -> Entry | None:
    """What a tune's `entry` makes of the key where `current` is stored now (None: leave it
    as it is). A partial entry never replaces one that `serves`: an interrupted tune must
    not take away the winner that is served (it starts afresh next time). Nor does a
    finished one without a winner (its candidates went untimed by --budget, timed out or
    failed), unless it found the served winner's own config failing (`fails_winner_of`).
    A finished one keeps what `current` learned of the templates it did not select
    (`with_other_templates`, `hashes` every serving template's), never from a partial one
    (those results are for resuming that tune alone)."""
    if entry.partial:
        return None if serves(current, hashes) else entry
    if entry.winner is None and serves(current, hashes) and not fails_winner_of(entry, current):
        return None
    finished = current is not None and not current.partial
    return with_other_templates(entry, current if finished else None, hashes)


def fails_winner_of(entry: Entry, current: Entry) -> bool:
    """Whether `entry` holds a result of `current`'s winning config that failed to compile,
    to run or to match the reference: news against that winner. A timeout or a skip says
    nothing against the kernel (a short --timeout or --budget)."""
    won = current.winner.identity if current.winner is not None else None
    return any(c.identity == won and c.status in (COMPILE_ERROR, RUNTIME_ERROR, WRONG_RESULT)
               for c in entry.candidates)


def with_other_templates(entry: Entry, stored: Entry | None, current: Mapping[str, str]) -> Entry:
    """`entry` (a tune's results) with the results `stored` holds of templates the tune did
    not select whose source (`current`: {uid: source hash} of every template serving the
    problem) has not changed since: a narrower tune (--templates) adds to what a wider one
    learned instead of throwing it away. The winner is the pick over them all. The results
    of a template that takes configs are kept only from a tune of the same search and
    --space: an entry records one of each for all its results, and a lookup trusts them by
    it (hits.Lookup.hit)."""
    if stored is None:
        return entry
    from ..search.pick import pick_winner
    from ..templates import registered_template

    same_source = (stored.search or "default", stored.space) == (entry.search or "default", entry.space)

    def keeps(uid: str) -> bool:
        template = registered_template(uid)
        return same_source or (template is not None and not template.takes_configs)

    selected, recorded = set(entry.templates), stored.templates
    # a template not registered here (a plugin's) cannot be judged: its results stay as
    # they are (from a tune of the same source), and a process that registers it checks its
    # source when it reads them
    kept = {uid: digest for uid, digest in recorded.items()
            if uid not in selected and current.get(uid, digest) == digest and keeps(uid)}
    others = tuple(c for c in stored.candidates if c.uid in kept)
    if not others:
        return entry
    candidates = tuple(sorted((*entry.candidates, *others),
                              key=lambda c: (not c.ok, c.ms if c.ms is not None else 0.0)))
    best = pick_winner([c for c in candidates if c.uid in current or c.uid in selected])
    fingerprint = {**entry.fingerprint, "templates": {**kept, **entry.templates}}
    return replace(entry, candidates=candidates, fingerprint=fingerprint,
                   winner=None if best is None else Winner.of(best, entry.problem),
                   cut_short=entry.cut_short or any(c.cut_by_budget for c in others))
