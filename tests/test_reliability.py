"""Reliability of the cache and the CLI: concurrent writers, writers killed mid-write,
damaged and older cache files, odd names and paths, sizes that cannot fit."""

import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from autotune_cli.store.cache import CACHE_FILE, SCHEMA, Cache
from autotune_cli.store.cache_document import parse_document
from conftest import PLUGINS, messages
from helpers_cache_writer import key_of, make_entry, stress_keys

HELPER = Path(__file__).parent / "helpers_cache_writer.py"
A, B = key_of(make_entry()), key_of(make_entry(m=2))  # where make_entry() and make_entry(m=2) belong
ODD = "odd dir ü ñ 'single' \"double\" $HOME ;&|*? [x]"


def run_cli(*args, cache_dir=None, timeout=180):
    env = {**os.environ, "COLUMNS": "250"}
    if cache_dir is not None:
        env["AUTOTUNE_CACHE_DIR"] = str(cache_dir)
    return subprocess.run([sys.executable, "-m", "autotune_cli", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=timeout)


def stderr_lines(proc):
    """Each message on stderr whole (a long note, a path in it, wraps to the width)."""
    return messages(proc.stderr)


def document(cache_dir):
    """The cache file as plain JSON, checked to be a whole schema-1 document."""
    doc = json.loads((Path(cache_dir) / CACHE_FILE).read_text(encoding="utf-8"))
    assert doc["schema"] == SCHEMA and isinstance(doc["entries"], dict)
    return doc


def temporaries(cache_dir):
    return sorted(Path(cache_dir).glob(".autotune-cache.*.tmp"))


# -- 1. concurrent writers -----------------------------------------------------------------

@pytest.mark.slow
def test_eight_cli_processes_tuning_into_one_cache_keep_every_entry(tmp_path):
    cache_dir = tmp_path / "cache"
    sizes = [16 + 8 * i for i in range(8)]
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": str(cache_dir)}
    procs = [subprocess.Popen([sys.executable, "-m", "autotune_cli", "mm", "--device", "cpu", "--templates",
                               "aten", "--workers", "1", "--json", "--m", str(m), "--n", "16", "--k", "16"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for m in sizes]
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        assert json.loads(out)["winner"]["uid"].startswith("aten::")
    entries = document(cache_dir)["entries"]
    assert sorted(e["problem"]["m"] for e in entries.values()) == sizes
    assert {k: e.to_dict() for k, e in Cache(cache_dir).load().items()} == entries
    assert not temporaries(cache_dir)


def test_eight_processes_putting_in_a_loop_lose_nothing(tmp_path):
    count = 25
    procs = [subprocess.Popen([sys.executable, str(HELPER), "stress", str(tmp_path), str(i), str(count)],
                              stderr=subprocess.PIPE, text=True) for i in range(8)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    expected = {key for i in range(8) for key in stress_keys(i, count)}
    assert set(document(tmp_path)["entries"]) == expected
    cache = Cache(tmp_path)
    assert set(cache.load()) == expected and not cache.notices and not temporaries(tmp_path)


# -- 2. a writer killed mid-write ------------------------------------------------------------

class AckReader(threading.Thread):
    """Collects the writer's "<key> <seq>" lines: each one is a put that returned."""

    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream, self.acked, self.first = stream, [], threading.Event()

    def run(self):
        for line in self.stream:
            key, seq = line.split()
            self.acked.append((key, int(seq)))
            self.first.set()


@pytest.mark.slow
def test_sigkill_at_random_moments_leaves_the_old_or_the_new_document(tmp_path):
    rng = random.Random(5)
    last_acked: dict[str, int] = {}
    torn_writes = 0  # kills that landed while a temporary file existed
    for _ in range(30):
        proc = subprocess.Popen([sys.executable, str(HELPER), "forever", str(tmp_path), "8", "150"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        reader = AckReader(proc.stdout)
        reader.start()
        assert reader.first.wait(60), proc.stderr.read() if proc.poll() is not None else "no put in 60 s"
        time.sleep(rng.uniform(0.0, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        reader.join(timeout=30)
        proc.stderr.close()
        assert proc.returncode == -signal.SIGKILL
        for key, seq in reader.acked:
            last_acked[key] = seq
        left = temporaries(tmp_path)
        assert len(left) <= 1  # the next writer deleted earlier ones under the lock
        torn_writes += bool(left)
        entries = document(tmp_path)["entries"]  # parses: never torn
        cache = Cache(tmp_path)
        loaded = cache.load()  # validates, nothing moved aside
        assert {k: e.to_dict() for k, e in loaded.items()} == entries and not cache.notices
        for key, seq in last_acked.items():  # every committed put is there (or a newer one)
            assert int(entries[key]["tuned_at"]) >= seq
    assert torn_writes >= 1, "no kill landed mid-write: the test proved nothing"
    Cache(tmp_path).put(key_of(make_entry()), make_entry())
    assert not temporaries(tmp_path)
    assert not list(tmp_path.glob(f"{CACHE_FILE}.damaged-*"))


def test_stale_temporaries_are_deleted_by_the_next_writer_only(tmp_path):
    cache = Cache(tmp_path)
    cache.put(A, make_entry())
    stale = tmp_path / ".autotune-cache.abc123.tmp"
    stale.write_text('{"schema": 1, "entr')
    other = tmp_path / "notes.tmp"  # not ours: never touched
    other.write_text("keep")
    assert set(cache.load()) == {A} and stale.exists()  # readers take no lock, delete nothing
    cache.put(B, make_entry(m=2))
    assert not stale.exists() and other.read_text() == "keep"


# -- 3. damaged and older caches ---------------------------------------------------------------

# (a newer autotune's file is not damaged: it is left as it is, test_cache_newer_schema.py)
DAMAGED = {
    "truncated": ('{"schema": 1, "entries": {"a@1": {"problem": ', "not valid JSON"),
    "older schema": ('{"schema": -1, "entries": {}}', "cannot be migrated"),
    "NaN": ('{"schema": 1, "entries": {"a@1": {"problem": {"op": "mm", "m": 1, "n": 1, "k": 1},'
            ' "fingerprint": {"device_name": "cpu"}, "candidates": [], "winner": {"uid": "aten::mm",'
            ' "params": {}, "ms": NaN, "tflops": 1}}}}', "NaN is not a JSON number"),
    "not utf-8": (b'{"schema": 1, "entries": {"\xff": 1}}', "not UTF-8"),
}


@pytest.mark.parametrize("name", list(DAMAGED))
def test_cache_show_on_a_damaged_file_says_one_line_and_keeps_it(tmp_path, name):
    content, reason = DAMAGED[name]
    raw = content if isinstance(content, bytes) else content.encode()
    cache_dir = tmp_path / ODD
    cache_dir.mkdir()
    (cache_dir / CACHE_FILE).write_bytes(raw)
    proc = run_cli("cache", "show", "--cache-dir", cache_dir)
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in stderr_lines(proc) if line.startswith("note:")]
    assert len(notes) == 1 and reason in notes[0], proc.stderr
    (aside,) = cache_dir.glob(f"{CACHE_FILE}.damaged-*")
    assert str(aside) in notes[0] and aside.read_bytes() == raw
    assert "is empty" in proc.stderr and "Traceback" not in proc.stderr
    assert not (cache_dir / CACHE_FILE).exists()  # nothing written in its place by a reader


DAMAGED_ENTRIES = {  # an entry of the wrong shape, beside a good one
    "wrong type": ({"problem": {"op": "mm", "m": "64", "n": 8, "k": 8}, "fingerprint": {"device_name": "cpu"},
                    "candidates": [], "winner": None}, "'m' must be an integer"),
    "winner time": ({**make_entry(m=2), "winner": {**make_entry(m=2)["winner"], "ms": "fast"}},
                    "winner time 'fast' is not a number"),
    "not an object": (7, "is a number, not an object"),
}


@pytest.mark.parametrize("name", list(DAMAGED_ENTRIES))
def test_a_damaged_entry_takes_only_itself_out_of_use(tmp_path, name):
    bad, reason = DAMAGED_ENTRIES[name]
    cache_dir = tmp_path / ODD
    cache_dir.mkdir()
    raw = json.dumps({"schema": SCHEMA, "entries": {A: make_entry(), B: bad}}).encode()
    (cache_dir / CACHE_FILE).write_bytes(raw)
    (cache_dir / CACHE_FILE).chmod(0o600)
    proc = run_cli("cache", "show", "--cache-dir", cache_dir)
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in stderr_lines(proc) if line.startswith("note:")]
    (aside,) = cache_dir.glob(f"{CACHE_FILE}.damaged-*")
    assert aside.stat().st_mode & 0o777 == 0o600  # as private as the file it copies
    assert len(notes) == 1 and reason in notes[0] and "the 1 other entry kept" in notes[0], proc.stderr
    assert str(aside) in notes[0] and aside.read_bytes() == raw  # the file as it was, byte for byte
    assert set(Cache(cache_dir).load()) == {A} and "mm 64x8x8" in proc.stdout
    again = run_cli("cache", "show", "--cache-dir", cache_dir)  # rewritten without it: said once
    assert "note:" not in again.stderr and len(list(cache_dir.glob(f"{CACHE_FILE}.damaged-*"))) == 1
    # the copy imported back: the good entry is here already, the damaged one skipped with its reason
    back = run_cli("cache", "import", aside, "--cache-dir", cache_dir)
    assert back.returncode == 0, back.stderr
    assert f"skipped {B}: damaged (" in back.stderr and reason in back.stderr
    assert "imported 0, replaced 0, skipped 2 of 2 entries" in back.stderr


def cannot_write(cache_dir, monkeypatch):
    """The cache folder made one this user may read and not write: its mode where the user
    is not root (root writes whatever the mode says), else every write into it refused."""
    import errno

    from autotune_cli.store import cache as cache_module

    if os.geteuid() != 0:
        cache_dir.chmod(0o555)
        return
    denied = PermissionError(errno.EACCES, "Permission denied")

    def refuse(what):
        def raise_(self, *args, **kwargs):
            raise cache_module._unavailable(what, self.directory, denied)
        return raise_

    for name, what in (("_keep_copy", "write"), ("_move_aside", "move aside"), ("_write_unlocked", "write")):
        monkeypatch.setattr(cache_module.Cache, name, refuse(what))


@pytest.mark.parametrize("damage", ["entry", "file"])
def test_a_damaged_cache_in_a_folder_that_cannot_be_written_is_read_as_it_can_be(tmp_path, monkeypatch, cli, damage):
    """A deployed read-only cache with one damaged entry serves the others (the file left as
    it is, said once); a file that cannot be read at all reads as empty. Neither is an error."""
    cache_dir = tmp_path / "deployed"
    cache_dir.mkdir()
    bad = DAMAGED_ENTRIES["winner time"][0]
    raw = (json.dumps({"schema": SCHEMA, "entries": {A: make_entry(), B: bad}}).encode() if damage == "entry"
           else DAMAGED["truncated"][0].encode())
    (cache_dir / CACHE_FILE).write_bytes(raw)
    (cache_dir / ".autotune-cache.lock").touch()  # made while the folder could be written
    cannot_write(cache_dir, monkeypatch)
    try:
        code, out, err = cli("cache", "show", "--cache-dir", cache_dir)
        again = Cache(cache_dir).load()
    finally:
        cache_dir.chmod(0o755)
    assert code == 0, err
    notes = [line for line in messages(err) if line.startswith("note:")]
    assert len(notes) == 1 and "the file is left as it is" in notes[0], err
    if damage == "entry":
        assert "winner time 'fast' is not a number" in notes[0] and "1 other entry used" in notes[0]
        assert "mm 64x8x8" in out and set(again) == {A}
    else:
        assert "is unusable" in notes[0] and "read as empty" in notes[0] and again == {}
    assert (cache_dir / CACHE_FILE).read_bytes() == raw and not list(cache_dir.glob(f"{CACHE_FILE}.*"))


class Raw(str):
    """JSON text to be written as it is."""


def _dumps_pairs(pairs) -> Raw:
    """A JSON object written from (name, value) pairs, a name given as often as it comes."""
    return Raw("{" + ", ".join(f"{json.dumps(name)}: {value if isinstance(value, Raw) else json.dumps(value)}"
                               for name, value in pairs) + "}")


def test_an_entry_given_twice_keeps_the_later_tune_and_says_so(tmp_path):
    newer = make_entry(ms=0.5, tuned_at="2026-12-01T00:00:00+00:00")
    older = make_entry(ms=9.99, tuned_at="2026-01-01T00:00:00+00:00")
    entries = _dumps_pairs([(A, newer), (B, make_entry(m=2)), (A, older)])  # the older copy last
    raw = _dumps_pairs([("schema", SCHEMA), ("entries", entries)]).encode()
    (tmp_path / CACHE_FILE).write_bytes(raw)
    cache = Cache(tmp_path)
    loaded = cache.load()
    assert set(loaded) == {A, B} and loaded[A].winner.ms == 0.5
    (note,) = cache.notices
    assert f"entry '{A}' is in the file 2 times" in note and "the copy tuned latest is kept" in note
    (aside,) = tmp_path.glob(f"{CACHE_FILE}.damaged-*")
    assert aside.read_bytes() == raw and str(aside) in note
    assert document(tmp_path)["entries"][A]["winner"]["ms"] == 0.5  # rewritten with one copy
    assert Cache(tmp_path).load()[A].winner.ms == 0.5 and not Cache(tmp_path).notices


def test_the_copy_tuned_latest_is_told_by_its_time_not_its_text(tmp_path):
    utc = make_entry(ms=0.5, tuned_at="2026-12-05T08:51:02+00:00")
    earlier = make_entry(ms=9.99, tuned_at="2026-12-05T10:00:00+05:00")  # 05:00 UTC
    entries = _dumps_pairs([(A, utc), (A, earlier)])
    (tmp_path / CACHE_FILE).write_text(_dumps_pairs([("schema", SCHEMA), ("entries", entries)]))
    assert Cache(tmp_path).load()[A].winner.ms == 0.5


@pytest.mark.parametrize("value", ["'abc'", "-1", "true", "[1]"])
def test_a_candidate_number_that_is_no_number_damages_its_entry(tmp_path, value):
    bad = make_entry(m=2)
    bad["candidates"][0]["worst_of_allowed"] = "PLACEHOLDER"
    text = json.dumps({"schema": SCHEMA, "entries": {A: make_entry(), B: bad}})
    (tmp_path / CACHE_FILE).write_text(text.replace('"PLACEHOLDER"', value.replace("'", '"')))
    cache = Cache(tmp_path)
    assert set(cache.load()) == {A}
    assert "candidate 0 worst_of_allowed" in cache.notices[0], cache.notices


def test_two_caches_pasted_into_one_file_lose_no_entry(tmp_path):
    first = _dumps_pairs([(A, make_entry())])
    second = _dumps_pairs([(B, make_entry(m=2)), (A, make_entry(ms=0.25, tuned_at="2026-12-02T00:00:00+00:00"))])
    raw = _dumps_pairs([("schema", SCHEMA), ("entries", first), ("schema", SCHEMA), ("entries", second)])
    (tmp_path / CACHE_FILE).write_text(raw)
    cache = Cache(tmp_path)
    loaded = cache.load()
    assert set(loaded) == {A, B} and loaded[A].winner.ms == 0.25
    assert len(cache.notices) == 1 and "2 times" in cache.notices[0]


def test_a_field_given_twice_inside_an_entry_damages_that_entry_alone(tmp_path):
    good = make_entry()
    winner = Raw(json.dumps(good["winner"]))
    bad = _dumps_pairs([(k, v) for k, v in make_entry(m=2).items()] + [("winner", winner)])
    raw = _dumps_pairs([("schema", SCHEMA), ("entries", _dumps_pairs([(A, good), (B, bad)]))])
    (tmp_path / CACHE_FILE).write_text(raw)
    cache = Cache(tmp_path)
    assert set(cache.load()) == {A}
    assert "'winner' is given twice in it" in cache.notices[0], cache.notices


def test_damaged_twice_in_one_second_keeps_both_copies(tmp_path):
    cache = Cache(tmp_path)
    for text in ("{", "[", "nul"):
        cache.path.write_text(text)
        assert cache.load() == {}
    kept = sorted(p.read_text() for p in tmp_path.glob(f"{CACHE_FILE}.damaged-*"))
    assert kept == sorted(["{", "[", "nul"]) and len(cache.notices) == 3


def test_non_finite_numbers_are_stored_as_null_and_never_break_a_write(tmp_path):
    entry = make_entry()
    entry["candidates"].append({"uid": "test::nan", "params": {}, "status": "wrong_result", "ms": 0.5,
                                "max_rel_error": float("inf"), "p20": float("nan")})
    cache = Cache(tmp_path)
    cache.put(A, entry)
    stored = document(tmp_path)["entries"][A]["candidates"][-1]
    assert stored["max_rel_error"] is None and stored["p20"] is None and stored["ms"] == 0.5
    assert entry["candidates"][-1]["max_rel_error"] == float("inf")  # the caller's copy untouched
    bad = make_entry(ms=float("inf"))
    with pytest.raises(ValueError, match="winner time"):
        cache.put(B, bad)


def test_unusable_cache_dir_is_one_line_exit_2(tmp_path):
    """Commands that read first and those that write first (import, prune) say the same."""
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    export = tmp_path / "export.json"
    export.write_text('{"schema": 1, "entries": {}}')
    said = set()
    for args in (["cache", "show"], ["cache", "clear", "--yes"], ["cache", "import", export],
                 ["cache", "prune", "--stale"],
                 ["mm", "--device", "cpu", "--templates", "aten", "--m", 4, "--n", 4, "--k", 4]):
        proc = run_cli(*args, "--cache-dir", not_a_dir)
        assert proc.returncode == 2, proc.stderr
        (line,) = stderr_lines(proc)
        said.add(line)
    assert said == {f"autotune: error: cannot read the cache at {not_a_dir / CACHE_FILE}: Not a directory"}
    assert not_a_dir.read_text() == "x"


def test_schema_0_is_migrated_and_its_entries_are_cache_hits(tmp_path):
    from autotune_cli.store.fingerprint import Fingerprint
    from autotune_cli.hardware.device import probe_device
    from autotune_cli.problem import make_problem
    from autotune_cli.templates import templates_for

    problem = make_problem(m=24, n=8, k=8, device="cpu")
    templates = {t.uid: t.source_hash() for t in templates_for(problem, ("aten",))}
    fingerprint = Fingerprint.of(probe_device("cpu"), templates)
    old_entry = {**make_entry(), "problem": problem.to_dict(), "fingerprint": fingerprint.to_dict()}
    old_text = json.dumps({"entries": {problem.key(): old_entry}}, indent=2)  # schema 0
    (tmp_path / CACHE_FILE).write_text(old_text)

    proc = run_cli("mm", "--device", "cpu", "--templates", "aten", "--json", "--m", 24, "--n", 8, "--k", 8,
                   cache_dir=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["from_cache"] is True  # found under the recomputed key
    notes = [line for line in stderr_lines(proc) if "note:" in line]
    assert len(notes) == 1 and "used schema 0; migrated it to schema 1" in notes[0], proc.stderr
    assert (tmp_path / f"{CACHE_FILE}.schema-0").read_text() == old_text  # the original, kept
    key = f"{problem.key()}@{fingerprint.digest()}"
    assert document(tmp_path)["entries"] == {key: {**old_entry, "fingerprint_digest": fingerprint.digest(),
                                                   "machine": fingerprint.machine_digest()}}


def test_schema_0_that_cannot_be_migrated_is_moved_aside(tmp_path):
    entry = {k: v for k, v in make_entry().items() if k != "fingerprint_digest"}  # fingerprint incomplete
    text = json.dumps({"entries": {"mm/m64": entry}})
    cache = Cache(tmp_path)
    cache.path.write_text(text)
    assert cache.load() == {}
    assert len(cache.notices) == 1 and "cannot be migrated" in cache.notices[0]
    (aside,) = tmp_path.glob(f"{CACHE_FILE}.damaged-*")
    assert aside.read_text() == text and not list(tmp_path.glob(f"{CACHE_FILE}.schema-*"))


def test_schema_0_migration_refuses_two_entries_that_become_one(tmp_path):
    from autotune_cli.store.fingerprint import Fingerprint
    from autotune_cli.hardware.device import probe_device

    fp = Fingerprint.of(probe_device("cpu"), {}).to_dict()
    entry = {**make_entry(), "fingerprint": fp}
    del entry["fingerprint_digest"]
    cache = Cache(tmp_path)
    cache.path.write_text(json.dumps({"entries": {"one": entry, "two": entry}}))
    assert cache.load() == {} and "both become" in cache.notices[0]
    cache.path.write_text(json.dumps({"entries": {"one": entry}, "note": "metadata"}))
    (key,) = cache.load()
    assert key == f"mm/m64/n8/k8/float16/nn/cpu@{Fingerprint.from_dict(fp).digest()}"


def test_parse_reads_exports_with_metadata(tmp_path):
    text = json.dumps({"schema": SCHEMA, "exported_at": "now", "entries": {A: make_entry()}})
    assert list(parse_document(text)[0]) == [A]


def test_existing_file_mode_is_kept(tmp_path):
    cache = Cache(tmp_path)
    cache.put(A, make_entry())
    cache.path.chmod(0o644)
    cache.put(B, make_entry(m=2))
    assert cache.path.stat().st_mode & 0o777 == 0o644


# -- 4. sizes and odd names --------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["--m", 4000000, "--n", 4000000, "--k", 4],
    ["--m", 65536, "--n", 65536, "--k", 65536, "--batch", 64],
])
def test_huge_problem_is_refused_before_any_allocation(tmp_path, args):
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    proc = run_cli("mm", "--device", "cpu", "--templates", "aten", *args, cache_dir=tmp_path)
    assert proc.returncode == 2, proc.stderr
    (line,) = stderr_lines(proc)
    assert line.startswith("autotune: error:") and "does not fit" in line
    peak_kib = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    assert peak_kib < 2 * 2**20  # under 2 GiB: nothing of the TiB it needs was allocated
    assert not (tmp_path / CACHE_FILE).exists()


def test_odd_cache_dir_plugin_and_space_paths_and_a_damaged_file(tmp_path):
    odd = tmp_path / ODD
    plugin_dir = odd / "plugins ü"
    plugin_dir.mkdir(parents=True)
    plugin = plugin_dir / "wrong 'mm' ü.py"
    shutil.copy(PLUGINS / "wrong_mm.py", plugin)
    cache_dir = odd / "cache dir"
    cache_dir.mkdir()
    damaged = b'{"schema": 1, "entries": {"a@1": {"problem": '
    (cache_dir / CACHE_FILE).write_bytes(damaged)
    proc = run_cli("mm", "--device", "cpu", "--templates", "aten,test::wrong_mm", "--plugin", plugin,
                   "--workers", "1", "--json", "--m", 8, "--n", 8, "--k", 8, "--cache-dir", cache_dir)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["winner"]["uid"].startswith("aten::")
    statuses = {c["uid"]: c["status"] for c in result["candidates"]}
    assert statuses["test::wrong_mm"] == "wrong_result"  # the plugin loaded in the worker too
    assert len(document(cache_dir)["entries"]) == 1
    notes = [line for line in stderr_lines(proc) if "note:" in line]  # the damaged file: kept, said once
    (aside,) = cache_dir.glob(f"{CACHE_FILE}.damaged-*")
    assert len(notes) == 1 and str(aside) in notes[0] and aside.read_bytes() == damaged

    shown = run_cli("cache", "show", "--json", "--cache-dir", cache_dir)
    assert shown.returncode == 0 and json.loads(shown.stdout)["path"] == str(cache_dir / CACHE_FILE)
    path = run_cli("cache", "path", "--cache-dir", cache_dir)
    assert path.stdout.strip() == str(cache_dir / CACHE_FILE)

    space = odd / "space 'ü' [1].json"
    space.write_text('[{"BLOCK_M": 3}]')
    bad = run_cli("mm", "--device", "cpu", "--m", 8, "--n", 8, "--k", 8, "--space", space,
                  "--cache-dir", cache_dir)
    assert bad.returncode == 2, bad.stderr
    (line,) = stderr_lines(bad)
    assert line.startswith("autotune: error:") and str(space) in line
