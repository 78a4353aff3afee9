"""Export cached winners as a PyTorch Inductor lookup table: `inductor_table` (here) builds
it from cache entries; keys.py writes a key, values.py a config, scaled.py both for float8.

Inductor (torch >= 2.10) can skip its own GEMM autotuning when a lookup table names the
config to use:

    torch._inductor.config.lookup_table.table = table      # {key: [config, ...]}
    from torch._inductor.lookup_table import LookupTableChoices
    from torch._inductor.virtualized import V
    V.set_choices_handler(LookupTableChoices())

What follows was read from torch 2.11 and 2.13 (torch/_inductor/lookup_table/choices.py,
kernel/mm.py, kernel/bmm.py, template_heuristics/triton.py and aten.py).

Float8 winners (op ``scaled_mm``: aten::_scaled_mm, the persistent TMA and the tiled
Triton kernels) have keys and values of their own: see scaled.py.

When a key's configs name only some of the templates an op offers, Inductor builds choices
from those alone; one choice means no benchmarking at all. Triton entries apply only under
max-autotune on a GPU with at least 68 SMs.

This package imports torch only inside `values.installed_template_hash` and
`values._installed_tma_flag`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..store.entry import Entry
from ..text import printable
from .keys import inductor_key
from .scaled import TMA_EPILOGUE, scaled_keys, scaled_value
from .args import as_int
from .values import (INDUCTOR_TRITON_ARGS, TMA_SWITCH, TMA_TARGETS, convert, inductor_value,
                     installed_template_hash)

__all__ = [
    "inductor_key",
    "inductor_value",
    "inductor_export",
    "inductor_table",
    "InductorExport",
    "installed_template_hash",
    "INDUCTOR_TRITON_ARGS",
]


def _describe(entry: Entry) -> str:
    """The entry's problem as the tables name it (an IEEE float32 one says so: the table
    exports one float32 mode), and its winner."""
    problem = entry.problem
    text = problem.describe() + (" ieee" if problem.fp32_mode == "ieee" else "")
    if entry.winner is not None:
        text += f" ({entry.winner.uid})"
    return text


def _base_version(version: str) -> str:
    return str(version).split("+", 1)[0].strip()


def _installed_torch_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def _ms(entry: Entry) -> float:
    return float(entry.winner.ms) if entry.winner is not None else math.inf


# How a note reads for one entry ("<entry>: <alone>, <why>") and for several that share its
# reason, said once for all of them ("<n> entries<together>: <why>"): a CPU-only cache's
# export is one line, not one per entry.
_NOTE_KINDS = {"skipped": ("skipped", " skipped"), "dropped": ("dropped", " dropped"),
               "hash": ("template_hash left out", " without template_hash"), "note": ("note", "")}


def _note_lines(found: dict[tuple[str, str], list[str | None]]) -> list[str]:
    """One line per (kind, why) of `found`, in the order first found: naming its entry where
    it is one entry's, counting them where several share it."""
    lines = []
    for (kind, why), whats in found.items():
        whats = list(dict.fromkeys(whats))  # an entry under several keys is noted once
        alone, together = _NOTE_KINDS[kind]
        if len(whats) > 1:
            lines.append(f"{len(whats)} entries{together}: {why}")
        else:
            lines.append(f"{alone}, {why}" if whats[0] is None else f"{whats[0]}: {alone}, {why}")
    return lines


@dataclass(frozen=True)
class InductorExport:
    """Inductor's lookup table built from a list of entries: `table` maps each key to a
    one-config list; `notes` says, one line per reason, which entries were left out and why
    and where a template hash was left out; `left_out` gives each entry not in the table
    (by its index in the list) its own reason."""

    table: dict[str, list[dict]]
    notes: list[str]
    left_out: dict[int, str]


def inductor_table(entries: list[Entry | dict], *, allow_tf32: bool = False,
                   include_hash: bool = True) -> tuple[dict[str, list[dict]], list[str]]:
    """(table, notes) of `inductor_export`."""
    built = inductor_export(entries, allow_tf32=allow_tf32, include_hash=include_hash)
    return built.table, built.notes


def inductor_export(
    entries: list[Entry | dict],
    *,
    allow_tf32: bool = False,
    include_hash: bool = True,
) -> InductorExport:
    """Build Inductor's lookup table from cache entries (or their JSON objects).

    Left out, and said (one note line per reason: it names its entry, or counts the entries
    that share the reason): CPU entries, winners without an Inductor equivalent, float32
    entries tuned under the other precision mode, entries that lost to a faster one for the
    same key; and where a template hash was left out.

    Inductor's key does not say whether TF32 is allowed: it decides that at compile time
    from `torch.backends.cuda.matmul.fp32_precision`. Only float32 entries tuned with
    `allow_tf32` equal to this function's `allow_tf32` are exported (default: IEEE, torch's
    default).
    """
    found: dict[tuple[str, str], list[str | None]] = {}  # (kind, why) -> the entries it is said of
    skipped: dict[int, str] = {}  # the entry's index -> why it is not in the table
    index = 0

    def note(what: str | None, kind: str, why: str) -> None:
        found.setdefault((kind, why), []).append(what)
        if kind == "skipped":
            skipped[index] = why

    chosen: dict[str, tuple[int, Entry, dict]] = {}  # key -> (the entry's index, entry, config)
    lost: dict[int, str] = {}  # the entry's index -> what was faster for one of its keys
    installed = _installed_torch_version() if include_hash else None
    for index, entry in enumerate(entries):
        if not isinstance(entry, Entry):
            try:
                entry = Entry.from_dict(entry)
            except ValueError as exc:
                note(None, "skipped", f"not a cache entry ({exc})")
                continue
        what = _describe(entry)
        problem = entry.problem
        device = problem.device
        if device != "cuda" or entry.device_type != "cuda":
            note(what, "skipped", f"tuned on {device} (Inductor's lookup table is CUDA-only)")
            continue
        device_name = entry.device_name
        if not device_name:
            note(what, "skipped", "its fingerprint has no device name")
            continue
        if problem.dtype == "float32" and problem.allow_tf32 != allow_tf32:
            mode = "TF32" if problem.allow_tf32 else "IEEE float32"
            note(what, "skipped", f"tuned for {mode}; export with allow_tf32={not allow_tf32} "
                                  "for that precision mode")
            continue
        use_hash = include_hash
        tuned_torch = entry.torch_version
        if use_hash and tuned_torch and installed and _base_version(tuned_torch) != _base_version(installed):
            use_hash = False
            note(what, "hash", f"tuned with torch {tuned_torch} but torch {installed} is installed here")
        sm_count = entry.sm_count
        config, why = convert(entry.winner, problem, use_hash, sm_count)
        if config is None:
            note(what, "skipped", why)
            continue
        if problem.op == "scaled_mm":
            _, _, mapped = scaled_value(entry.winner.uid, entry.winner.params, problem, sm_count, lambda uid: None)
            for text in mapped:  # "note, <why>"
                note(what, "note", text.removeprefix("note, "))
        if config["template_id"] in TMA_TARGETS and as_int(entry.winner.params.get("FLATTEN")):
            note(what, "note", "mapped without loop flattening (FLATTEN=1 has no twin "
                               "in Inductor's persistent TMA template)")
        if config["template_id"] in TMA_TARGETS | {TMA_EPILOGUE}:
            note(what, "note", f"Inductor offers its persistent TMA templates only with "
                               f"{TMA_SWITCH} = True (TORCHINDUCTOR_PERSISTENT_TMA_MATMUL=1)")
        if (config["template_id"].startswith("triton::") and isinstance(sm_count, int)
                and 0 < sm_count < 68):
            note(what, "note", f"Inductor uses Triton GEMM templates only on GPUs "
                               f"with at least 68 SMs ({device_name} has {sm_count})")
        keyed = [(inductor_key(problem, device_name), config)]
        if problem.op == "scaled_mm":  # every common form of the scales (scaled.py)
            keyed = [(key, config) for key in scaled_keys(problem, device_name)]
        if problem.op == "addmm" and problem.bias == "n" and config["template_id"] == "aten::addmm":
            # see keys.py: cuBLAS's bias epilogue under both keys, no [m, n] expansion
            keyed = [(keyed[0][0], {"template_id": "aten::bias_addmm"}),
                     (inductor_key(problem, device_name, bias_expanded=False), config)]
        for key, config in keyed:
            previous = chosen.get(key)
            if previous is None:
                chosen[key] = (index, entry, config)
            elif _ms(entry) < _ms(previous[1]):
                note(_describe(previous[1]), "dropped", f"{what} is faster for the same key")
                lost[previous[0]] = f"dropped: {what} is faster for the same key"
                chosen[key] = (index, entry, config)
            else:
                note(what, "dropped", f"{_describe(previous[1])} is faster for the same key")
                lost[index] = f"dropped: {_describe(previous[1])} is faster for the same key"
    table = {key: [dict(config)] for key, (_, _, config) in chosen.items()}
    used = {i for i, _, _ in chosen.values()}
    left_out = {i: printable(skipped.get(i) or lost[i]) for i in range(len(entries)) if i not in used}
    # notes are printed and quote what the cache file holds (a uid, a device name): escaped
    return InductorExport(table, [printable(line) for line in _note_lines(found)], left_out)
