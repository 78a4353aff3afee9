"""entry.py: CacheKey, Winner and Entry round-trip real cache files and refuse bad ones.

One real tune on the CPU (aten and one Triton config under the interpreter) writes a cache
file; every test reads that file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from autotune_cli.store.cache import CACHE_FILE, Cache, DamagedCache
from autotune_cli.cli import main
from autotune_cli.cli.cache_import import plan_import
from autotune_cli.store.entry import BadKey, CacheKey, Entry, Winner
from autotune_cli.store.fingerprint import digest_of
from autotune_cli.problem import GemmProblem
from autotune_cli.store.results import Candidate

REPO = Path(__file__).resolve().parents[1]
# The fields of a finished entry, in the order the tuner has always written them.
FINISHED = ["problem", "fingerprint", "fingerprint_digest", "machine", "winner", "candidates",
            "pruned", "considered", "search", "tool_version", "tuned_at", "tune_seconds",
            "resumed", "timeline", "phases", "worker_s", "rounds", "startups"]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    """A cache folder holding what two real tunes wrote (aten only; aten + triton::mm)."""
    folder = tmp_path_factory.mktemp("tuned")
    for m, templates in ((32, "aten"), (16, "aten,triton::mm")):
        code = main(["mm", "--device", "cpu", "--m", str(m), "--n", "16", "--k", "16", "--templates", templates,
                     "--workers", "1", "--cache-dir", str(folder)])
        assert code == 0
    return folder


def document(folder: Path) -> dict:
    return json.loads((folder / CACHE_FILE).read_text())


def test_entries_of_a_real_file_round_trip_field_by_field(tuned):
    raw = document(tuned)["entries"]
    assert len(raw) == 2
    for key, data in raw.items():
        entry = Entry.from_dict(data, key)
        assert list(data) == [name for name in FINISHED if name in data]
        assert set(FINISHED) - set(data) <= {"startups"}  # present when this tune started workers
        assert entry.to_dict() == data
        # rebuilt from its typed fields alone (not the object it was read from), in the order
        # and with the values the tuner wrote
        rebuilt = replace(entry)
        assert json.dumps(rebuilt.to_dict(), indent=1) == json.dumps(data, indent=1)
        assert rebuilt == entry
        assert str(entry.key()) == key and CacheKey.parse(key) == entry.key()
        assert entry.winner is not None and entry.winner.to_dict() == data["winner"]
        assert Winner.from_dict(data["winner"]) == entry.winner
        assert all(isinstance(c, Candidate) for c in entry.candidates)
        assert entry.device_name == data["fingerprint"]["device_name"]
        assert entry.device_type == "cpu" and entry.templates == data["fingerprint"]["templates"]
    assert any(e["winner"]["params"] for e in raw.values()) or any(
        c["params"] for e in raw.values() for c in e["candidates"])  # a Triton config is in there


def test_a_file_rewritten_through_entries_is_byte_for_byte_the_same(tuned, tmp_path):
    before = (tuned / CACHE_FILE).read_bytes()
    (tmp_path / CACHE_FILE).write_bytes(before)
    cache = Cache(tmp_path)
    extra = f"{GemmProblem('mm', 1, 1, 1).key()}@{digest_of({'device_name': 'x'})}"
    cache.put(extra, {"problem": GemmProblem("mm", 1, 1, 1).to_dict(),
                      "fingerprint": {"device_name": "x"}, "winner": None, "candidates": []})
    cache.remove(lambda key, entry: key == extra)
    assert (tmp_path / CACHE_FILE).read_bytes() == before


def test_fields_this_version_does_not_know_are_kept_in_their_place(tuned, tmp_path):
    key, data = next(iter(document(tuned)["entries"].items()))
    odd = {"note": "from elsewhere", **data, "later": [1, 2]}
    entry = Entry.from_dict(odd, key)
    assert entry.extra == {"note": "from elsewhere", "later": [1, 2]}
    assert list(entry.to_dict()) == list(odd)
    Cache(tmp_path).put(key, odd)
    assert list(document(tmp_path)["entries"][key]) == list(odd)


def test_partial_entry_order():
    problem = GemmProblem("mm", 8, 8, 8, device="cpu")
    entry = Entry(problem, {"device_name": "cpu"}, Winner("aten::mm", {}, 0.1, 1.0), (), "d", "m",
                  pruned={}, considered=1, search="default", tool_version="0", tuned_at="t", tune_seconds=0.5)
    partial = replace(entry, winner=None, partial=True).to_dict()
    assert list(partial)[-2:] == ["tune_seconds", "partial"] and partial["winner"] is None
    assert Entry.from_dict(partial).partial and not Entry.from_dict(entry.to_dict()).partial


def test_cache_key_parse_format_and_dict():
    key = CacheKey.parse("mm/m16/n16/k16/float16/nn/cpu@0123abcd")
    assert key == CacheKey("mm/m16/n16/k16/float16/nn/cpu", "0123abcd")
    assert str(key) == "mm/m16/n16/k16/float16/nn/cpu@0123abcd"
    assert CacheKey.from_dict(key.to_dict()) == key
    assert CacheKey.of(GemmProblem("mm", 16, 16, 16, device="cpu"), "0123abcd") == key
    assert CacheKey.parse("a@b@c") == CacheKey("a@b", "c")  # the digest follows the last "@"


@pytest.mark.parametrize("text, message", [
    ("mm/m16/n16/k16/float16/nn/cpu", "key has no fingerprint part"),
    (5, "key 5 is not a string"),
])
def test_bad_keys_are_refused_with_the_messages_of_before(text, message):
    with pytest.raises(BadKey, match=message):
        CacheKey.parse(text)
    assert CacheKey.try_parse(text) is None
    with pytest.raises(BadKey):
        CacheKey.from_dict({"problem": "mm@x", "fingerprint": "y"})


def test_an_import_skips_keys_that_do_not_match_their_entry(tuned):
    key, data = next(iter(document(tuned)["entries"].items()))
    entry = Entry.from_dict(data, key)
    problem_key, digest = key.rsplit("@", 1)
    theirs = {problem_key: entry, f"mm/m1/n1/k1/float16/nn/cpu@{digest}": entry,
              f"{problem_key}@other": entry}
    skipped = dict(plan_import({}, theirs).skipped)
    assert skipped == {
        problem_key: "its key has no fingerprint part",
        f"mm/m1/n1/k1/float16/nn/cpu@{digest}": f"it holds the problem {problem_key}, not the key's",
        f"{problem_key}@other": f"its fingerprint ({entry.device_name!r}) has the digest {digest}, not the key's",
    }


def good() -> dict:
    return {"problem": GemmProblem("mm", 1, 1, 1).to_dict(), "fingerprint": {"device_name": "x"},
            "winner": {"uid": "aten::mm", "params": {}, "ms": 0.1, "p20": None, "p80": None, "tflops": 1.0},
            "candidates": [{"uid": "aten::mm", "params": {}, "status": "ok", "ms": 0.1}]}


@pytest.mark.parametrize("change, message", [
    (lambda d: d.pop("fingerprint"), "entry 'k@fp': 'fingerprint' missing or not a dict"),
    (lambda d: d.update(candidates={}), "entry 'k@fp': 'candidates' missing or not a list"),
    (lambda d: d["winner"].pop("uid"), "entry 'k@fp': winner has no uid"),
    (lambda d: d["winner"].update(params=[]), "entry 'k@fp': winner params not an object"),
    (lambda d: d["winner"].update(ms="1"), "entry 'k@fp': winner time '1' is not a number"),
    (lambda d: d["winner"].update(tflops=-1), "entry 'k@fp': winner tflops -1 is negative"),
    (lambda d: d["winner"].update(ms=-5), "entry 'k@fp': winner time -5 is negative"),
    (lambda d: d["winner"].update(p20=True), "entry 'k@fp': winner p20 True is not a number"),
    (lambda d: d.update(winner=[]), "entry 'k@fp': 'winner' is not an object"),
    (lambda d: d["candidates"][0].pop("status"), "entry 'k@fp': candidate 0 is malformed"),
    (lambda d: d["candidates"][0].update(ms=None), "entry 'k@fp': candidate 0 is ok but has no time"),
    (lambda d: d["candidates"][0].update(status="lost"), "entry 'k@fp': candidate 0 has an unknown status 'lost'"),
    (lambda d: d["candidates"][0].update(ms=-5.0),
     "entry 'k@fp': candidate 0 time -5.0 is not a number of 0 or more"),
    (lambda d: d["problem"].update(m=0), "entry 'k@fp': problem is invalid ('m' must be at least 1, got 0)"),
    (lambda d: d["fingerprint"].pop("device_name"), "entry 'k@fp': fingerprint has no device_name"),
    (lambda d: d["fingerprint"].update(templates={"a": 1}), "entry 'k@fp': fingerprint templates are not {uid: hash}"),
    (lambda d: d.update(machine=3), "entry 'k@fp': 'machine' is not a string"),
    (lambda d: d.update(tune_seconds="x"), "entry 'k@fp': tune_seconds 'x' is not a number of 0 or more"),
    (lambda d: d.update(pruned=[1]), "entry 'k@fp': pruned [1] is not {stage: count}"),
    (lambda d: d.update(considered=1.5), "entry 'k@fp': considered 1.5 is not a count"),
    (lambda d: d.update(partial="yes"), "entry 'k@fp': partial 'yes' is not true or false"),
    (lambda d: d.update(phases=[1]), "entry 'k@fp': phases [1] is not {phase: seconds}"),
    (lambda d: d.update(phases={"x": "y"}), "entry 'k@fp': phases {'x': 'y'} is not {phase: seconds}"),
    (lambda d: d.update(worker_s=3), "entry 'k@fp': worker_s 3 is not {step: seconds}"),
    (lambda d: d.update(startups=[1]), "entry 'k@fp': startups [1] is not [[role, seconds], ...]"),
    (lambda d: d.update(compile_pool_s={"kernels": 1}),
     "entry 'k@fp': compile_pool_s {'kernels': 1} is not {kernels: count, busy: seconds, span: seconds}"),
    (lambda d: d.update(timeline=[["a", 1, 2]]), "entry 'k@fp': timeline [['a', 1, 2]] is not "
     "[[candidate, round, seconds], ...]"),
])
def test_bad_entries_are_refused_naming_the_field(change, message):
    data = good()
    Entry.from_dict(data, "k@fp")
    change(data)
    with pytest.raises(DamagedCache) as raised:
        Entry.from_dict(data, "k@fp")
    assert str(raised.value) == message


def test_a_negative_candidate_time_damages_its_entry_and_a_narrower_tune_stores_its_own(cli, tuned, tmp_path):
    """A candidate time below 0 (written by hand) would be the pick of a narrower tune's
    merge, whose winner no reader accepts: the entry is left out when read (one note), the
    tune stores its own result, and the other entry stays."""
    folder = tmp_path / "cache"
    folder.mkdir()
    data = document(tuned)
    key = next(k for k in data["entries"] if "/m16/" in k)  # aten + triton::mm
    for candidate in data["entries"][key]["candidates"]:
        if candidate["uid"] == "triton::mm":
            candidate["ms"] = -5.0
    (folder / CACHE_FILE).write_text(json.dumps(data))
    code, out, err = cli("mm", "--device", "cpu", "--m", "16", "--n", "16", "--k", "16", "--templates", "aten",
                         "--workers", "1", "--cache-dir", folder)
    assert code == 0 and "Traceback" not in err, err
    assert "is damaged (candidate" in " ".join(err.split()) and "time -5.0 is not a number of 0 or more" in err
    entries = Cache(folder).load()
    assert len(entries) == 2
    stored = entries[key]
    assert stored.winner is not None and stored.winner.uid == "aten::mm" and stored.winner.ms > 0
    assert all(c.ms is None or c.ms >= 0 for c in stored.candidates)


@pytest.mark.parametrize("field, value, flag", [
    ("tune_seconds", "x", None), ("pruned", [1], "--json"), ("phases", [1], "--profile"),
    ("worker_s", 3, "--profile"), ("startups", [1], "--profile"),
])
def test_a_wrongly_typed_recorded_field_damages_its_entry_alone(cli, tuned, tmp_path, field, value, flag):
    """A hit, --json and --profile read these fields: a wrong type leaves that entry out
    (one note) and is tuned again; the other entry stays."""
    folder = tmp_path / "cache"
    folder.mkdir()
    data = document(tuned)
    key = next(k for k in data["entries"] if "/m32/" in k)
    data["entries"][key][field] = value
    (folder / CACHE_FILE).write_text(json.dumps(data))
    code, out, err = cli("mm", "--device", "cpu", "--m", "32", "--n", "16", "--k", "16", "--templates", "aten",
                         "--workers", "1", "--cache-dir", folder, *([flag] if flag else []))
    assert code == 0 and "Traceback" not in err, err
    assert f"is damaged ({field} {value!r} is not" in " ".join(err.split())
    if flag == "--json":
        assert json.loads(out)["from_cache"] is False
    entries = Cache(folder).load()
    assert len(entries) == 2 and entries[key].tune_seconds != value


def test_entry_and_hits_import_neither_torch_nor_triton():
    code = ("import sys, autotune_cli.tune.hits, autotune_cli.store.entry, autotune_cli.tune.report\n"
            "print([m for m in ('torch', 'triton') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_stored_candidates_are_made_when_first_looked_at(tuned):
    key, data = next(iter(document(tuned)["entries"].items()))
    entry = Entry.from_dict(data, key)
    assert entry.candidates._made is None and len(entry.candidates) == len(data["candidates"])
    assert [c.to_dict() for c in entry.candidates] == [Candidate.from_dict(c).to_dict() for c in data["candidates"]]
    assert entry.candidates == tuple(entry.candidates) and entry == replace(entry, candidates=tuple(entry.candidates))
