"""One entry per problem and machine holds what every template selection's tune learned
(tune/hits.stored_after): an interrupted tune never takes away the winner that is served,
an interrupted tune's partial results are never answered as finished, a tune cut short by
--budget is resumed by one without, and writes merge with what the file holds at the time."""

from __future__ import annotations

import pytest

from autotune_cli.errors import Interrupted
from autotune_cli.hardware.device import probe_device
from autotune_cli.settings import TuneSettings
from autotune_cli.store.cache import Cache
from autotune_cli.store.results import BUDGET_RAN_OUT, SKIPPED, Candidate
from autotune_cli.tune.selections import stored_after, template_hashes
from autotune_cli.tune.tuner import Tuner
from test_interrupts import PROBLEM, SLEEPY, ScriptedExecutor, all_ok, ok


class Heard:
    def __init__(self):
        self.notices = []

    def notice(self, message):
        self.notices.append(message)

    def __getattr__(self, name):  # the other listener events are not looked at
        return lambda *args: None


def tuner(tmp_path, step, templates, listener=None, **settings):
    executor = ScriptedExecutor(step)
    settings = TuneSettings(device="cpu", cache_dir=tmp_path, templates=templates, plugins=(SLEEPY,), **settings)
    return Tuner(settings, listener, executor_factory=lambda device, s: executor, device=probe_device("cpu")), executor


def interrupted_after(count):
    def step(call, choices, on_result):
        for index, choice in enumerate(choices[:count]):
            on_result(index, ok(choice, ms=10.0 + index))
        raise KeyboardInterrupt
    return step


def the_entry(folder):
    (entry,) = Cache(folder).load().values()
    return entry


def test_an_interrupted_narrower_tune_keeps_the_served_winner(tmp_path):
    wide, _ = tuner(tmp_path, all_ok, ("aten",))
    assert wide.tune(PROBLEM).winner.uid == "aten::mm"
    narrow, _ = tuner(tmp_path, interrupted_after(3), ("test::sleepy",))
    with pytest.raises(Interrupted, match="the cached entry of .* is kept as it was"):
        narrow.tune(PROBLEM)
    entry = the_entry(tmp_path)
    assert not entry.partial and entry.winner.uid == "aten::mm"


def test_a_tune_between_an_interrupted_one_and_its_resume_answers_nothing_of_it(tmp_path):
    first, _ = tuner(tmp_path, interrupted_after(3), ("test::sleepy",))
    with pytest.raises(Interrupted):
        first.tune(PROBLEM)
    assert the_entry(tmp_path).partial
    aten, _ = tuner(tmp_path, all_ok, ("aten",))
    aten.tune(PROBLEM)
    assert set(the_entry(tmp_path).templates) == {"aten::mm"}  # the partial results were no finished tune's
    again, executor = tuner(tmp_path, all_ok, ("test::sleepy",))
    outcome = again.tune(PROBLEM)
    assert not outcome.from_cache and len(executor.calls[0]) == 8  # every config timed, none taken as done
    assert {c.uid for c in outcome.entry.candidates} == {"test::sleepy"}
    assert set(the_entry(tmp_path).templates) == {"aten::mm", "test::sleepy"}


def test_a_partial_entry_holding_a_winner_is_no_hit_for_any_selection(tmp_path):
    """An interrupted tune's entry is resumed, never answered, even where it holds a winner
    (a hand edit, a file of another writer): neither a tune of its selection nor the API's
    lookup of that selection takes it as finished."""
    from autotune_cli import api

    first, _ = tuner(tmp_path, all_ok, ("aten",))
    first.tune(PROBLEM)
    cache = Cache(tmp_path)
    (key, entry), = cache.load().items()
    cache.put(key, {**entry.to_dict(), "partial": True})
    assert the_entry(tmp_path).partial and the_entry(tmp_path).winner is not None
    assert api.Dispatcher(tmp_path).lookup_entry(PROBLEM, templates="aten") is None
    again, _ = tuner(tmp_path, all_ok, ("aten",))
    outcome = again.tune(PROBLEM)
    assert not outcome.from_cache  # resumed (its results kept) and stored finished
    assert not the_entry(tmp_path).partial and the_entry(tmp_path).winner.uid == "aten::mm"


def test_a_tune_cut_short_by_its_budget_is_resumed_by_one_without(tmp_path):
    def half_skipped(call, choices, on_result):
        for index, choice in enumerate(choices):
            if index < 4:
                on_result(index, ok(choice, ms=10.0 - index))
            else:
                on_result(index, Candidate(uid=choice.uid, params=choice.params, status=SKIPPED,
                                           error=BUDGET_RAN_OUT))
        return []

    budgeted, _ = tuner(tmp_path, half_skipped, ("test::sleepy",), budget_s=60.0)
    first = budgeted.tune(PROBLEM)
    assert first.entry.cut_short and first.winner.params["id"] == 3
    again, _ = tuner(tmp_path, all_ok, ("test::sleepy",), budget_s=60.0)
    assert again.tune(PROBLEM).from_cache  # a budgeted tune is answered by one
    heard = Heard()
    resumed, executor = tuner(tmp_path, lambda call, choices, on_result: [
        on_result(i, ok(c, ms=1.0)) for i, c in enumerate(choices)], ("test::sleepy",), listener=heard)
    outcome = resumed.tune(PROBLEM)
    assert not outcome.from_cache and [c.params["id"] for c in executor.calls[0]] == [4, 5, 6, 7]
    assert any(n.startswith("resuming a tune --budget cut short") for n in heard.notices), heard.notices
    assert not outcome.entry.cut_short and outcome.winner.ms == 1.0
    assert len(outcome.entry.candidates) == 8


def test_a_write_merges_with_what_the_file_holds_when_it_is_written(tmp_path):
    """Two tunes of other selections at once: the later write keeps the earlier's results,
    whatever the cache held when the later tune began."""
    aten, _ = tuner(tmp_path / "a", all_ok, ("aten",))
    wide = aten.tune(PROBLEM)
    sleepy, _ = tuner(tmp_path / "b", all_ok, ("test::sleepy",))
    narrow = sleepy.tune(PROBLEM)  # in another folder: it saw nothing stored
    cache = Cache(tmp_path / "a")
    hashes = template_hashes(PROBLEM)
    stored = cache.put_with(wide.key, lambda current: stored_after(narrow.entry, current, hashes))
    assert set(stored.templates) == {"aten::mm", "test::sleepy"}
    assert {c.uid for c in the_entry(tmp_path / "a").candidates} == {"aten::mm", "test::sleepy"}
    assert stored.winner.uid == "aten::mm"  # all_ok times everything alike: the tie is cuBLAS's


def half_skipped(call, choices, on_result):
    """The first half timed, the rest left by --budget."""
    for index, choice in enumerate(choices):
        if index < len(choices) // 2:
            on_result(index, ok(choice, ms=10.0 - index))
        else:
            on_result(index, Candidate(uid=choice.uid, params=choice.params, status=SKIPPED, error=BUDGET_RAN_OUT))
    return []


def test_a_selection_cut_short_stays_so_through_another_selections_tune(tmp_path):
    cut, _ = tuner(tmp_path, half_skipped, ("test::sleepy",), budget_s=60.0)
    cut.tune(PROBLEM)
    heard = Heard()
    aten, _ = tuner(tmp_path, all_ok, ("aten",), listener=heard)
    aten.tune(PROBLEM)
    assert not any(n.startswith("resuming") for n in heard.notices), heard.notices
    assert the_entry(tmp_path).cut_short
    again, _ = tuner(tmp_path, all_ok, ("aten",))
    assert again.tune(PROBLEM).from_cache  # aten's own results were not cut short
    resumed, executor = tuner(tmp_path, all_ok, ("test::sleepy",))
    outcome = resumed.tune(PROBLEM)
    assert not outcome.from_cache and [c.params["id"] for c in executor.calls[0]] == [4, 5, 6, 7]
    assert not the_entry(tmp_path).cut_short


def test_results_of_a_template_not_registered_here_are_kept_unjudged(tmp_path):
    """A tune run without the --plugin an earlier tune had keeps that plugin's results
    (their source cannot be checked here; a process that registers it will)."""
    sleepy, _ = tuner(tmp_path / "a", all_ok, ("test::sleepy",))
    earlier = sleepy.tune(PROBLEM).entry
    aten, _ = tuner(tmp_path / "b", all_ok, ("aten",))
    later = aten.tune(PROBLEM).entry
    without_plugin = {uid: digest for uid, digest in template_hashes(PROBLEM).items() if uid != "test::sleepy"}
    merged = stored_after(later, earlier, without_plugin)
    assert set(merged.templates) == {"aten::mm", "test::sleepy"} and len(merged.candidates) == 9
    assert merged.winner.uid == "aten::mm"  # one it cannot judge never wins here


def test_an_interrupted_tune_dropped_by_another_selections_tune_is_said(tmp_path):
    first, _ = tuner(tmp_path, interrupted_after(3), ("test::sleepy",))
    with pytest.raises(Interrupted):
        first.tune(PROBLEM)
    heard = Heard()
    aten, _ = tuner(tmp_path, all_ok, ("aten",), listener=heard)
    aten.tune(PROBLEM)
    assert any("will not be resumed" in n and "test::sleepy" in n for n in heard.notices), heard.notices


def test_a_winner_that_no_longer_serves_does_not_keep_an_interrupted_tune_from_saving(tmp_path):
    """A finished entry whose template changed since answers nothing: an interrupted tune
    of it saves its results (to resume), and the interrupt does not say the winner serves."""
    sleepy, _ = tuner(tmp_path, all_ok, ("test::sleepy",))
    key = sleepy.tune(PROBLEM).key
    stale = the_entry(tmp_path).to_dict()
    stale["fingerprint"]["templates"]["test::sleepy"] = "0" * 16
    Cache(tmp_path).put(key, stale)
    again, _ = tuner(tmp_path, interrupted_after(3), ("test::sleepy",))
    with pytest.raises(Interrupted, match="3 finished result"):
        again.tune(PROBLEM)
    assert the_entry(tmp_path).partial


def test_an_exhaustive_search_is_not_answered_by_a_default_one(tmp_path):
    default, _ = tuner(tmp_path, all_ok, ("test::sleepy",))
    default.tune(PROBLEM)
    wider, executor = tuner(tmp_path, all_ok, ("test::sleepy",), search="exhaustive")
    assert not wider.tune(PROBLEM).from_cache and executor.calls
    assert the_entry(tmp_path).search == "exhaustive"
    again, _ = tuner(tmp_path, all_ok, ("test::sleepy",))
    assert again.tune(PROBLEM).from_cache  # the wider search answers the default one


def every_one(status, error=""):
    """A step whose every candidate ends with `status` (skipped: left by --budget)."""
    def step(call, choices, on_result):
        for index, choice in enumerate(choices):
            on_result(index, Candidate(uid=choice.uid, params=choice.params, status=status, error=error))
        return []
    return step


def test_a_tune_without_a_winner_keeps_the_served_winner(tmp_path):
    """A re-tune whose every candidate --budget left untimed, or timed out, finds nothing
    against the winner that serves: that entry stays, and the command says so."""
    first, _ = tuner(tmp_path, all_ok, ("aten",))
    first.tune(PROBLEM)
    served = the_entry(tmp_path).to_dict()
    for status, error in ((SKIPPED, BUDGET_RAN_OUT), ("timeout", "took longer than 1 s")):
        heard = Heard()
        again, executor = tuner(tmp_path, every_one(status, error), ("aten",), listener=heard, force=True,
                                budget_s=60.0)
        outcome = again.tune(PROBLEM)
        assert executor.calls and outcome.winner is None  # it did tune, and found no winner
        assert the_entry(tmp_path).to_dict() == served
        assert any("the cache keeps the winner it serves, aten::mm (" in n for n in heard.notices), heard.notices


def test_a_tune_that_finds_the_served_winner_wrong_replaces_it(tmp_path):
    first, _ = tuner(tmp_path, all_ok, ("aten",))
    assert first.tune(PROBLEM).winner.uid == "aten::mm"
    again, _ = tuner(tmp_path, every_one("wrong_result", "mismatch"), ("aten",), force=True)
    assert again.tune(PROBLEM).winner is None
    entry = the_entry(tmp_path)
    assert entry.winner is None and {c.status for c in entry.candidates} == {"wrong_result"}
