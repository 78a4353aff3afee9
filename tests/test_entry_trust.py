"""A cache entry someone else wrote: its params are checked against what each template
declares before anything is built from them, the API treats a bad one as a miss, `cache
import` refuses it, and its strings are printed escaped."""

from __future__ import annotations

import json
import threading
import uuid
import warnings
from pathlib import Path

import pytest
import torch

from autotune_cli import api
from autotune_cli.store.cache import CACHE_FILE, Cache
from autotune_cli.store.entry import CacheKey, Entry
from autotune_cli.candidates.choices import get_choices
from autotune_cli.problem import make_problem
from autotune_cli.settings import TuneSettings
from autotune_cli.templates import all_templates, get_template
from autotune_cli.templates.params import BadParams, Choice, Int, Text, check_winner
from autotune_cli.tune.tuner import Tuner
from helpers_cache_writer import key_of, make_entry
from autotune_cli.store.fingerprint import digest_of, machine_digest_of
from helpers_devices import H200, CPU

PLUGINS = Path(__file__).parent / "plugins"
TILE = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 1, "num_warps": 4}
PROBLEM = make_problem(m=32, n=32, k=32, dtype="float32", device="cpu")


@pytest.fixture(autouse=True)
def fresh_api():
    api.reset()
    yield
    api.reset()


def payload(marker: Path) -> str:
    """A param value that, written raw into a kernel's source, runs code when it is imported."""
    return f"1\nimport pathlib; pathlib.Path({str(marker)!r}).touch()\n#"


def crafted(cache_dir: Path, uid: str = "triton::mm", params: dict | None = None, problem=PROBLEM):
    """(key, entry) that this machine's API would use for `problem`: the fingerprint the tuner
    gives a tune of `uid` alone, and `params` as the winner's (default: the template's own)."""
    tuner = Tuner(TuneSettings(device="cpu", templates=(uid,), cache_dir=cache_dir))
    fingerprint = tuner.fingerprint(problem)
    if params is None:
        params = get_template(uid).full_params(problem, TILE)
    entry = {
        "problem": problem.to_dict(), "fingerprint": fingerprint.to_dict(),
        "fingerprint_digest": fingerprint.digest(), "machine": fingerprint.machine_digest(),
        "winner": {"uid": uid, "params": params, "ms": 0.001, "p20": None, "p80": None, "tflops": 1.0},
        "candidates": [{"uid": uid, "params": params, "status": "ok", "ms": 0.001}],
        "tuned_at": "2026-11-30T00:00:00+00:00",
    }
    return str(CacheKey(problem.key(), fingerprint.digest())), entry


def export_file(path: Path, *items) -> Path:
    path.write_text(json.dumps({"schema": 1, "entries": dict(items)}))
    return path


# -- the declarations -------------------------------------------------------------------------

@pytest.mark.parametrize("problem, device", [
    (make_problem(m=256, n=256, k=4096, dtype="bfloat16", device="cuda"), H200),
    (make_problem(m=16, n=4096, k=4096, dtype="float16", device="cuda"), H200),
    (make_problem(m=128, n=50257, k=777, dtype="float16", device="cuda"), H200),
    (make_problem(m=64, n=64, k=64, dtype="float32", device="cuda", op="addmm", bias="n"), H200),
    (make_problem(m=8, n=64, k=64, dtype="float16", device="cuda", op="bmm", batch=4), H200),
    (make_problem(m=32, n=45, k=40, dtype="float32", device="cpu"), CPU),
    (make_problem(m=256, n=512, k=1024, dtype="float8_e4m3fn", scale="row", device="cuda"), H200),
    (make_problem(m=64, n=64, k=64, dtype="float8_e4m3fn", scale="tensor", out_dtype="float16", device="cpu"), CPU),
])
def test_every_config_a_template_makes_is_what_it_declares(problem, device):
    """The schema is the params full_params gives: every choice the heuristics make for a
    built-in template passes the winner check, and names exactly the declared params."""
    seen = set()
    for search in ("default", "exhaustive"):
        for choice in get_choices(problem, device, TuneSettings(device=device.device_type, search=search)).choices:
            template = get_template(choice.uid)
            check_winner(template, problem, choice.params)
            assert set(choice.params) == set(template.params_schema), choice.uid
            seen.add(choice.uid)
    assert len(seen) >= 2


def test_every_builtin_template_declares_its_params():
    for template in all_templates():
        assert isinstance(template.params_schema, dict), template.uid
        for spec in template.params_schema.values():
            assert callable(getattr(spec, "problem", None)), template.uid


@pytest.mark.parametrize("change, field", [
    ({"BLOCK_M": "32\nimport os"}, "BLOCK_M"),
    ({"BLOCK_M": 48}, "BLOCK_M"),
    ({"BLOCK_M": 2**40}, "BLOCK_M"),
    ({"BLOCK_M": True}, "BLOCK_M"),
    ({"num_warps": 3}, "num_warps"),
    ({"ACC_TYPE": "tl.float32\nimport os"}, "ACC_TYPE"),
    ({"ALLOW_TF32": 1}, "ALLOW_TF32"),
    ({"EVEN_K": False}, "EVEN_K"),  # not what the template derives for K = 32
    ({"EVIL": 1}, "EVIL"),
])
def test_winner_check_names_the_bad_field(change, field):
    template = get_template("triton::mm")
    params = {**template.full_params(PROBLEM, TILE), **change}
    with pytest.raises(BadParams) as info:
        check_winner(template, PROBLEM, params)
    assert info.value.field == field and "\n" not in str(info.value)


def test_missing_param_is_refused():
    template = get_template("triton::mm")
    params = template.full_params(PROBLEM, TILE)
    del params["EVEN_K"]
    with pytest.raises(BadParams, match="EVEN_K is missing"):
        check_winner(template, PROBLEM, params)


def test_param_kinds():
    assert Int(1, 8).problem(9) and Int(1, 8).problem(True) and not Int(1, 8).problem(8)
    assert Choice((0, 1)).problem(True) and not Choice((0, 1)).problem(1)
    assert Text().problem("a\nb") and Text().problem("a'b") and not Text().problem("set-after-1.2")


def test_render_refuses_undeclared_params_so_nothing_reaches_the_source():
    template = get_template("triton::mm")
    params = {**template.full_params(PROBLEM, TILE), "EVIL": "1\nimport os"}
    with pytest.raises(BadParams):
        template.render(PROBLEM, params)
    source = template.render(PROBLEM, template.full_params(PROBLEM, TILE))
    assert "# params: BLOCK_M=32, " in source and "ACC_TYPE='tl.float32'" in source


# -- the API -----------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["extra", "block"])
def test_api_never_runs_a_crafted_param_and_falls_back_with_a_warning(tmp_path, bad):
    cache_dir = tmp_path / "cache"
    marker = tmp_path / "payload-ran"
    a, b = torch.randn(32, 32), torch.randn(32, 32)
    good_key, good = crafted(cache_dir)
    dispatcher = api.Dispatcher(cache_dir)
    Cache(cache_dir).put(good_key, good)
    assert dispatcher.dispatch_info(a, b).uid == "triton::mm"  # the crafted entry is a hit as made

    params = dict(good["winner"]["params"])
    if bad == "extra":
        params["note"] = payload(marker)
    else:
        params["BLOCK_M"] = payload(marker)
    key, entry = crafted(cache_dir, params=params)
    Cache(cache_dir).put(key, entry)
    dispatcher = api.Dispatcher(cache_dir)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = dispatcher.mm(a, b)
        info = dispatcher.dispatch_info(a, b)
    assert not marker.exists()
    assert info.fallback and info.uid == "torch.mm"
    torch.testing.assert_close(out, a @ b)
    refusals = [str(w.message) for w in caught if "is not used" in str(w.message)]
    assert len(refusals) == 1 and "\n" not in refusals[0]
    assert ("note" if bad == "extra" else "BLOCK_M") in refusals[0]
    assert dispatcher.lookup(m=32, n=32, k=32, dtype="float32", device="cpu") is None


def _stale(entry):
    entry["fingerprint"]["templates"] = {"triton::mm": "0" * 16}  # tuned with an earlier source


def _unregistered(entry):
    entry["winner"]["uid"] = entry["candidates"][0]["uid"] = "triton::mm_old"
    entry["fingerprint"]["templates"] = {"triton::mm_old": "0" * 16}


def _no_winner(entry):
    entry["winner"] = None
    entry["candidates"][0]["status"] = "timeout"


def _no_templates(entry):
    entry["fingerprint"].pop("templates")


def _winner_template_not_recorded(entry):
    entry["fingerprint"]["templates"] = {"aten::mm": get_template("aten::mm").source_hash()}


@pytest.mark.parametrize("spoil, why", [
    (_stale, "its cached entry was tuned with an earlier triton::mm (changed since"),
    (_unregistered, "its cached entry names triton::mm_old, not registered here"),
    (_no_winner, "its cached entry has no winner"),
    # what is missing is the fingerprint's record of a template, not the template
    (_no_templates, "its cached entry records no templates in its fingerprint (fingerprint.templates)"),
    (_winner_template_not_recorded, "its cached entry does not record its winner's template triton::mm in its "
                                    "fingerprint (fingerprint.templates)"),
])
def test_an_entry_of_this_machine_that_is_not_used_is_named_as_the_reason(tmp_path, spoil, why):
    """A fallback over an entry of this machine that cannot serve says what it lacks, not
    that nothing is cached; routing's summary sorts it apart from "nothing cached"."""
    from autotune_cli.routing.report import _reason_kind

    cache_dir = tmp_path / "cache"
    key, entry = crafted(cache_dir)
    spoil(entry)
    Cache(cache_dir).put(key, entry)
    a, b = torch.randn(32, 32), torch.randn(32, 32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        info = api.Dispatcher(cache_dir).dispatch_info(a, b)
    assert info.fallback and info.reason.startswith(why), info.reason
    assert "autotune mm --m 32 --n 32 --k 32" in info.reason  # the command that tunes it again
    assert any(why in str(w.message) for w in caught)
    assert _reason_kind(info.reason) == "whose cached entry is not used (see routes)"
    # another machine's entry for the problem is no reason: nothing is cached for this one
    from autotune_cli.store.fingerprint import machine_digest_of

    Cache(cache_dir).clear()
    entry["fingerprint"]["device_name"] = "another machine"
    entry["fingerprint_digest"] = digest_of(entry["fingerprint"])
    entry["machine"] = machine_digest_of(entry["fingerprint"])
    Cache(cache_dir).put(str(CacheKey(PROBLEM.key(), entry["fingerprint_digest"])), entry)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert api.Dispatcher(cache_dir).dispatch_info(a, b).reason.startswith("nothing cached for it on this machine")


def _failed(status):
    def spoil(entry):
        entry["candidates"][0].update(status=status, error="3 element(s) off")
    return spoil


def _not_among_results(entry):
    entry["candidates"][0]["params"] = {**entry["candidates"][0]["params"], "num_warps": 8}


def _no_results(entry):
    entry["candidates"] = []


def _faster_than_measured(entry):
    entry["winner"]["ms"] = entry["candidates"][0]["ms"] / 100


@pytest.mark.parametrize("spoil, why", [
    (_failed("wrong_result"), "its own result is wrong_result"),
    (_failed("compile_error"), "its own result is compile_error"),
    (_not_among_results, "its config is none of the entry's results"),
    (_no_results, "the entry records no results"),
    (_faster_than_measured, "its time, "),
], ids=["wrong_result", "compile_error", "absent", "no-candidates", "time-edited"])
def test_a_winner_that_is_not_a_verified_result_of_its_entry_is_never_served(cli, tmp_path, spoil, why):
    """A tune picks its winner among its results that passed verification, and records them:
    a winner whose own result failed, or that none of its results is, was never checked.
    The API warns and runs torch's op (the compile's routes read the same lookup) and
    `cache import` refuses the file, naming the entry and why."""
    cache_dir = tmp_path / "cache"
    key, entry = crafted(cache_dir)
    spoil(entry)
    Cache(cache_dir).put(key, entry)
    a, b = torch.randn(32, 32), torch.randn(32, 32)
    dispatcher = api.Dispatcher(cache_dir)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = dispatcher.mm(a, b)
        info = dispatcher.dispatch_info(a, b)
    assert info.fallback and info.uid == "torch.mm"
    assert f"winner is not a verified candidate: {why}" in info.reason, info.reason
    torch.testing.assert_close(out, a @ b)
    assert any(f"cache entry {key} is not used: winner is not a verified candidate" in str(w.message)
               for w in caught)
    export = export_file(tmp_path / "export.json", (key, entry))
    code, out, err = cli("cache", "import", export, "--cache-dir", tmp_path / "target")
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert key in line and f"winner is not a verified candidate: {why}" in line and "nothing imported" in line


def test_a_tune_does_not_answer_with_a_crafted_entry_but_tunes_again(cli, tmp_path):
    cache_dir = tmp_path / "cache"
    key, entry = crafted(cache_dir, uid="aten::mm", params={"note": payload(tmp_path / "ran")})
    Cache(cache_dir).put(key, entry)
    code, out, err = cli("mm", "--device", "cpu", "--m", "32", "--n", "32", "--k", "32", "--dtype", "float32",
                         "--templates", "aten::mm", "--workers", "1", "--json", "--cache-dir", cache_dir)
    assert code == 0, err
    result = json.loads(out)
    assert result["key"] == key and not result["from_cache"]
    assert err.count(f"cache entry {key} is not used: winner param 'note' is not declared by aten::mm") == 1
    assert Cache(cache_dir).load()[key].winner.params == {}  # the tune's own entry replaced it


# -- cache import ------------------------------------------------------------------------------

def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("autotune: error:"), err
    return lines[0]


@pytest.mark.parametrize("dry_run", [False, True])
def test_import_refuses_an_entry_whose_params_do_not_validate(cli, tmp_path, dry_run):
    cache_dir = tmp_path / "cache"
    marker = tmp_path / "payload-ran"
    good_key, good = crafted(tmp_path / "elsewhere")
    params = {**good["winner"]["params"], "note": payload(marker)}
    key, bad = crafted(tmp_path / "elsewhere", params=params,
                       problem=make_problem(m=64, n=32, k=32, dtype="float32", device="cpu"))
    export = export_file(tmp_path / "export.json", (good_key, good), (key, bad))
    code, out, err = cli("cache", "import", export, "--cache-dir", cache_dir, *(["--dry-run"] if dry_run else []))
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert key in line and "note" in line and "nothing imported" in line
    assert not (cache_dir / CACHE_FILE).exists() and not marker.exists()


def test_export_leaves_out_what_an_import_would_refuse(cli, tmp_path):
    """An export is never a file that `cache import` refuses as a whole: an entry whose
    winner is not what its template declares is left out, with a note naming it."""
    source_dir, target_dir = tmp_path / "source", tmp_path / "target"
    good_key, good = crafted(source_dir)
    params = {**good["winner"]["params"], "FOO": 1}
    bad_key, bad = crafted(source_dir, params=params, problem=make_problem(m=64, n=32, k=32, dtype="float32",
                                                                           device="cpu"))
    Cache(source_dir).update({good_key: good, bad_key: bad})
    export = tmp_path / "export.json"
    code, out, err = cli("cache", "export", "--format", "autotune", "-o", export, "--cache-dir", source_dir)
    assert code == 0, err
    assert f"note: left out {bad_key}: winner param 'FOO' is not declared by triton::mm" in err
    assert "exported 1 entry" in err and list(json.loads(export.read_text())["entries"]) == [good_key]
    code, out, err = cli("cache", "import", export, "--cache-dir", target_dir)
    assert code == 0 and "imported 1" in err, err


def gpu_entry(problem, params: dict) -> tuple[str, dict]:
    """(key, entry) of a triton::mm winner with `params` for `problem` on an H200 (another
    machine's: an export carries it as it is)."""
    from autotune_cli.store.fingerprint import Fingerprint

    fingerprint = Fingerprint(device_type="cuda", device_name="NVIDIA H200", capability="9.0", sm_count=132,
                              driver="580", runtime="12.8", torch="2.13.0", triton="3.9.0",
                              templates=(("triton::mm", get_template("triton::mm").source_hash()),))
    winner = {"uid": "triton::mm", "params": params, "ms": 0.01, "p20": None, "p80": None, "tflops": 1.0}
    entry = {"problem": problem.to_dict(), "fingerprint": fingerprint.to_dict(),
             "fingerprint_digest": fingerprint.digest(), "machine": fingerprint.machine_digest(),
             "winner": winner, "candidates": [{"uid": "triton::mm", "params": params, "status": "ok", "ms": 0.01}],
             "tuned_at": "2026-11-30T00:00:00+00:00"}
    return str(CacheKey(problem.key(), fingerprint.digest())), entry


def test_the_inductor_export_leaves_out_a_winner_its_template_refuses(cli, tmp_path):
    """Inductor's table names the one config Inductor compiles, unchecked: a winner the
    lookups would never build (BLOCK_K 64 at K = 32 kept EVEN_K true: a hand edit) is left
    out with a note, as from an autotune export; the others are written."""
    good_problem = make_problem(m=64, n=64, k=64, device="cuda")
    bad_problem = make_problem(m=64, n=64, k=32, device="cuda")
    tile = {**TILE, "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}
    good_key, good = gpu_entry(good_problem, get_template("triton::mm").full_params(good_problem, tile))
    bad_params = get_template("triton::mm").full_params(good_problem, tile)  # EVEN_K true: 32 % 64 != 0
    bad_key, bad = gpu_entry(bad_problem, bad_params)
    cache_dir = tmp_path / "cache"
    Cache(cache_dir).update({good_key: good, bad_key: bad})
    table = tmp_path / "table.json"
    code, out, err = cli("cache", "export", "--format", "inductor", "--no-hash", "-o", table,
                         "--cache-dir", cache_dir)
    assert code == 0 and "Traceback" not in err, err
    assert f"note: left out {bad_key}: winner param EVEN_K = True is not what triton::mm derives" in err
    written = json.loads(table.read_text())
    assert len(written) == 1 and "[64, 64]" in next(iter(written)) and "[32, 64]" not in json.dumps(written)
    assert next(iter(written.values()))[0]["BLOCK_K"] == 64 and "exported 1 lookup-table key from 1 entry" in err


def _with_unregistered_result(entry: dict, ms: float) -> dict:
    """`entry` holding too a result of a template not registered here (a plugin's, from a
    tune with --plugin), faster than its own, as its winner."""
    entry["fingerprint"]["templates"]["test::gone"] = "0" * 16
    gone = {"uid": "test::gone", "params": {}, "status": "ok", "ms": ms}
    entry["candidates"].insert(0, gone)
    entry["winner"] = {"uid": "test::gone", "params": {}, "ms": ms, "p20": None, "p80": None, "tflops": 1.0}
    return entry


def test_a_result_of_a_template_not_registered_here_does_not_keep_the_others_from_serving(tmp_path):
    cache_dir = tmp_path / "cache"
    key, entry = crafted(cache_dir, uid="aten::mm", params={})
    Cache(cache_dir).put(key, _with_unregistered_result(entry, ms=0.0001))
    a, b = torch.randn(32, 32), torch.randn(32, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback, no warning
        assert api.Dispatcher(cache_dir).dispatch_info(a, b).uid == "aten::mm"
    # where the unregistered template's result is the only one, the reason names it
    alone = _with_unregistered_result(crafted(cache_dir, uid="aten::mm", params={})[1], ms=0.0001)
    alone["candidates"] = alone["candidates"][:1]
    del alone["fingerprint"]["templates"]["aten::mm"]
    Cache(cache_dir).put(key, alone)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        info = api.Dispatcher(cache_dir).dispatch_info(a, b)
    assert info.fallback and info.reason.startswith("its cached entry names test::gone, not registered here")


def test_an_import_of_a_narrower_later_tune_keeps_what_ours_learned(cli, tmp_path):
    """Theirs, tuned later with --templates triton::mm alone, replaces ours (aten's) as a
    narrower tune here would: aten's results stay, the winner is the best of both."""
    cache_dir = tmp_path / "cache"
    key, ours = crafted(tmp_path / "elsewhere", uid="aten::mm", params={})
    ours["winner"]["ms"] = ours["candidates"][0]["ms"] = 0.001
    _, theirs = crafted(tmp_path / "elsewhere")
    theirs["winner"]["ms"] = theirs["candidates"][0]["ms"] = 0.5
    theirs["tuned_at"] = "2026-12-01T00:00:00+00:00"
    Cache(cache_dir).put(key, ours)
    code, out, err = cli("cache", "import", export_file(tmp_path / "export.json", (key, theirs)),
                         "--cache-dir", cache_dir)
    assert code == 0 and "replaced 1" in err, err
    entry = Cache(cache_dir).load()[key]
    assert set(entry.templates) == {"aten::mm", "triton::mm"} and entry.winner.uid == "aten::mm"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert api.Dispatcher(cache_dir).lookup(PROBLEM, templates="triton::mm")["uid"] == "triton::mm"


def test_an_import_cut_short_by_its_budget_does_not_replace_a_whole_tune(cli, tmp_path):
    cache_dir = tmp_path / "cache"
    key, ours = crafted(tmp_path / "elsewhere")
    _, theirs = crafted(tmp_path / "elsewhere")
    theirs["candidates"].append({"uid": "triton::mm", "params": {**theirs["winner"]["params"], "BLOCK_M": 64},
                                 "status": "skipped", "error": "the tuning budget ran out"})
    theirs.update(cut_short=True, tuned_at="2026-12-01T00:00:00+00:00")
    theirs["winner"]["ms"] = theirs["candidates"][0]["ms"] = 0.5
    Cache(cache_dir).put(key, ours)
    code, out, err = cli("cache", "import", export_file(tmp_path / "export.json", (key, theirs)),
                         "--cache-dir", cache_dir)
    assert code == 0, err
    assert f"skipped {key}: theirs was cut short by --budget where ours timed every config" in err
    assert Cache(cache_dir).load()[key].winner.ms == 0.001


def test_import_lists_what_it_adds(cli, tmp_path):
    cache_dir = tmp_path / "cache"
    key, entry = crafted(tmp_path / "elsewhere")
    export = export_file(tmp_path / "export.json", (key, entry))
    code, out, err = cli("cache", "import", export, "--cache-dir", cache_dir, "--dry-run")
    assert code == 0, err
    machine = machine_digest_of(entry["fingerprint"])
    title = f"{PROBLEM.describe()} ({entry['fingerprint']['device_name']}, machine {machine})"
    assert " ".join(out.split()) == (f"would import {title}: triton::mm BLOCK_M=32 BLOCK_N=32 BLOCK_K=32 "
                                     "GROUP_M=8 num_stages=1 num_warps=4 FIXED_NK=0 EVEN_K=True "
                                     "ACC_TYPE=tl.float32 ALLOW_TF32=False 0.0010 ms")
    assert not (cache_dir / CACHE_FILE).exists()
    code, out, err = cli("cache", "import", export, "--cache-dir", cache_dir)
    assert code == 0 and out.startswith(f"import {title}: triton::mm ") and "imported 1" in err
    assert list(Cache(cache_dir).load()) == [key]


DECLARING_PLUGIN = """
from autotune_cli.templates import Template, register_template
from autotune_cli.templates.params import Int


class Declared(Template):
    uid = {uid!r}
    ops = ("mm",)
    backend = "test"
    params_schema = {{"id": Int(0, 7)}}

    def source_text(self):
        return "declared v1"

    def build(self, problem, params, kernel_dir):
        raise RuntimeError("not built by these tests")


register_template(Declared())
"""


def test_import_of_a_plugin_entry_needs_the_plugin_and_checks_its_declaration(cli, tmp_path):
    uid = f"test::declared_{uuid.uuid4().hex[:8]}"  # registered once per process: a fresh one
    plugin = tmp_path / "declared.py"
    plugin.write_text(DECLARING_PLUGIN.format(uid=uid))
    cache_dir = tmp_path / "cache"
    problem = make_problem(m=8, n=8, k=8, dtype="float32", device="cpu")
    entry = make_entry()
    entry["problem"] = problem.to_dict()
    key = key_of(entry)
    entry["winner"] = {"uid": uid, "params": {"id": 5}, "ms": 0.2, "tflops": 0.1}
    entry["candidates"] = [{"uid": uid, "params": {"id": 5}, "status": "ok", "ms": 0.2}]
    export = export_file(tmp_path / "export.json", (key, entry))
    code, _, err = cli("cache", "import", export, "--cache-dir", cache_dir)
    assert code == 2 and f"{uid!r} is not registered here" in one_error_line(err)
    code, out, err = cli("cache", "import", export, "--cache-dir", cache_dir, "--plugin", plugin)
    assert code == 0 and "imported 1" in err, err
    entry["winner"]["params"] = {"id": 99}
    export = export_file(tmp_path / "export.json", (key, {**entry, "tuned_at": "2026-12-01T00:00:00+00:00"}))
    code, _, err = cli("cache", "import", export, "--cache-dir", cache_dir, "--plugin", plugin)
    assert code == 2 and "winner param id = 99 is not in 0..7" in one_error_line(err)


def test_import_refuses_a_candidate_with_undeclared_params(cli, tmp_path):
    key, entry = crafted(tmp_path / "elsewhere")
    entry["candidates"].append({"uid": "triton::mm", "params": {"BLOCK_M": "\x1b[2J"}, "status": "compile_error"})
    export = export_file(tmp_path / "export.json", (key, entry))
    code, _, err = cli("cache", "import", export, "--cache-dir", tmp_path / "cache")
    line = one_error_line(err)
    assert code == 2 and "candidate 1 param BLOCK_M" in line and "\x1b" not in err


# -- control characters in what is printed ------------------------------------------------------

HOSTILE = "a\x1b[2J\rb\x07[bold]c[/bold]\u202e"


def assert_escaped(text: str) -> None:
    for raw in ("\x1b", "\r", "\x07", "\u202e"):
        assert raw not in text, repr(text)


def test_show_prune_and_import_escape_control_characters(cli, tmp_path):
    cache_dir = tmp_path / "cache"
    entry = make_entry()
    entry["fingerprint"]["device_name"] = HOSTILE
    entry["winner"]["uid"] = "x" + HOSTILE
    entry["candidates"][0]["uid"] = "x" + HOSTILE
    entry["fingerprint_digest"] = digest_of(entry["fingerprint"])
    Cache(cache_dir).put(key_of(entry), entry)

    code, out, err = cli("cache", "show", "--cache-dir", cache_dir)
    assert code == 0, err
    assert_escaped(out + err)
    assert "\\x1b[2J\\rb\\x07[bold]c[/bold]" in out.replace("\n", "")  # shown as written, not as markup

    code, out, err = cli("cache", "prune", "--older-than", "2030-01-01", "--dry-run", "--cache-dir", cache_dir)
    assert code == 0 and "a\\x1b[2J" in out and out.startswith("mm ")  # named as the table names it
    assert_escaped(out + err)

    key = "k" + HOSTILE + "@" + entry["fingerprint_digest"]  # a key that does not describe it
    export = export_file(tmp_path / "export.json", (key, entry))
    code, out, err = cli("cache", "import", export, "--cache-dir", tmp_path / "other")
    assert code == 0 and "skipped ka\\x1b[2J" in err  # refused before its params are looked at
    assert_escaped(out + err)
    export = export_file(tmp_path / "export.json", (key_of(entry), entry))
    code, out, err = cli("cache", "import", export, "--cache-dir", tmp_path / "other")
    assert code == 2 and "is not registered here" in one_error_line(err)
    assert_escaped(out + err)


def test_cached_winner_line_of_a_tune_is_escaped():
    from rich.console import Console

    from autotune_cli.tune.report import ProgressReporter, outcome_summary
    from autotune_cli.cli.tables import outcome_table

    entry = make_entry()
    entry["winner"]["uid"] = HOSTILE
    entry["winner"]["params"] = {"BLOCK_M": HOSTILE}
    entry["candidates"][0]["uid"] = HOSTILE
    entry["fingerprint"]["device_name"] = HOSTILE
    entry = Entry.from_dict(entry)
    console = Console(record=True, width=300, force_terminal=False)
    problem = make_problem(m=64, n=8, k=8, dtype="float16", device="cpu")
    ProgressReporter(console).cache_hit(problem, entry)

    class Outcome:
        pass

    outcome = Outcome()
    outcome.entry, outcome.problem, outcome.from_cache, outcome.key = entry, problem, True, "k"
    console.print(outcome_table(outcome))
    console.print(outcome_summary(outcome), markup=False)
    text = console.export_text()
    assert_escaped(text)
    assert "[bold]c[/bold]" in text


# -- the kernels folder ------------------------------------------------------------------------

def kernel_source(k: int = 32) -> tuple[str, Path]:
    from autotune_cli.templates.kernel_files import load_kernels  # noqa: F401  (the module loads)

    template = get_template("triton::mm")
    problem = make_problem(m=32, n=32, k=k, dtype="float32", device="cpu")
    return template.render(problem, template.full_params(problem, TILE)), problem


def kernel_path(kernel_dir: Path, source: str) -> Path:
    import hashlib

    return kernel_dir / f"autotune_kernel_{hashlib.sha256(source.encode()).hexdigest()[:20]}.py"


def test_a_planted_pyc_beside_the_kernel_file_is_never_run(tmp_path):
    """The kernel's module runs the text rendered here: a .pyc that Python's import would
    take for the file's (same size and mtime) is not loaded."""
    import importlib.util
    import os
    import py_compile

    from autotune_cli.templates.kernel_files import load_kernels

    source, _ = kernel_source(k=48)
    kernel_dir = tmp_path / "kernels"
    kernel_dir.mkdir()
    path = kernel_path(kernel_dir, source)
    path.write_text(source)
    marker = tmp_path / "payload-ran"
    evil = f"import pathlib; pathlib.Path({str(marker)!r}).touch()\n"
    evil += "#" * (len(source.encode()) - len(evil.encode()) - 1) + "\n"
    planted = tmp_path / "evil.py"
    planted.write_text(evil)
    os.utime(planted, (1_700_000_000, 1_700_000_000))
    os.utime(path, (1_700_000_000, 1_700_000_000))
    py_compile.compile(str(planted), cfile=importlib.util.cache_from_source(str(path)), doraise=True)
    (kernel,) = load_kernels(source, str(kernel_dir), count=1)
    assert not marker.exists() and kernel.fn.__name__.startswith("mm_")


def test_a_fifo_in_place_of_a_kernel_file_is_replaced_not_waited_on(tmp_path):
    import os

    from autotune_cli.templates.kernel_files import load_kernels

    source, _ = kernel_source(k=64)
    kernel_dir = tmp_path / "kernels"
    kernel_dir.mkdir()
    path = kernel_path(kernel_dir, source)
    os.mkfifo(path)
    loaded = []  # in a thread: a regression would block on the FIFO for ever
    worker = threading.Thread(target=lambda: loaded.extend(load_kernels(source, str(kernel_dir), count=1)),
                              daemon=True)
    worker.start()
    worker.join(120)
    assert len(loaded) == 1 and path.is_file() and path.read_text() == source


def test_a_kernels_folder_that_cannot_be_written_gives_way_to_a_private_one(tmp_path, monkeypatch):
    """A cache deployed read-only (its kernels folder not writable) still runs its Triton
    winners: the kernel file goes to a new folder of the process's own, private to the user."""
    import errno
    import stat

    from autotune_cli.templates import kernel_files

    source, _ = kernel_source(k=80)
    kernel_dir = tmp_path / "kernels"
    real_write = kernel_files._write_source

    def read_only(directory, path, text):
        if Path(directory) == kernel_dir:
            raise PermissionError(errno.EACCES, "Permission denied", str(directory))
        real_write(directory, path, text)

    monkeypatch.setattr(kernel_files, "_write_source", read_only)
    (kernel,) = kernel_files.load_kernels(source, str(kernel_dir), count=1)
    assert kernel.fn.__name__.startswith("mm_") and not kernel_dir.exists()
    placed = kernel_files._WRITTEN[kernel_path(kernel_dir, source)]
    assert placed.parent != kernel_dir and placed.read_text() == source
    assert stat.S_IMODE(placed.parent.stat().st_mode) == 0o700
    # any other failure is the caller's to hear
    monkeypatch.setattr(kernel_files, "_write_source", lambda *a: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    with pytest.raises(OSError, match="full"):
        kernel_files.load_kernels(kernel_source(k=96)[0], str(kernel_dir), count=1)
