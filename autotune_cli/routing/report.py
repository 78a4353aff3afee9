"""What a compile says of the matmuls it met: one line on stderr per graph (the `routes`
list, which `compile` fills, holds each one's Dispatch with its whole reason)."""

from __future__ import annotations

from ..api import Dispatch
from ..api.lookup import STALE
from ..api.problems import UNTUNED_DTYPE
from .sites import (BADDBMM, BROADCAST, CHECKPOINTED, DECOMPOSED, EINSUM, FUSED, MATRIX_BY_BATCH, MIXED_DTYPES,
                    OTHER_KIND, PADDED, UNFOLDED, UNROUTED_ARGUMENTS, VECTOR)
from ..text import plural

__all__ = ["GROUPED", "summary"]

# The reason a grouped linear's Dispatch gives: the one GEMM it runs in (groups.py).
GROUPED = "grouped: "


def summary(dispatches: list[Dispatch], groups: int = 0, folds: int = 0, split: int = 0, graph: str = "") -> None:
    """One line on stderr per graph: how many of its matmuls were routed (how many of them in
    `groups` grouped GEMMs), why the others were not (the `routes` list holds each one's
    Dispatch, its reason with it), and how many attentions read K and V once (`folds`,
    gqa.py; `split` of them through the split-key kernel). `graph`: which one, where it is
    not Dynamo's (" in the backward")."""
    import sys
    from collections import Counter

    fused = sum(d.reason == FUSED for d in dispatches)  # ops holding matmuls, not matmuls
    dispatches = [d for d in dispatches if d.reason != FUSED]
    if not dispatches:
        parts = [_fused(fused) if fused else "", _folded(folds, split) if folds else ""]
        if any(parts):
            sys.stderr.write(f"autotune: {'; '.join(part for part in parts if part)}\n")
        return
    left = Counter(_reason_kind(d.reason) for d in dispatches if d.fallback)
    routed = len(dispatches) - sum(left.values())
    line = f"autotune: routed {routed} of {plural(len(dispatches), 'matmul')}{graph}"
    if groups:
        grouped = sum(d.reason.startswith(GROUPED) for d in dispatches)
        line += f" ({grouped} as {plural(groups, 'grouped GEMM')})"
    if left:
        line += "; left to the compiler: " + ", ".join(f"{n} {why}" for why, n in left.most_common())
    if fused:
        line += f"; {_fused(fused)}"
    if folds:
        line += f"; {_folded(folds, split)}"
    sys.stderr.write(line + "\n")


def _fused(n: int) -> str:
    return f"{plural(n, 'attention or encoder layer op')} of torch's left whole (its matmuls inside)"


def _folded(folds: int, split: int) -> str:
    line = f"{plural(folds, 'attention')} over K and V unrepeated"
    return line + (f" ({split} by the split-key kernel)" if split else "")


def _reason_kind(reason: str) -> str:
    """A fallback's reason, short (the `routes` list keeps the whole)."""
    for start, short in (("nothing cached", "with nothing cached"), ("K = 1", "with K = 1 (a multiply)"),
                         (STALE, "whose cached entry is not used (see routes)"),
                         (UNROUTED_ARGUMENTS, "with alpha=, beta= or out="), (EINSUM, "as einsums of another form"),
                         (MATRIX_BY_BATCH, "as 2-D @ N-D"), (BADDBMM, "as baddbmm"),
                         (VECTOR, "with a vector"), (BROADCAST, "with broadcast batches"),
                         (OTHER_KIND, "of other kinds (see routes)"),
                         (UNFOLDED, "run by torch as a bmm of unfolded rows"),
                         ("K = 0", "with K = 0"),
                         ("a dynamic shape", "with a dynamic shape"),
                         ("a dynamic M with nothing cached", "dynamic with nothing cached"),
                         ("a dynamic K with nothing cached", "dynamic with nothing cached"),
                         ("its winner", "whose winner cannot run here (see routes)"),
                         ("needs gradients", "needing gradients"), ("under autocast", "under autocast"),
                         (MIXED_DTYPES, "with operands of two dtypes"),
                         (UNTUNED_DTYPE, "in a dtype autotune does not tune"),
                         (PADDED, "whose winner pads its rows (see routes)"),
                         (CHECKPOINTED, "inside activation checkpoints"),
                         (DECOMPOSED, "made pointwise by the compiler")):
        if reason.startswith(start):
            return short
    return "other (see routes)"
