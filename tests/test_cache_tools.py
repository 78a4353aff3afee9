"""`autotune cache show --filter / export / import / prune` on the CPU.

One real tune (aten only, module-wide) gives an entry of this machine; the other entries are
written by hand so that dates, devices and machines are what each test needs.
"""

from __future__ import annotations

import json
import re
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autotune_cli.store.cache import CACHE_FILE, Cache
from conftest import messages
from autotune_cli.store.entry import CacheKey
from autotune_cli.export import inductor_table
from autotune_cli.store.fingerprint import Fingerprint, machine_digest_of
from autotune_cli.hardware.device import probe_device
from autotune_cli.problem import GemmProblem

H200, A100 = "NVIDIA H200", "NVIDIA A100-SXM4-80GB"


def synthetic(op="mm", m=64, n=64, k=64, b=1, dtype="float16", layout="nn", bias=None,
              allow_tf32=False, device="cuda", device_name=H200, uid=None, params=None, ms=0.01,
              tuned_at="2026-11-20T10:00:00+00:00", torch_version="2.13.0", fingerprint=None):
    """(key, entry) shaped as the tuner writes them, for a machine that need not exist
    (`fingerprint`: this one, a Fingerprint)."""
    problem = GemmProblem(op=op, m=m, n=n, k=k, b=b, dtype=dtype, layout=layout, bias=bias,
                          allow_tf32=allow_tf32, device=device)
    uid = uid or f"aten::{op}"
    fingerprint = fingerprint or Fingerprint(
        device_type=device, device_name=device_name, capability="9.0" if device == "cuda" else "",
        sm_count=132 if device == "cuda" else 0, driver="", runtime="12.8", torch=torch_version,
        triton="3.9.0", templates=((uid, "0" * 16),))
    winner = {"uid": uid, "params": params or {}, "ms": ms, "tflops": problem.tflops(ms)}
    entry = {
        "problem": problem.to_dict(), "fingerprint": fingerprint.to_dict(),
        "fingerprint_digest": fingerprint.digest(), "machine": fingerprint.machine_digest(),
        "winner": winner, "candidates": [{"uid": uid, "params": params or {}, "status": "ok", "ms": ms}],
        "tool_version": "0.1.0", "tuned_at": tuned_at,
    }
    return str(CacheKey(problem.key(), fingerprint.digest())), entry


TRITON_PARAMS = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "num_stages": 3,
                 "num_warps": 4, "EVEN_K": True, "ACC_TYPE": "tl.float32", "ALLOW_TF32": False, "FIXED_NK": 0}


def write(cache_dir: Path, *items) -> dict:
    entries = dict(items)
    Cache(cache_dir).update(entries)
    return entries


def entries_of(cache_dir: Path) -> dict:
    return {key: entry.to_dict() for key, entry in Cache(cache_dir).load().items()}


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("note:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("autotune: error:")
    return lines[0]


@pytest.fixture(scope="module")
def tuned_here(tmp_path_factory) -> dict:
    """A real entry of this machine: mm 32x32x32 fp16, aten only."""
    from autotune_cli.cli import main

    folder = tmp_path_factory.mktemp("tuned-here")
    code = main(["mm", "--device", "cpu", "--m", "32", "--n", "32", "--k", "32", "--templates", "aten",
                 "--workers", "1", "--cache-dir", str(folder)])
    assert code == 0
    return {key: entry.to_dict() for key, entry in Cache(folder).load().items()}


# -- show --filter ---------------------------------------------------------------------------

@pytest.fixture
def mixed(cache_dir):
    return write(cache_dir,
                 synthetic(dtype="float16", m=64),
                 synthetic(dtype="bfloat16", m=64),
                 synthetic(op="addmm", bias="n", dtype="float16", m=64),
                 synthetic(op="bmm", b=4, dtype="float32", m=128, device_name=A100),
                 synthetic(dtype="float16", m=640, layout="nt", device="cpu", device_name="AMD EPYC"))


@pytest.mark.parametrize("text, expected", [
    ("fp16", {("mm", "float16", 64), ("addmm", "float16", 64), ("mm", "float16", 640)}),
    ("float16", {("mm", "float16", 64), ("addmm", "float16", 64), ("mm", "float16", 640)}),
    ("bf16", {("mm", "bfloat16", 64)}),
    ("mm", {("mm", "float16", 64), ("mm", "bfloat16", 64), ("mm", "float16", 640)}),
    ("mm/", {("mm", "float16", 64), ("mm", "bfloat16", 64), ("mm", "float16", 640)}),
    ("addmm/m64", {("addmm", "float16", 64)}),
    ("mm/m64", {("mm", "float16", 64), ("mm", "bfloat16", 64)}),
    ("bf16/nn", {("mm", "bfloat16", 64)}),
    ("a100", {("bmm", "float32", 128)}),
    ("m64", {("mm", "float16", 64), ("mm", "bfloat16", 64), ("addmm", "float16", 64),
             ("mm", "float16", 640)}),
    ("/nt/", {("mm", "float16", 640)}),
    # the problem as the table shows it, whole words
    ("64x64x64", {("mm", "float16", 64), ("mm", "bfloat16", 64), ("addmm", "float16", 64)}),
    ("mm 64x64x64", {("mm", "float16", 64), ("mm", "bfloat16", 64)}),
    ("mm 64x64x64 bf16", {("mm", "bfloat16", 64)}),
    ("MM 640x64x64 FP16 NT", {("mm", "float16", 640)}),
    ("4x128x64x64", {("bmm", "float32", 128)}),
    ("4x64x64", set()),
    # sizes by their start, at a size's boundary: 640x64x64 is not 64x64's
    ("64x64", {("mm", "float16", 64), ("mm", "bfloat16", 64), ("addmm", "float16", 64)}),
    ("640x64", {("mm", "float16", 640)}),
    ("mm 64x64 bf16", {("mm", "bfloat16", 64)}),
    ("4x128", {("bmm", "float32", 128)}),
    ("128x64", set()),
])
def test_show_filter(cli, mixed, text, expected):
    code, out, err = cli("cache", "show", "--json", "--filter", text)
    assert code == 0, err
    shown = json.loads(out)["entries"]
    assert {(e["problem"]["op"], e["problem"]["dtype"], e["problem"]["m"]) for e in shown.values()} == expected
    assert set(shown) <= set(mixed)


def test_show_filter_table_and_no_match(cli, mixed):
    code, out, _ = cli("cache", "show", "--filter", "H200")
    assert code == 0
    assert "mm 64x64x64 bfloat16 nn" in out and "bmm" not in out and "AMD EPYC" not in out
    code, out, err = cli("cache", "show", "--filter", "tf32")
    assert code == 0 and out == "" and "match 'tf32'" in err
    code, out, _ = cli("cache", "show", "--help")
    assert code == 0 and '"mm 64x64x64 bf16"' in out


def test_show_names_winners_of_templates_not_registered_here(cli, cache_dir):
    """A plugin's winner is served only where its module is loaded: `cache show` (which
    loads none) says so in a note, neither hiding it nor calling it stale."""
    write(cache_dir, synthetic(m=16), synthetic(m=32, uid="myplugin::gemm"))
    code, out, err = cli("cache", "show")
    assert code == 0 and "myplugin::gemm" in out and "stale, not served: mm 32x64x64" not in out
    assert messages(err) == ["note: winners of myplugin::gemm, not registered here: served only where the "
                             "plugin that registers them is loaded (--plugin)"]


def test_show_filter_by_the_start_of_the_sizes_the_table_shows(cli, cache_dir):
    """`--filter 32x256` finds the row the table shows as addmm 32x256x64 (and not 32x2560x64)."""
    write(cache_dir, synthetic(op="addmm", bias="n", m=32, n=256, k=64),
          synthetic(op="addmm", bias="n", m=32, n=2560, k=64))
    code, out, err = cli("cache", "show", "--filter", "32x256")
    assert code == 0, err
    assert "addmm 32x256x64" in out and "32x2560x64" not in out
    code, out, _ = cli("cache", "show", "--filter", "addmm 32x256x64")
    assert code == 0 and "addmm 32x256x64" in out and "32x2560x64" not in out


# -- export ----------------------------------------------------------------------------------

@pytest.fixture
def gpu_entries(cache_dir):
    import torch

    installed = torch.__version__
    return write(cache_dir,
                 synthetic(m=1024, n=512, k=4096, dtype="bfloat16", uid="triton::mm",
                           params=TRITON_PARAMS, torch_version=installed),
                 synthetic(op="addmm", bias="n", m=256, n=512, k=128, torch_version=installed),
                 synthetic(op="bmm", b=8, m=128, n=128, k=64, dtype="float32", torch_version=installed),
                 synthetic(m=256, n=256, k=256, dtype="float32", allow_tf32=True, torch_version=installed),
                 synthetic(m=32, n=32, k=32, device="cpu", device_name="AMD EPYC"))


def test_export_inductor_to_file(cli, cache_dir, gpu_entries, tmp_path):
    target = tmp_path / "table.json"
    code, out, err = cli("cache", "export", "--format", "inductor", "-o", target)
    assert code == 0, err
    assert out == ""
    table = json.loads(target.read_text())
    expected, notes = inductor_table(list(entries_of(cache_dir).values()))
    assert table == expected
    # mm (triton), addmm (aten::addmm under its own key, aten::bias_addmm under the expanded
    # bias key), bmm; the tf32 and the CPU entries are left out
    assert len(table) == 4
    assert {cfg[0]["template_id"] for cfg in table.values()} == {
        "triton::mm", "aten::addmm", "aten::bias_addmm", "aten::bmm"}
    (triton_key,) = [k for k, v in table.items() if v[0]["template_id"] == "triton::mm"]
    assert triton_key.startswith(H200 + "+((torch.bfloat16, [1024, 4096], [4096, 1]), ")
    config = table[triton_key][0]
    assert config["BLOCK_K"] == 64 and config["num_stages"] == 3 and "ALLOW_TF32" not in config
    assert config.get("template_hash")  # tuned under the installed torch: the hash is kept
    # each note on its own stderr line
    note_lines = [line for line in err.splitlines() if line.startswith("note: ")]
    assert [line[len("note: "):] for line in note_lines] == notes
    assert any("tuned on cpu" in n for n in notes) and any("tuned for TF32" in n for n in notes)
    assert "exported 4 lookup-table keys from 3 entries" in err  # those the table holds


def test_export_inductor_says_each_reason_once(cli, cache_dir, tmp_path):
    """A CPU-only cache's 16 entries: one note for the reason they share, not 16 lines; an
    entry with a reason of its own is still named."""
    write(cache_dir, *[synthetic(m=16 * i, device="cpu", device_name="AMD EPYC") for i in range(1, 17)],
          synthetic(m=256, n=256, k=256, dtype="float32", allow_tf32=True))
    code, out, err = cli("cache", "export", "--format", "inductor", "-o", tmp_path / "table.json")
    assert code == 0 and out == "", err
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert notes == ["note: 16 entries skipped: tuned on cpu (Inductor's lookup table is CUDA-only)",
                     "note: mm 256x256x256 float32 tf32 nn (aten::mm): skipped, tuned for TF32; export with "
                     "allow_tf32=True for that precision mode"]
    assert len(notes[0]) <= 80
    assert "exported 0 lookup-table keys from 0 entries" in err


@pytest.mark.parametrize("dash", [True, False])
def test_export_inductor_to_stdout(cli, cache_dir, gpu_entries, dash):
    args = ["-o", "-"] if dash else []
    code, out, err = cli("cache", "export", "--format", "inductor", "--no-hash", "--allow-tf32",
                         "--filter", "fp32", *args)
    assert code == 0, err
    table = json.loads(out)
    selected = [e for e in entries_of(cache_dir).values() if e["problem"]["dtype"] == "float32"]
    assert table == inductor_table(selected, allow_tf32=True, include_hash=False)[0]
    assert len(table) == 1 and "bmm" not in next(iter(table))  # bmm is IEEE: skipped under tf32
    assert all("template_hash" not in cfg[0] for cfg in table.values())


def test_export_autotune_document(cli, cache_dir, gpu_entries, tmp_path):
    target = tmp_path / "moved.json"
    code, _, err = cli("cache", "export", "--format", "autotune", "--output", target, "--filter", "bf16")
    assert code == 0 and "exported 1 entry" in err
    document = json.loads(target.read_text())
    assert document["schema"] == 1 and document["tool_version"]
    assert document["entries"] == {k: v for k, v in gpu_entries.items() if v["problem"]["dtype"] == "bfloat16"}
    # the document is a valid cache file as it stands
    shutil.copy(target, tmp_path / CACHE_FILE)
    assert entries_of(tmp_path) == document["entries"]


def test_export_bad_format_and_output(cli, cache_dir, gpu_entries, tmp_path):
    code, _, err = cli("cache", "export", "--format", "csv")
    assert code == 2 and "csv" in one_error_line(err)
    code, _, err = cli("cache", "export", "--format", "autotune", "-o", tmp_path)
    assert code == 2 and "is a directory" in one_error_line(err)


@pytest.mark.parametrize("name", ["itself", "symlink", "hard link"])
@pytest.mark.parametrize("format_", ["autotune", "inductor"])
def test_an_export_is_never_written_over_the_cache_it_reads(cli, cache_dir, gpu_entries, tmp_path, name, format_):
    """-o naming the cache file (or a link to it) would replace every entry with the export
    (a lookup table holds none of them): one line, exit 2, the cache byte for byte as it was."""
    before = (cache_dir / CACHE_FILE).read_bytes()
    target = cache_dir / CACHE_FILE
    if name == "symlink":
        target = tmp_path / "table.json"
        target.symlink_to(cache_dir / CACHE_FILE)
    elif name == "hard link":
        target = tmp_path / "table.json"
        os.link(cache_dir / CACHE_FILE, target)
    code, out, err = cli("cache", "export", "--format", format_, "-o", target)
    assert code == 2 and "is the cache file itself" in one_error_line(err) and out == ""
    assert (cache_dir / CACHE_FILE).read_bytes() == before
    assert sorted(p.name for p in cache_dir.iterdir() if p.name.startswith(CACHE_FILE)) == [CACHE_FILE]
    assert entries_of(cache_dir) == gpu_entries


# -- import ----------------------------------------------------------------------------------

def test_export_import_round_trip_between_machines(cli, cache_dir, tuned_here, tmp_path):
    """Export here, import into an empty cache: the entry is found again, and by the API."""
    from autotune_cli import api

    write(cache_dir, *tuned_here.items())
    moved = tmp_path / "moved.json"
    assert cli("cache", "export", "--format", "autotune", "-o", moved)[0] == 0
    other = tmp_path / "other-cache"
    code, _, err = cli("cache", "import", moved, "--cache-dir", other)
    assert code == 0 and "imported 1, replaced 0, skipped 0 of 1 entry" in err
    assert entries_of(other) == tuned_here
    winner = api.Dispatcher(other).lookup(m=32, n=32, k=32, dtype="float16", device="cpu")
    assert winner == next(iter(tuned_here.values()))["winner"]
    # a second import changes nothing
    code, _, err = cli("cache", "import", moved, "--cache-dir", other)
    assert code == 0 and "imported 0, replaced 0, skipped 1 of 1" in err


def test_import_merges_replaces_newer_and_keeps_foreign_apart(cli, cache_dir, tuned_here, tmp_path):
    from autotune_cli import api

    write(cache_dir, *tuned_here.items())
    (key, here), = tuned_here.items()
    newer = json.loads(json.dumps(here))
    newer["tuned_at"] = "2099-01-01T00:00:00+00:00"
    newer["winner"]["ms"] = here["winner"]["ms"] / 2
    for result in newer["candidates"]:  # the winner's time is its own result's
        if (result["uid"], result["params"]) == (newer["winner"]["uid"], newer["winner"]["params"]):
            result["ms"] = newer["winner"]["ms"]
    older = synthetic(m=48, device="cpu", tuned_at="2026-01-01T00:00:00+00:00")
    # the same problem from another machine, "faster": it must never be used here
    tile32 = {**TRITON_PARAMS, "BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}  # EVEN_K holds for K = 32
    foreign_key, foreign = synthetic(m=32, n=32, k=32, device="cpu", device_name="Other CPU",
                                     ms=1e-6, uid="triton::mm", params=tile32)
    assert foreign_key.split("@")[0] == key.split("@")[0] and foreign_key != key
    # and an entry whose key does not describe it
    bad_key, bad = synthetic(m=16, device="cpu")
    bad_key = bad_key.replace("m16", "m17")
    export = tmp_path / "theirs.json"
    # and one of the wrong shape: skipped, the others imported all the same
    export.write_text(json.dumps({"schema": 1, "entries": {key: newer, older[0]: older[1],
                                                           foreign_key: foreign, bad_key: bad,
                                                           "k": {"problem": {}}}}))

    code, _, err = cli("cache", "import", export, "--dry-run")
    assert code == 0 and "would import 2, replace 1, skip 2 of 5 entries" in err
    assert entries_of(cache_dir) == tuned_here

    code, _, err = cli("cache", "import", export)
    assert code == 0 and "imported 2, replaced 1, skipped 2 of 5 entries" in err
    assert f"skipped {bad_key}: it holds the problem" in err
    assert "skipped k: damaged ('fingerprint' missing or not a dict)" in err
    merged = entries_of(cache_dir)
    assert set(merged) == {key, older[0], foreign_key}
    assert merged[key] == newer
    dispatcher = api.Dispatcher(cache_dir)
    assert dispatcher.lookup(m=32, n=32, k=32, device="cpu") == newer["winner"]
    assert dispatcher.lookup_entry(GemmProblem(op="mm", m=32, n=32, k=32, device="cpu"))[0] == key

    # importing our older copy back does not undo the newer one
    older_export = tmp_path / "older.json"
    older_export.write_text(json.dumps({"schema": 1, "entries": tuned_here}))
    code, _, err = cli("cache", "import", older_export)
    assert code == 0 and "imported 0, replaced 0, skipped 1" in err
    assert entries_of(cache_dir)[key] == newer


def test_import_says_why_it_skips_once_per_reason(cli, cache_dir, tmp_path):
    """Entries already cached are counted in the summary with their reason; entries skipped
    for a reason they share are one line, not one each; a reason of one entry names it."""
    same = [synthetic(m=16 * i, device="cpu") for i in range(1, 4)]
    ours = [synthetic(m=16 * i, device="cpu", tuned_at="2026-12-01T00:00:00+00:00") for i in range(4, 6)]
    write(cache_dir, *same, *ours)
    older = [synthetic(m=16 * i, device="cpu", tuned_at="2026-01-01T00:00:00+00:00") for i in range(4, 6)]
    export = tmp_path / "exp.json"
    export.write_text(json.dumps({"schema": 1, "entries": dict(same + older + [("k", {"problem": {}})])}))
    before = entries_of(cache_dir)
    for args, verb, summary in ((["--dry-run"], "would skip", "would import 0, replace 0, skip 6 of 6 entries"),
                                ([], "skipped", "imported 0, replaced 0, skipped 6 of 6 entries")):
        code, out, err = cli("cache", "import", export, *args)
        assert code == 0 and out == "", err
        assert messages(err) == [
            f"{verb} k: damaged ('fingerprint' missing or not a dict)",
            f"{verb} 2 entries: ours was tuned at the same time or later",
            f"{summary} from {export} (3 already cached, identical)"]
    assert entries_of(cache_dir) == before


@pytest.mark.parametrize("ours_is", ["winnerless", "cut short", "partial"])
def test_import_replaces_a_later_entry_of_ours_that_is_not_whole(cli, cache_dir, tuned_here, tmp_path, ours_is):
    """Ours tuned later but without a winner, cut short by --budget, or interrupted does not
    outrank their finished winner by its date: theirs replaces it."""
    from autotune_cli import api
    from autotune_cli.store.results import BUDGET_RAN_OUT
    from autotune_cli.tune.selections import template_hashes

    (key, theirs), = tuned_here.items()
    ours = json.loads(json.dumps(theirs))
    ours["tuned_at"] = "2099-01-01T00:00:00+00:00"
    hashes = template_hashes(GemmProblem.from_dict(theirs["problem"]))
    ours["fingerprint"]["templates"] = {"aten::mm": hashes["aten::mm"], "triton::mm": hashes["triton::mm"]}
    untimed = {"uid": "triton::mm", "params": TRITON_PARAMS, "status": "skipped", "error": BUDGET_RAN_OUT}
    if ours_is == "winnerless":
        ours["winner"] = None
        ours["candidates"] = [{**c, "status": "timeout", "ms": None} for c in ours["candidates"]]
    elif ours_is == "cut short":
        ours["cut_short"] = True
        ours["candidates"] = [*ours["candidates"], untimed]
    else:
        ours.update(winner=None, partial=True)
    write(cache_dir, (key, ours))
    export = tmp_path / "theirs.json"
    export.write_text(json.dumps({"schema": 1, "entries": {key: theirs}}))
    code, _, err = cli("cache", "import", export)
    assert code == 0 and "imported 0, replaced 1, skipped 0 of 1 entry" in err, err
    merged = entries_of(cache_dir)[key]
    assert merged["winner"] == theirs["winner"] and not merged.get("partial")
    assert api.Dispatcher(cache_dir).lookup(m=32, n=32, k=32, device="cpu") == theirs["winner"]
    # their partial entry is skipped like one without a winner, whatever its date
    write(cache_dir, (key, theirs))
    export.write_text(json.dumps({"schema": 1, "entries": {key: {**ours, "winner": theirs["winner"], "partial": True,
                                                                 "candidates": theirs["candidates"]}}}))
    code, _, err = cli("cache", "import", export)
    assert code == 0 and "replaced 0, skipped 1" in err and "(partial)" in err, err
    assert entries_of(cache_dir)[key] == theirs
    # nor does their later entry replace ours where a template it was tuned with changed since
    stale = {**json.loads(json.dumps(theirs)), "tuned_at": "2099-01-01T00:00:00+00:00"}
    stale["fingerprint"]["templates"]["aten::mm"] = "0000000000000000"
    export.write_text(json.dumps({"schema": 1, "entries": {key: stale}}))
    code, _, err = cli("cache", "import", export)
    assert code == 0 and "replaced 0, skipped 1" in err and "earlier aten::mm" in err, err
    assert entries_of(cache_dir)[key] == theirs


def unmachined(text: str) -> str:
    """`text` with the machine digests of its entries' names left out."""
    return re.sub(r", machine [0-9a-f]+\)", ")", text)


def test_import_and_prune_lines_fit_80_columns(cli, cache_dir, tmp_path, monkeypatch):
    """Their lines name an entry as the table does (problem, device), wrapped at words:
    a key with its digest can be wider than a line."""
    from autotune_cli.cli import console

    for stream in (console.out, console.err):
        monkeypatch.setattr(stream, "width", 80)
    problem = GemmProblem(op="scaled_mm", m=16384, n=16384, k=16384, dtype="float8_e4m3fn", layout="nt",
                          scale="row", out_dtype="bfloat16", fast_accum=True, bias="n", device="cuda")
    key, entry = synthetic(m=64)
    entry["problem"] = problem.to_dict()
    entry["candidates"][0]["uid"] = entry["winner"]["uid"] = "aten::_scaled_mm"
    key = f"{problem.key()}@{key.split('@')[1]}"
    assert len(key) > 80
    export = tmp_path / "theirs.json"
    export.write_text(json.dumps({"schema": 1, "entries": {key: entry}}))
    code, out, err = cli("cache", "import", export)
    assert code == 0 and "imported 1" in err, err
    assert max(len(line) for line in out.splitlines()) <= 80, out
    machine = machine_digest_of(entry["fingerprint"])  # tells apart one device model's machines
    assert " ".join(out.split()) == (f"import {problem.describe()} ({H200}, machine {machine}): "
                                     "aten::_scaled_mm - 0.0100 ms")
    code, out, err = cli("cache", "prune", "--filter", "scaled_mm", "--dry-run")
    assert code == 0 and "would remove 1 of 1" in err
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert " ".join(out.split()) == f"{problem.describe()} ({H200}, machine {machine})"


@pytest.mark.parametrize("content, message", [
    (None, "import file not found"),
    ('{"schema": 1, "entries": {', "not valid JSON"),
    ("[1, 2]", "not an object"),
    ('{"schema": 7, "entries": {}}', "newer than this autotune"),
    ("\udcff", "cannot read"),
])
def test_import_bad_input_is_one_line_exit_2(cli, cache_dir, tmp_path, content, message):
    path = tmp_path / "export.json"
    if content == "\udcff":
        path.write_bytes(b"\xff\xfe\x00garbage")
    elif content is not None:
        path.write_text(content)
    code, _, err = cli("cache", "import", path)
    assert code == 2
    assert message in one_error_line(err)
    assert path.exists() or content is None  # never moved aside like a damaged cache
    assert not (cache_dir / CACHE_FILE).exists()


def test_import_of_a_binary_file_says_where_it_stops_being_text(cli, cache_dir, tmp_path):
    """A model archive given to import by mistake: worded as `mm --from` words it, never
    Python's codec message."""
    model = tmp_path / "some_model.pt2"
    model.write_bytes(b"PK\x03\x04" + b"a" * 61 + b"\x9b\x00\xff" * 10)
    code, _, err = cli("cache", "import", model)
    assert code == 2
    assert one_error_line(err) == f"autotune: error: cannot read {model}: not UTF-8 text (byte 65)"
    code, _, err = cli("mm", "--from", model)
    assert code == 2 and one_error_line(err).endswith(f"--from: cannot read {model}: not UTF-8 text (byte 65)")
    assert not cache_dir.exists()


# -- prune -----------------------------------------------------------------------------------

@pytest.fixture
def dated(cache_dir):
    return write(cache_dir,
                 synthetic(m=16, tuned_at="2026-10-31T23:59:59+00:00"),
                 synthetic(m=32, tuned_at="2026-11-01T00:00:00+00:00"),
                 synthetic(m=48, tuned_at="2025-02-03T04:05:06+00:00", dtype="bfloat16"),
                 synthetic(m=64, tuned_at="2026-11-28T12:00:00+00:00"))


def test_prune_older_than(cli, cache_dir, dated):
    code, out, err = cli("cache", "prune", "--older-than", "2026-11-01", "--dry-run")
    assert code == 0 and "would remove 2 of 4 entries" in err
    assert sorted(line.split()[1] for line in out.splitlines()) == ["16x64x64", "48x64x64"]
    assert entries_of(cache_dir) == dated
    code, _, err = cli("cache", "prune", "--older-than", "2026-11-01", "--filter", "bf16")
    assert code == 0 and "removed 1 entry" in err
    assert sorted(e["problem"]["m"] for e in entries_of(cache_dir).values()) == [16, 32, 64]
    code, _, err = cli("cache", "prune", "--older-than", "2026-11-28T13:00:00")
    assert code == 0 and "removed 3 entries" in err and entries_of(cache_dir) == {}


def test_prune_filter_alone_removes_what_show_filter_lists(cli, cache_dir, dated):
    """--filter is a condition like the others, with cache show's meaning."""
    code, shown, _ = cli("cache", "show", "--json", "--filter", "bf16")
    assert code == 0 and len(json.loads(shown)["entries"]) == 1
    code, out, err = cli("cache", "prune", "--filter", "bf16", "--dry-run")
    assert code == 0 and "would remove 1 of 4 entries" in err
    assert unmachined(out).splitlines() == [f"mm 48x64x64 bfloat16 nn ({H200})"]  # as the table names it
    code, _, err = cli("cache", "prune", "--filter", "bf16")
    assert code == 0 and "removed 1 entry" in err
    assert sorted(e["problem"]["m"] for e in entries_of(cache_dir).values()) == [16, 32, 64]


def test_show_marks_stale_winners_and_prune_stale_removes_them(cli, cache_dir, tuned_here, monkeypatch):
    """An entry tuned with a template source other than the installed one is not served
    (a tune tunes it again, the API passes it by): show says so and why, prune --stale
    removes it and nothing else."""
    from autotune_cli.cli import console

    (key, here), = tuned_here.items()
    upgraded_key, upgraded = synthetic(m=48, device="cpu", fingerprint=Fingerprint.of(probe_device("cpu"), {}))
    upgraded["fingerprint"]["templates"] = {"aten::mm": "0" * 16}
    write(cache_dir, (key, here), (upgraded_key, upgraded))
    code, out, _ = cli("cache", "show", "--json")
    why = "was tuned with an earlier aten::mm (changed since: a tune again is due)"
    assert code == 0 and json.loads(out)["stale"] == {upgraded_key: why}
    for stream in (console.out, console.err):
        monkeypatch.setattr(stream, "width", 80)
    code, out, _ = cli("cache", "show")
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80, out
    assert out.count("not served") == 2  # the stale row's mark and the line saying why
    device_name = upgraded["fingerprint"]["device_name"]
    assert f"stale, not served: mm 48x64x64 float16 nn ({device_name}) {why}" in " ".join(out.split())
    code, out, err = cli("cache", "prune", "--stale", "--dry-run")
    assert code == 0 and "would remove 1 of 2" in err
    assert unmachined(out).splitlines() == [f"mm 48x64x64 float16 nn ({device_name})"]
    code, _, err = cli("cache", "prune", "--stale")
    assert code == 0 and "removed 1 entry" in err and set(entries_of(cache_dir)) == {key}
    code, out, _ = cli("cache", "show")
    assert code == 0 and "not served" not in out


def test_show_and_the_api_judge_an_entry_alike(cli, cache_dir, tuned_here):
    """An entry recording a registered template that no longer serves its problem (aten::bmm
    for an mm) is held stale by one rule (selections.judged_hashes): show says so and the API
    passes it by, saying the same."""
    from autotune_cli import api

    (key, here), = tuned_here.items()
    here["fingerprint"]["templates"]["aten::bmm"] = "0123456789abcdef"
    write(cache_dir, (key, here))
    code, out, _ = cli("cache", "show", "--json")
    why = json.loads(out)["stale"][key]
    assert code == 0 and why.startswith("was tuned with an earlier aten::bmm")
    problem = GemmProblem.from_dict(here["problem"])
    dispatcher = api.Dispatcher(cache_dir)
    assert dispatcher.lookup_entry(problem) is None
    assert why in dispatcher._lookup.miss_reason(problem)


def test_show_marks_a_winner_its_template_refuses_as_the_api_does(cli, cache_dir, tuned_here):
    """A winner whose params its template does not derive for the problem (BLOCK_K 64 at
    K = 32 kept EVEN_K true: a hand edit) is never built by the API: show marks it not
    served with the API's reason, and prune --stale removes it."""
    from autotune_cli import api
    from autotune_cli.templates import get_template

    (key, here), = json.loads(json.dumps(tuned_here)).items()
    params = {**TRITON_PARAMS, "BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 64, "num_stages": 1}
    here["winner"].update(uid="triton::mm", params=params)
    here["fingerprint"]["templates"] = {uid: get_template(uid).source_hash() for uid in ("aten::mm", "triton::mm")}
    write(cache_dir, (key, here))
    code, out, _ = cli("cache", "show", "--json")
    why = json.loads(out)["stale"].get(key, "")
    assert code == 0 and why.startswith("is refused: winner param EVEN_K = True is not what triton::mm derives")
    code, out, _ = cli("cache", "show")
    assert code == 0 and "stale, not served: mm 32x32x32 float16 nn" in out
    problem = GemmProblem.from_dict(here["problem"])
    dispatcher = api.Dispatcher(cache_dir)
    with pytest.warns(api.AutotuneFallbackWarning):
        assert dispatcher.lookup_entry(problem) is None
        assert why.removeprefix("is refused: ") in dispatcher._lookup.miss_reason(problem)
    code, _, err = cli("cache", "prune", "--stale")
    assert code == 0 and "removed 1 entry" in err and entries_of(cache_dir) == {}


def test_prune_device_is_a_condition_of_its_own(cli, cache_dir):
    """--device, with or without --not-this-machine, removes only entries of that device."""
    gpu_bf16, cpu_bf16 = synthetic(m=16, dtype="bfloat16"), synthetic(m=16, dtype="bfloat16", device="cpu")
    gpu_fp16 = synthetic(m=32)
    write(cache_dir, gpu_bf16, cpu_bf16, gpu_fp16)
    code, out, err = cli("cache", "prune", "--device", "cuda", "--filter", "bf16", "--dry-run")
    assert code == 0 and "would remove 1 of 3" in err
    assert unmachined(out).splitlines() == [f"mm 16x64x64 bfloat16 nn ({H200})"]
    code, _, err = cli("cache", "prune", "--device", "cuda", "--filter", "bf16")
    assert code == 0 and "removed 1 entry" in err
    assert set(entries_of(cache_dir)) == {cpu_bf16[0], gpu_fp16[0]}
    code, _, err = cli("cache", "prune", "--device", "cpu")
    assert code == 0 and "removed 1 entry" in err and set(entries_of(cache_dir)) == {gpu_fp16[0]}
    code, out, _ = cli("cache", "prune", "--help")
    assert code == 0 and "Entries of this device type" in " ".join(out.split())


@pytest.mark.parametrize("args, message", [
    ([], "needs --older-than DATE, --not-this-machine, --stale, --device and/or --filter TEXT"),
    (["--filter", "  "], "needs --older-than DATE, --not-this-machine, --stale, --device and/or --filter TEXT"),
    (["--older-than", "2026-13-01"], "not an ISO date"),
    (["--older-than", "last week"], "not an ISO date"),
    (["--not-this-machine", "--device", "tpu"], "'--device'"),
])
def test_prune_bad_input_is_one_line_exit_2(cli, cache_dir, dated, args, message):
    code, _, err = cli("cache", "prune", *args)
    assert code == 2 and message in one_error_line(err)
    assert entries_of(cache_dir) == dated


@pytest.mark.parametrize("args", [
    ("prune", "--stale"), ("prune", "--older-than", "2099-01-01"), ("prune", "--stale", "--dry-run"),
    ("clear", "--yes"), ("clear",), ("show",), ("path",), ("export", "--format", "autotune"),
])
def test_commands_on_a_cache_folder_that_does_not_exist_create_nothing(cli, cache_dir, args):
    """Nothing to remove, nothing to read: neither the folder nor its lock file is made (as
    show, path and export make none)."""
    code, _, err = cli("cache", *args)
    assert code == 0, err
    assert not cache_dir.exists()
    assert "removed 0 entries" in err or args[0] != "prune" or "--dry-run" in args


def test_prune_not_this_machine(cli, cache_dir, tuned_here):
    here_cpu = Fingerprint.of(probe_device("cpu"), {}).machine_digest()
    assert {e["machine"] for e in tuned_here.values()} == {here_cpu}
    old_here = synthetic(m=80, device="cpu", fingerprint=Fingerprint.of(probe_device("cpu"), {}),
                         tuned_at="2026-01-01T00:00:00+00:00")
    other_cpu = synthetic(m=96, device="cpu", device_name="Other CPU", tuned_at="2026-01-01T00:00:00+00:00")
    other_cpu_new = synthetic(m=112, device="cpu", device_name="Other CPU")
    gpu = synthetic(m=128, device="cuda", device_name=H200)
    write(cache_dir, *tuned_here.items(), old_here, other_cpu, other_cpu_new, gpu)
    ms = lambda: sorted(e["problem"]["m"] for e in entries_of(cache_dir).values())  # noqa: E731

    # --device cpu judges only CPU entries; both conditions must hold
    code, out, err = cli("cache", "prune", "--not-this-machine", "--device", "cpu",
                         "--older-than", "2026-06-01", "--dry-run")
    assert code == 0 and "would remove 1 of 5" in err and "mm 96x64x64 float16 nn (Other CPU)" in unmachined(out)
    code, _, err = cli("cache", "prune", "--not-this-machine", "--device", "cpu")
    assert code == 0 and "removed 2 entries" in err
    assert ms() == [32, 80, 128]
    # the default judges every entry: no GPU here, so the H200 entry is another machine's
    if not _gpu_here():
        code, _, err = cli("cache", "prune", "--not-this-machine")
        assert code == 0 and "removed 1 entry" in err
        assert ms() == [32, 80]


def _gpu_here() -> bool:
    import torch

    return torch.cuda.is_available()


def test_cache_tools_on_the_cpu_import_neither_torch_nor_triton(cache_dir, tmp_path):
    _, entry = synthetic(m=96, device="cpu", device_name="Other CPU")
    key, _ = synthetic(m=96, device="cpu", device_name="Other CPU")
    export = tmp_path / "e.json"
    export.write_text(json.dumps({"schema": 1, "entries": {key: entry}}))
    code = (
        "import sys; from autotune_cli.cli import main\n"
        f"assert main(['cache', 'import', {str(export)!r}]) == 0\n"
        f"assert main(['cache', 'export', '--format', 'autotune', '-o', {str(tmp_path / 'x.json')!r}]) == 0\n"
        "assert main(['cache', 'show', '--filter', 'fp16']) == 0\n"
        "assert main(['cache', 'prune', '--not-this-machine', '--device', 'cpu']) == 0\n"
        "print('IMPORTED', [m for m in ('torch', 'triton') if m in sys.modules])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "AUTOTUNE_CACHE_DIR": str(cache_dir)})
    assert proc.returncode == 0, proc.stderr
    assert "IMPORTED []" in proc.stdout
    assert "imported 1" in proc.stderr and "removed 1 entry" in proc.stderr


def test_an_entry_without_a_winner_is_never_shown_exported_or_imported_as_one(cli, cache_dir, tmp_path):
    """A tune where every candidate failed leaves a record for the next tune, not a result:
    `cache show`'s table, both exports and import leave it out, and say so."""
    key, failed = synthetic(m=96, device="cpu", device_name="AMD EPYC")
    failed = {**failed, "winner": None,
              "candidates": [{"uid": "aten::mm", "params": {}, "status": "timeout", "error": "planted"}]}
    good = synthetic(m=32, device="cpu", device_name="AMD EPYC")
    write(cache_dir, (key, failed), good)
    code, out, err = cli("cache", "show")
    assert code == 0 and "(none)" not in out and "96x" not in out and "32x64x64" in out, out
    assert "1 entry without a winner" in err and "not listed" in err
    code, out, _ = cli("cache", "show", "--json")  # the record itself stays readable
    assert key in json.loads(out)["entries"]
    moved = tmp_path / "moved.json"
    code, _, err = cli("cache", "export", "--format", "autotune", "-o", moved)
    assert code == 0 and set(json.loads(moved.read_text())["entries"]) == {good[0]}
    code, out, _ = cli("cache", "export", "--format", "inductor")
    assert code == 0 and "96" not in out
    whole = tmp_path / "whole-cache.json"  # another machine's cache file, as it is
    shutil.copy(cache_dir / CACHE_FILE, whole)
    other = tmp_path / "other"
    code, out, err = cli("cache", "import", whole, "--cache-dir", other)
    assert code == 0 and f"skipped {key}: no winner" in err, err
    assert set(entries_of(other)) == {good[0]}
