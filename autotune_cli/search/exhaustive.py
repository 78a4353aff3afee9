"""exhaustive: successive halving over a large space.

The space (e.g. 1875 configs) has already been pruned statically (shared memory,
registers, hardware). What is left is ranked by a simple analytic model (roofline.tile_seconds) and only
the best `cap` are compiled; those are screened with a few runs each, the best quarter
re-timed with the full policy (and the FIXED_NK twins of the best timed: base.time_fixed_twins),
the near-ties re-timed in passes
(base.retime_contenders), and kernels that lead cuBLAS confirmed beside it in sustained
runs (base.confirm_against_vendor). aten and any template the model does not describe always go
through.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..candidates.choices import KernelTemplateChoice
from ..problem import GemmProblem
from ..store.results import SKIPPED, Candidate
from ..hardware.roofline import tile_seconds as model_seconds
from .base import SearchContext, confirm_against_vendor, retime_contenders, time_fixed_twins

COMPILE_CAP = 160
KEEP_FRACTION = 0.25
KEEP_MIN = 6


def _modelled(choice: KernelTemplateChoice) -> bool:
    """A Triton tile of a dot, which `model_seconds` ranks (a template that is not one says
    so with `tile_model = "none"`: its configs all go through)."""
    config = choice.config_dict
    return choice.template.backend == "triton" and choice.template.tile_model != "none" and all(
        key in config for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages"))


def rank_by_model(problem: GemmProblem, choices: list[KernelTemplateChoice],
                  sm_count: int) -> list[KernelTemplateChoice]:
    """The choices by modelled time; among equal times (on decode shapes most configs of
    every template sit at the HBM floor) by their place in their own template's list, so
    the templates take turns: sorted in template order, the compile cap had left
    triton::mm_swap_ab (the last template) out of 16x4096x4096 bf16 altogether."""
    place: dict[int, int] = {}
    seen: dict[str, int] = {}
    for choice in choices:
        place[id(choice)] = seen.get(choice.uid, 0)
        seen[choice.uid] = place[id(choice)] + 1
    return sorted(choices, key=lambda c: (model_seconds(problem, c.config_dict, sm_count), place[id(c)]))


def search(ctx: SearchContext) -> list[Candidate]:
    modelled = [c for c in ctx.choices if _modelled(c)]
    others = [c for c in ctx.choices if not _modelled(c)]
    ranked = rank_by_model(ctx.problem, modelled, ctx.device.sm_count)
    cap = COMPILE_CAP if ctx.device.device_type == "cuda" else max(8, COMPILE_CAP // 16)
    screened_choices = others + ranked[:cap]
    results: dict[int, Candidate] = {}
    for choice in ranked[cap:]:
        results[id(choice)] = Candidate(uid=choice.uid, params=choice.params, status=SKIPPED,
                                        error=f"ranked below the top {cap} by the tile model")
    # Round 1: screen everything compiled with a few runs.
    pairs = ctx.run(screened_choices, ctx.measure.screening(), "screen")
    for choice, result in pairs:
        results[id(choice)] = result
    ok = sorted([(c, r) for c, r in pairs if r.ok], key=lambda p: p[1].ms)
    # Round 2: the best quarter (and every non-modelled template's best) with full timing.
    keep = max(KEEP_MIN, math.ceil(len(ok) * KEEP_FRACTION))
    finalists = ok[:keep]
    for choice, result in ok[keep:]:
        if not _modelled(choice) and all(c is not choice for c, _ in finalists):
            finalists.append((choice, result))
    finalist_ids = {id(c) for c, _ in finalists}
    timed: set[int] = set()  # timed with the full policy
    twins: list[KernelTemplateChoice] = []  # the finalists' FIXED_NK twins (time_fixed_twins)
    if finalists and not ctx.out_of_time():
        first = ctx.run([c for c, _ in finalists], ctx.measure.timing, "full")
        finalists = time_fixed_twins(ctx, first)
        twins = [c for c, _ in finalists[len(first):]]
        timed = {id(c) for c, _ in finalists}
        for choice, result in finalists:
            results[id(choice)] = result
        finalists = retime_contenders(ctx, finalists)
        for choice, result in confirm_against_vendor(ctx, finalists):
            results[id(choice)] = result
    # A screening time never wins: a candidate that kept one (screened out, or a finalist the
    # budget left untimed) is marked skipped.
    out = []
    for choice in [*ctx.choices, *twins]:
        result = results.get(id(choice))
        if result is None:
            continue
        if result.ok and id(choice) not in timed:
            why = ("the budget ran out before its full timing" if id(choice) in finalist_ids
                   else "screened out")
            result = replace(result, status=SKIPPED,
                             error=f"{why}: screened at {result.ms:.4f} ms (few runs)")
        out.append(result)
    return out
