"""Where a tune's seconds go (autotune_cli/store/phases.py): each phase measured where it happens,
shown by `autotune mm --profile` and carried in `--json`, for one problem and for a list."""

import json

from autotune_cli.store.entry import Entry
from autotune_cli.store.phases import PhaseClock, TuneRecord, process_age_s, summary_line, worker_seconds
from autotune_cli.problem import make_problem


def test_the_clock_sums_intervals_per_name_in_order():
    clock = PhaseClock()
    clock.add("full", 0.5)
    clock.add("mystery", 0.1)
    clock.add("lookup", 0.25)
    clock.add("full", 0.25)
    with clock.phase("choices"):
        pass
    phases = clock.as_dict()
    assert list(phases) == ["lookup", "choices", "full", "mystery"]  # ORDER, then the others
    assert phases["full"] == 0.75 and phases["lookup"] == 0.25 and phases["choices"] >= 0


def test_worker_steps_are_summed_over_candidates():
    steps = worker_seconds([{"timing": 0.5, "build": 0.125}, None, {"timing": 0.25, "first_run": 1.0}])
    assert steps == {"build": 0.125, "first_run": 1.0, "timing": 0.75}


def test_a_tune_record_is_every_phase_field_of_an_entry_made_at_once():
    clock = PhaseClock()
    clock.add("full", 0.5, count=3)
    started = clock.started
    record = TuneRecord.of(clock, started, [{"timing": 0.25}, None, {"timing": 0.5, "build": 0.125}],
                           resumed=1, timeline=[("aten::mm", "full", 0.1)],
                           compiles=[(started + 0.5, started + 1.5, 0.75), (started + 1.0, started + 2.5, 1.25)],
                           compile_pool={"processes": 2}, startups=[("measure", 1.5)])
    assert record.compiles == [[0.5, 1.5, 0.75], [1.0, 2.5, 1.25]]  # seconds since the tune started
    assert record.compile_pool_s == {"kernels": 2, "busy": 2.0, "span": 2.0}
    assert record.worker_s == {"build": 0.125, "timing": 0.75} and record.rounds == {"full": 3}
    assert record.phases["full"] == 0.5 and record.phases["total"] >= 0 and record.startups == [["measure", 1.5]]
    fields = record.entry_fields()
    entry = Entry(problem=make_problem(m=8, n=8, k=8, device="cpu"), fingerprint={"device_name": "x"},
                  winner=None, **fields)
    assert {name: getattr(entry, name) for name in fields} == fields  # each is an Entry field
    assert set(entry.phase_fields()) <= set(fields)
    idle = TuneRecord.of(PhaseClock(), started, [], resumed=0, timeline=[], compiles=None, compile_pool=None,
                         startups=())
    assert idle.compiles is None and idle.compile_pool_s is None and idle.startups is None


def test_process_age_is_this_process():
    age = process_age_s()
    assert age is None or 0 <= age < 24 * 3600


def test_a_tune_reports_its_phases_in_json_and_profile(cache_dir, cli):
    code, out, err = cli("mm", "--m", 32, "--n", 32, "--k", 32, "--device", "cpu", "--templates", "aten,triton::mm",
                         "--json", "--profile")
    assert code == 0, err
    doc = json.loads(out)
    phases = doc["phases"]
    for name in ("lookup", "start", "choices", "full", "save", "total"):
        assert name in phases, phases
    # the sequential phases happen inside the tune: their sum cannot exceed its wall (partial
    # saves and the prefetch happen within the rounds)
    assert sum(v for k, v in phases.items() if k not in ("total", "partial_save", "prefetch")) <= phases["total"] + 1e-3
    ok = [c for c in doc["candidates"] if c["status"] == "ok"]
    assert doc["worker_s"]["timing"] > 0 and len(ok) >= 2
    assert abs(doc["worker_s"]["timing"] - sum(c["phases"]["timing"] for c in ok)) < 1e-3
    assert any(role == "measure" for role, _ in doc["startups"])
    assert doc["command_s"]["tuned"] >= doc["command_s"]["looked_up"]
    assert "phases (s): total" in err and "timing process:" in err and "command (s since its start)" in err
    # a hit has no phases: nothing was tuned
    code, out, err = cli("mm", "--m", 32, "--n", 32, "--k", 32, "--device", "cpu", "--templates", "aten,triton::mm",
                         "--json", "--profile")
    assert code == 0 and json.loads(out)["from_cache"] and "phases" not in json.loads(out)
    assert "phases: a cache hit" in err


def test_a_list_reports_each_problem_s_phases(tmp_path, cache_dir, cli):
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps([{"m": 16, "n": 16, "k": 16}, {"m": 16, "n": 32, "k": 16, "batch": 2}]))
    code, out, err = cli("mm", "--from", path, "--device", "cpu", "--templates", "aten", "--json", "--profile")
    assert code == 0, err
    rows = json.loads(out)["problems"]
    assert all("full" in row["phases"] and row["worker_s"]["timing"] > 0 for row in rows)
    assert err.count("phases (s): total") == 2


def test_the_summary_line_names_what_is_there():
    assert "not recorded" in summary_line({})
    line = summary_line({"phases": {"lookup": 0.01, "full": 2.0, "total": 2.5},
                         "worker_s": {"timing": 1.5}, "compile_pool_s": {"kernels": 3, "busy": 2.4, "span": 1.2},
                         "startups": [["measure", 1.1], ["compile", 0.9]]})
    assert line.startswith("phases (s): total 2.50 = lookup 0.01, full 2.00")
    assert "timing 1.50" in line and "3 kernel(s), 2.40 s busy over 1.20 s" in line and "compile 0.90" in line
