"""The pick: the fastest verified candidate, unless it leads cuBLAS by no more than the noise."""

from dataclasses import replace

import pytest

from autotune_cli.search.pick import pick_winner
from autotune_cli.store.results import OK, WRONG_RESULT, Candidate
from autotune_cli.runner import Executor
from autotune_cli.settings import MeasurePolicy
from conftest import is_pick

VENDOR_MARGIN = MeasurePolicy().vendor_margin
CONFIRMED_MARGIN = MeasurePolicy().confirmed_margin


def cand(uid, ms, status=OK, **params):
    return Candidate(uid=uid, params=params, status=status, ms=ms)


def test_a_lead_within_the_margin_is_a_tie_and_goes_to_the_vendor():
    aten = cand("aten::mm", 1.0)
    close = cand("triton::mm", 1.0 * (1 - VENDOR_MARGIN) + 1e-6, BLOCK_M=64)
    assert pick_winner([close, aten]) is aten


def test_a_clear_lead_wins():
    aten = cand("aten::mm", 1.0)
    fast = cand("triton::mm", 0.9, BLOCK_M=64)
    assert pick_winner([aten, fast]) is fast


def test_the_best_vendor_candidate_keeps_the_tie_and_wrong_ones_never_count():
    slow, fast_aten = cand("aten::mm", 1.2), cand("aten::mm", 1.0, note=1)
    wrong_fast = cand("triton::mm", 0.1, status=WRONG_RESULT, BLOCK_M=16)
    close = cand("triton::mm_splitk", 0.99, SPLIT_K=4)
    assert pick_winner([slow, fast_aten, wrong_fast, close]) is fast_aten
    assert pick_winner([wrong_fast]) is None


def test_our_alignment_template_is_not_the_vendor():
    """aten::mm_aligned runs our copy and keeps buffers: it gets no margin."""
    aligned = cand("aten::mm_aligned", 1.0, ZERO_PAD=1)
    padded = cand("triton::mm_padded", 0.995, BLOCK_M=64)
    assert pick_winner([aligned, padded]) is padded


def test_is_pick_matches_the_rule():
    """A stored entry's winner is checked against the pick made again from its stored
    candidates, their `confirmed` flags included."""
    def stored(*cands):
        return [c.to_dict() for c in cands]

    def winner(c):
        return {"uid": c.uid, "params": c.params, "ms": c.ms}

    kernel, vendor = cand("triton::mm", 0.99, BLOCK_M=64), cand("aten::mm", 1.0)
    assert is_pick(winner(vendor), stored(kernel, vendor)) and not is_pick(winner(kernel), stored(kernel, vendor))
    fast = cand("triton::mm", 0.95, BLOCK_M=64)
    assert is_pick(winner(fast), stored(fast, vendor)) and not is_pick(winner(vendor), stored(fast, vendor))
    aligned = cand("aten::mm_aligned", 1.0, ZERO_PAD=1)
    assert not is_pick(winner(aligned), stored(aligned, cand("triton::mm", 0.99, BLOCK_M=64)))
    both = stored(replace(cand("triton::mm", 0.97, BLOCK_M=64), confirmed=True), replace(vendor, confirmed=True))
    assert is_pick({"uid": "triton::mm", "params": {"BLOCK_M": 64}}, both)
    assert not is_pick(winner(vendor), both)


def test_without_a_vendor_candidate_the_fastest_wins():
    a, b = cand("triton::mm", 1.0, BLOCK_M=64), cand("triton::mm", 0.995, BLOCK_M=128)
    assert pick_winner([a, b]) is b


class _Choice:
    def __init__(self, uid):
        self.uid = uid

    @staticmethod
    def fixed_twin():
        return None  # a config without a FIXED_NK twin (search/base.time_fixed_twins)


class _Executor(Executor):
    """Answers each re-timed choice with its time from `again` (what a quiet GPU reads)."""

    def __init__(self, again):
        self.again = again
        self.asked = []

    def run(self, choices, on_result, policy=None, deadline=None, shareable=False):
        self.asked.append([c.uid for c in choices])
        for i, choice in enumerate(choices):
            on_result(i, cand(choice.uid, self.again[choice.uid]))


class _DriftingExecutor(_Executor):
    """A GPU whose clocks sag as the tune goes on: each timed choice reads `step` slower
    than the one before it, whatever it is."""

    def __init__(self, again, step):
        super().__init__(again)
        self.step = step
        self.timed = 0

    def run(self, choices, on_result, policy=None, deadline=None, shareable=False):
        self.asked.append([c.uid for c in choices])
        for i, choice in enumerate(choices):
            on_result(i, cand(choice.uid, self.again[choice.uid] * (1 + self.step * self.timed)))
            self.timed += 1


def retime(first, again, executor=None, passes=None):
    """retime_contenders over candidates first timed at `first` (uid -> ms); one pass unless
    `passes` (as on the CPU)."""
    from autotune_cli.search.base import SearchContext, retime_contenders

    executor = executor or _Executor(again)
    ctx = SearchContext(problem=None, device=None, choices=[], executor=executor,
                        measure=MeasurePolicy(retime_passes=passes or 1),
                        deadline=None, on_result=lambda *a: None)
    pairs = [(_Choice(uid), cand(uid, ms)) for uid, ms in first.items()]
    return {r.uid: r.ms for _, r in retime_contenders(ctx, pairs)}, executor.asked


def test_cublas_timed_slow_is_timed_again_before_a_kernel_may_beat_it():
    """cuBLAS read 5% slow (timed beside the compiles): outside the near-tie window, but the
    pick measures every kernel against it, so it is re-timed with the leaders and keeps the
    tie it really has."""
    first = {"aten::mm": 1.05, "triton::mm_persistent_tma": 1.0, "triton::mm": 1.2}
    again = {"aten::mm": 0.99, "triton::mm_persistent_tma": 1.0}
    times, asked = retime(first, again)
    assert asked == [["triton::mm_persistent_tma", "aten::mm"]]
    assert times == {"aten::mm": 0.99, "triton::mm_persistent_tma": 1.0, "triton::mm": 1.2}
    assert pick_winner([cand(uid, ms) for uid, ms in times.items()]).uid == "aten::mm"


def test_cublas_far_behind_is_left_alone():
    times, asked = retime({"aten::mm": 1.5, "triton::mm": 1.0}, {})
    assert asked == [] and times == {"aten::mm": 1.5, "triton::mm": 1.0}


def test_the_retime_alternates_the_order_of_its_passes():
    assert MeasurePolicy.for_device("cuda").retime_passes == 4 and MeasurePolicy.for_device("cpu").retime_passes == 1
    first = {"triton::mm_persistent_tma": 1.0, "aten::mm": 1.02}
    _, asked = retime(first, {"triton::mm_persistent_tma": 1.0, "aten::mm": 1.0}, passes=4)
    forward = ["triton::mm_persistent_tma", "aten::mm"]
    assert asked == [forward, forward[::-1], forward, forward[::-1]]


def test_clocks_that_drift_during_the_retime_do_not_decide_the_pick():
    """Two equal kernels on a GPU that slows 4% per timed choice: one pass in one order has
    the kernel timed first lead cuBLAS by 4% (beyond the margin: a wrong pick); passes in
    alternating order give both the same median and cuBLAS keeps its tie."""
    first = {"triton::mm_persistent_tma": 1.0, "aten::mm": 1.01}
    equal = {"triton::mm_persistent_tma": 1.0, "aten::mm": 1.0}
    one_pass, _ = retime(first, equal, _DriftingExecutor(equal, 0.04), passes=1)
    assert pick_winner([cand(u, ms) for u, ms in one_pass.items()]).uid == "triton::mm_persistent_tma"
    passes, asked = retime(first, equal, _DriftingExecutor(equal, 0.04), passes=4)
    assert len(asked) == 4
    assert passes["aten::mm"] == pytest.approx(passes["triton::mm_persistent_tma"])
    assert pick_winner([cand(u, ms) for u, ms in passes.items()]).uid == "aten::mm"


def test_the_retime_takes_the_median_of_its_passes():
    """A contender's time is the median of its passes, its runs all of theirs."""
    from autotune_cli.search.base import median_of_passes

    readings = [Candidate(uid="aten::mm", params={}, status=OK, ms=ms, p20=ms, p80=ms, runs=10)
                for ms in (1.0, 1.2, 1.1)]
    merged = median_of_passes(readings)
    assert merged.ms == 1.1 and merged.runs == 30 and merged.p20 == 1.1


class _CutShortExecutor(_DriftingExecutor):
    """The drifting GPU, with the --budget deadline reached during the third pass: from
    then on every contender comes back unmeasured (None)."""

    def run(self, choices, on_result, policy=None, deadline=None, shareable=False):
        self.asked.append([c.uid for c in choices])
        for i, choice in enumerate(choices):
            if len(self.asked) < 3 or i == 0:
                on_result(i, cand(choice.uid, self.again[choice.uid] * (1 + self.step * self.timed)))
            self.timed += 1


def test_a_retime_cut_short_keeps_only_whole_pairs_of_passes():
    """Passes where a contender went unmeasured do not count, and an odd count is cut to an
    even one, so the drift still cancels: the third pass (only its first contender timed)
    is left out and the two whole passes give the tie to cuBLAS."""
    first = {"triton::mm_persistent_tma": 1.0, "aten::mm": 1.01}
    equal = {"triton::mm_persistent_tma": 1.0, "aten::mm": 1.0}
    times, asked = retime(first, equal, _CutShortExecutor(equal, 0.04), passes=4)
    assert len(asked) == 4
    assert times["aten::mm"] == pytest.approx(times["triton::mm_persistent_tma"])
    assert pick_winner([cand(u, ms) for u, ms in times.items()]).uid == "aten::mm"


class _SustainedExecutor(_Executor):
    """Runs under the sustained policy (200 ms of kernel time or more) read `sustained`;
    records each call's choices and budget."""

    def __init__(self, again, sustained):
        super().__init__(again)
        self.sustained = sustained
        self.budgets = []

    def run(self, choices, on_result, policy=None, deadline=None, shareable=False):
        self.asked.append([c.uid for c in choices])
        self.budgets.append(policy.budget_ms)
        table = self.sustained if policy.budget_ms >= 200 else self.again
        for i, choice in enumerate(choices):
            on_result(i, cand(choice.uid, table[choice.uid]))


def confirm(first, executor, passes):
    from autotune_cli.search.base import SearchContext, confirm_against_vendor

    ctx = SearchContext(problem=None, device=None, choices=[], executor=executor,
                        measure=MeasurePolicy(confirm_passes=passes), deadline=None, on_result=lambda *a: None)
    pairs = [(_Choice(uid), cand(uid, ms)) for uid, ms in first.items()]
    return {r.uid: r.ms for _, r in confirm_against_vendor(ctx, pairs)}


def test_a_kernel_that_would_beat_cublas_is_confirmed_in_sustained_runs():
    """The tune's short bursts had a Triton kernel lead cuBLAS by 3.1% (beyond the margin);
    in sustained runs it is 5% slower: the confirmation's passes (the order alternating,
    200 ms or more each) give the pick back to cuBLAS."""
    assert MeasurePolicy.for_device("cuda").confirm_passes == 4 and MeasurePolicy.for_device("cpu").confirm_passes == 0
    first = {"triton::mm": 0.3241, "aten::mm": 0.3345, "triton::mm_persistent_tma": 0.3336}
    executor = _SustainedExecutor({}, {"triton::mm": 0.3470, "aten::mm": 0.3307})
    times = confirm(first, executor, passes=4)
    assert executor.asked == [["triton::mm", "aten::mm"], ["aten::mm", "triton::mm"]] * 2  # TMA led by < 3%
    assert all(budget >= 200 for budget in executor.budgets)
    assert times == {"triton::mm": 0.3470, "aten::mm": 0.3307, "triton::mm_persistent_tma": 0.3336}
    assert pick_winner([cand(uid, ms) for uid, ms in times.items()]).uid == "aten::mm"


def test_a_real_lead_survives_the_confirmation_and_cublas_wins_need_none():
    executor = _SustainedExecutor({}, {"triton::mm_swap_ab": 0.0115, "aten::mm": 0.0138})
    times = confirm({"triton::mm_swap_ab": 0.0114, "aten::mm": 0.0131}, executor, passes=4)
    assert pick_winner([cand(uid, ms) for uid, ms in times.items()]).uid == "triton::mm_swap_ab"
    quiet = _SustainedExecutor({}, {})
    assert confirm({"triton::mm": 1.0, "aten::mm": 1.01}, quiet, passes=4) == {"triton::mm": 1.0, "aten::mm": 1.01}
    assert confirm({"triton::mm": 0.5, "aten::mm": 1.0}, quiet, passes=0) == {"triton::mm": 0.5, "aten::mm": 1.0}
    assert confirm({"triton::mm": 0.5, "triton::bmm": 1.0}, quiet, passes=4) == {"triton::mm": 0.5, "triton::bmm": 1.0}
    assert quiet.asked == []  # a tie goes to cuBLAS anyway; no passes; no cuBLAS candidate



def test_a_runner_up_cannot_win_unconfirmed():
    """Three kernels lead cuBLAS in short bursts: the two fastest are confirmed with cuBLAS
    and lose; the third, which would then win on its short-burst time against cuBLAS's
    sustained one, is confirmed in the next round and loses too."""
    first = {"triton::mm": 0.317, "triton::mm_persistent_tma": 0.318, "triton::mm_splitk": 0.319,
             "aten::mm": 0.3345}
    sustained = {"triton::mm": 0.347, "triton::mm_persistent_tma": 0.345, "triton::mm_splitk": 0.340,
                 "aten::mm": 0.3307}
    executor = _SustainedExecutor({}, sustained)
    times = confirm(first, executor, passes=2)
    assert executor.asked == [["triton::mm", "triton::mm_persistent_tma", "aten::mm"],
                              ["aten::mm", "triton::mm_persistent_tma", "triton::mm"],
                              ["triton::mm_splitk", "aten::mm"], ["aten::mm", "triton::mm_splitk"]]
    assert times == sustained
    assert pick_winner([cand(uid, ms) for uid, ms in times.items()]).uid == "aten::mm"


def confirmed_results(first, executor, passes=4):
    from autotune_cli.search.base import SearchContext, confirm_against_vendor

    ctx = SearchContext(problem=None, device=None, choices=[], executor=executor,
                        measure=MeasurePolicy(confirm_passes=passes), deadline=None, on_result=lambda *a: None)
    pairs = [(_Choice(uid), cand(uid, ms)) for uid, ms in first.items()]
    return [r for _, r in confirm_against_vendor(ctx, pairs)]


def test_a_lead_inside_the_margin_is_confirmed_and_wins_when_it_holds():
    """decode 8x14336x4096 on the H200: swap-AB led cuBLAS by 2.5% in the tune, a tie by the
    short bursts' margin. Led by more than CONFIRMED_MARGIN, it is timed beside cuBLAS in
    sustained passes, and a lead that holds there wins; one that shrinks below the margin
    (or grows into cuBLAS's favour) leaves the pick to cuBLAS; 1% ahead is not confirmed."""
    first = {"triton::mm_swap_ab": 0.03105, "aten::mm": 0.03186}
    assert 1 - first["triton::mm_swap_ab"] / first["aten::mm"] < VENDOR_MARGIN
    assert pick_winner([cand(u, ms) for u, ms in first.items()]).uid == "aten::mm"  # unconfirmed: a tie
    holds = _SustainedExecutor({}, {"triton::mm_swap_ab": 0.0313, "aten::mm": 0.0322})
    results = confirmed_results(first, holds)
    assert holds.asked == [["triton::mm_swap_ab", "aten::mm"], ["aten::mm", "triton::mm_swap_ab"]] * 2
    assert all(r.confirmed for r in results)
    winner = pick_winner(results)
    assert winner.uid == "triton::mm_swap_ab" and winner.confirmed
    assert CONFIRMED_MARGIN < 1 - 0.0313 / 0.0322 < VENDOR_MARGIN  # a lead only the confirmation lets win
    assert is_pick({"uid": winner.uid, "params": winner.params}, [r.to_dict() for r in results])
    shrinks = _SustainedExecutor({}, {"triton::mm_swap_ab": 0.0317, "aten::mm": 0.0322})
    assert 1 - 0.0317 / 0.0322 < CONFIRMED_MARGIN
    assert pick_winner(confirmed_results(first, shrinks)).uid == "aten::mm"
    quiet = _SustainedExecutor({}, {})
    assert pick_winner(confirmed_results({"triton::mm": 0.99, "aten::mm": 1.0}, quiet)).uid == "aten::mm"
    assert quiet.asked == []


def test_a_confirmed_margin_needs_both_sides_confirmed():
    """The smaller margin holds only between a kernel and cuBLAS both timed in the
    confirmation; a stored entry's unconfirmed times keep the short bursts' margin."""
    kernel = replace(cand("triton::mm", 0.975), confirmed=True)
    vendor = cand("aten::mm", 1.0)
    assert pick_winner([kernel, vendor]).uid == "aten::mm"
    assert pick_winner([kernel, replace(vendor, confirmed=True)]).uid == "triton::mm"
    assert Candidate.from_dict(kernel.to_dict()).confirmed
    assert not Candidate.from_dict({k: v for k, v in kernel.to_dict().items() if k != "confirmed"}).confirmed


class _RoundsExecutor(_Executor):
    """Sustained runs read from `rounds[i]` in the confirmation's i-th round (`passes` calls
    each): cuBLAS may read differently from one round to the next."""

    def __init__(self, rounds, passes):
        super().__init__({})
        self.rounds, self.passes = rounds, passes

    def run(self, choices, on_result, policy=None, deadline=None, shareable=False):
        self.asked.append([c.uid for c in choices])
        table = self.rounds[(len(self.asked) - 1) // self.passes]
        for i, choice in enumerate(choices):
            on_result(i, cand(choice.uid, table[choice.uid]))


def test_a_lead_is_confirmed_only_against_the_cublas_reading_it_was_timed_beside():
    """Round 1: A leads cuBLAS by 1.2% in sustained runs (not enough), B trails; round 2
    confirms C, and cuBLAS reads 1.012 there. A's 0.988 from round 1 was never timed beside
    that reading: its 2.4% over it is not a confirmed lead, and the pick stays cuBLAS's."""
    first = {"triton::mm": 0.95, "triton::mm_persistent_tma": 0.955, "triton::mm_splitk": 0.96, "aten::mm": 1.0}
    rounds = [{"triton::mm": 0.988, "triton::mm_persistent_tma": 1.05, "aten::mm": 1.0},
              {"triton::mm_splitk": 1.02, "aten::mm": 1.012}]
    executor = _RoundsExecutor(rounds, passes=2)
    results = confirmed_results(first, executor, passes=2)
    assert [set(a) for a in executor.asked] == [{"triton::mm", "triton::mm_persistent_tma", "aten::mm"}] * 2 + [
        {"triton::mm_splitk", "aten::mm"}] * 2
    by_uid = {r.uid: r for r in results}
    assert by_uid["aten::mm"].ms == 1.012 and by_uid["aten::mm"].confirmed
    assert by_uid["triton::mm"].ms == 0.988 and not by_uid["triton::mm"].confirmed
    assert {r.uid for r in results if r.confirmed} == {"triton::mm_splitk", "aten::mm"}  # the last round's
    assert pick_winner(results).uid == "aten::mm"


def test_results_a_lent_worker_measured_are_timed_again_on_the_tuning_gpu():
    """Another GPU of the model lent its worker to the first round (scaleout/local.py): its readings
    within 10% of the best are timed again here, alone if need be, so the pick rests on this
    GPU's own times; one further behind keeps its reading and says where it was taken."""
    from autotune_cli.search.base import SearchContext, retime_contenders

    def run(first):
        executor = _Executor({"triton::mm": 1.0, "triton::mm_splitk": 1.02, "aten::mm_aligned": 1.3})
        ctx = SearchContext(problem=None, device=None, choices=[], executor=executor,
                            measure=MeasurePolicy(retime_passes=1), deadline=None, on_result=lambda *a: None)
        pairs = [(_Choice(uid), replace(cand(uid, ms), measured_on=lent)) for uid, (ms, lent) in first.items()]
        return {r.uid: (r.ms, r.measured_on) for _, r in retime_contenders(ctx, pairs)}, executor.asked

    # a lone lent leader (the other GPU reads 5% fast): timed again, alone, on this GPU
    times, asked = run({"triton::mm": (0.95, 1)})
    assert asked == [["triton::mm"]] and times == {"triton::mm": (1.0, None)}
    # lent results 7% behind the best own one: outside the 3% window, inside 10%: timed again
    times, asked = run({"triton::mm_splitk": (0.98, None), "triton::mm": (1.05, 1), "aten::mm_aligned": (1.3, 1)})
    assert asked == [["triton::mm_splitk", "triton::mm"]]
    assert times == {"triton::mm_splitk": (1.02, None), "triton::mm": (1.0, None), "aten::mm_aligned": (1.3, 1)}
    assert pick_winner([cand(uid, ms) for uid, (ms, _) in times.items()]).uid == "triton::mm"


def test_only_the_first_timing_of_a_search_takes_lent_workers():
    """The default search runs the full round, the re-time and the confirmation beside cuBLAS
    through the executor; only the full round is offered to lent workers (`shareable`)."""
    from autotune_cli.search.base import SearchContext
    from autotune_cli.search.default import search

    class Lendable(Executor):
        def __init__(self):
            self.rounds = []

        def run(self, choices, on_result, policy=None, deadline=None, shareable=False):
            self.rounds.append(shareable)
            times = {"aten::mm": 1.0, "triton::mm": 0.9}
            for i, choice in enumerate(choices):
                on_result(i, cand(choice.uid, times[choice.uid]))

    executor = Lendable()
    ctx = SearchContext(problem=None, device=None, choices=[_Choice("aten::mm"), _Choice("triton::mm")],
                        executor=executor, measure=MeasurePolicy(retime_passes=2),
                        deadline=None, on_result=lambda *a: None)
    results = search(ctx)
    assert executor.rounds[0] is True and len(executor.rounds) > 2 and not any(executor.rounds[1:])
    assert pick_winner(results).uid == "triton::mm"


class _PlacedExecutor(_Executor):
    """A GPU where cuBLAS's time moves with its operands' addresses (TimingPolicy.placement)
    and a Triton tile's does not: cuBLAS reads `lucky` at the first timing's placement (0)
    and at `lucky_at`, `usual` elsewhere."""

    def __init__(self, tile, lucky, usual, lucky_at=()):
        super().__init__({})
        self.tile, self.lucky, self.usual, self.lucky_at = tile, lucky, usual, set(lucky_at)
        self.placements = []

    def run(self, choices, on_result, policy=None, deadline=None, shareable=False):
        self.asked.append([c.uid for c in choices])
        self.placements.append(policy.placement)
        for i, choice in enumerate(choices):
            if choice.uid == "aten::mm":
                ms = self.lucky if policy.placement in self.lucky_at | {0} else self.usual
            else:
                ms = self.tile
            on_result(i, cand(choice.uid, ms))


def test_each_pass_times_its_contenders_at_a_placement_of_its_own():
    """The 256-row chunk (256x4096x4096 bf16 on the H200): cuBLAS's time moved by up to 10%
    with its operands' addresses, the tile's by 2%. The first timing read cuBLAS at a lucky
    placement; the re-time's and the confirmation's passes each make the operands anew at a
    placement no pass before used (one for every contender of a pass), so cuBLAS's time is
    its median over them, and the tile that leads it at most placements is picked."""
    from autotune_cli.search.base import SearchContext, confirm_against_vendor, retime_contenders

    executor = _PlacedExecutor(tile=17.3, lucky=16.7, usual=17.9, lucky_at=(3,))
    ctx = SearchContext(problem=None, device=None, choices=[], executor=executor,
                        measure=MeasurePolicy(retime_passes=4, confirm_passes=4), deadline=None,
                        on_result=lambda *a: None)
    pairs = [(_Choice(uid), cand(uid, ms)) for uid, ms in {"aten::mm": 16.7, "triton::mm": 17.1}.items()]
    retimed = retime_contenders(ctx, pairs)
    assert executor.placements == [1, 2, 3, 4]  # a new placement per pass, the first timing's (0) not again
    assert {r.uid: r.ms for _, r in retimed} == {"aten::mm": 17.9, "triton::mm": 17.3}
    results = [r for _, r in confirm_against_vendor(ctx, retimed)]
    assert executor.placements == [1, 2, 3, 4, 5, 6, 7, 8]  # the confirmation's passes: new ones again
    assert all(len(set(asked)) == len(asked) == 2 for asked in executor.asked)  # both in every pass
    winner = pick_winner(results)
    assert winner.uid == "triton::mm" and winner.confirmed
    # One pass, at the first timing's placement, would have kept cuBLAS on its lucky reading.
    assert pick_winner([r for _, r in pairs]).uid == "aten::mm"
