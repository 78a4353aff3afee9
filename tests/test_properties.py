"""Hostile input, property-based: problems, --space files, cache files. Each either works
or fails in the one documented way (UserError for input, a moved-aside file for a cache)."""

import contextlib
import io
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from autotune_cli.store.cache import CACHE_FILE, Cache, DamagedCache, NewerCache
from autotune_cli.store.cache_document import parse_document
from autotune_cli.store.entry import Entry
from autotune_cli.errors import UserError
from autotune_cli.store.fingerprint import digest_of, machine_digest_of
from autotune_cli.heuristics.spaces import TRITON_KEYS, load_space_file, validate_config
from autotune_cli.problem import (BIAS_SHAPES, DEVICES, DTYPE_ALIASES, DTYPES, FP8_DTYPES, FP8_LAYOUT, LAYOUTS,
                                  MAX_DIM, OPS, OUT_DTYPES, SCALES, GemmProblem, make_problem, parse_mnk)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEWER = settings(SETTINGS, max_examples=60)  # each example writes files and runs the CLI twice

# -- strategies ----------------------------------------------------------------------------------

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                    st.text(max_size=8))
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(st.text(max_size=6), inner, max_size=4)),
                           max_leaves=12)
junk = st.one_of(scalars, st.lists(scalars, max_size=2), st.floats())
dims = st.one_of(st.integers(1, 4096), st.integers(-5, MAX_DIM + 5), st.integers(), junk)


def maybe(good, bad=junk):
    """Mostly a good value, sometimes anything."""
    return st.one_of(good, good, good, bad)


problem_fields = st.fixed_dictionaries({
    "op": maybe(st.sampled_from(OPS)), "m": dims, "n": dims, "k": dims,
    "b": st.one_of(st.just(1), dims),
    "dtype": maybe(st.sampled_from(DTYPES)), "layout": maybe(st.sampled_from(LAYOUTS)),
    "bias": maybe(st.sampled_from((None, *BIAS_SHAPES))), "allow_tf32": st.booleans(),
    "device": maybe(st.sampled_from(DEVICES)),
    "scale": maybe(st.sampled_from((None, *SCALES, "block"))),
    "out_dtype": maybe(st.sampled_from((None, *OUT_DTYPES))),
})


@st.composite
def valid_problems(draw):
    op = draw(st.sampled_from(OPS))
    if op == "scaled_mm":
        out_dtype = draw(st.sampled_from(OUT_DTYPES))
        scale = draw(st.sampled_from(SCALES))
        # blockwise scales tile K and N in blocks of 128
        n, k = ((128 * draw(st.integers(1, MAX_DIM // 128)), 128 * draw(st.integers(1, MAX_DIM // 128)))
                if scale == "block" else (draw(st.integers(1, MAX_DIM)), draw(st.integers(1, MAX_DIM))))
        return GemmProblem(
            op=op, m=draw(st.integers(1, MAX_DIM)), n=n, k=k,
            dtype=draw(st.sampled_from(FP8_DTYPES)), layout=FP8_LAYOUT, scale=scale,
            out_dtype=out_dtype, bias=None if out_dtype == "float32" else draw(st.sampled_from((None, "n"))),
            device=draw(st.sampled_from(DEVICES)))
    dtype = draw(st.sampled_from([d for d in DTYPES if d not in FP8_DTYPES]))
    return GemmProblem(
        op=op, m=draw(st.integers(1, MAX_DIM)), n=draw(st.integers(1, MAX_DIM)), k=draw(st.integers(1, MAX_DIM)),
        b=draw(st.integers(1, 4096)) if op == "bmm" else 1, dtype=dtype, layout=draw(st.sampled_from(LAYOUTS)),
        bias=draw(st.sampled_from(BIAS_SHAPES)) if op == "addmm" else None,
        allow_tf32=draw(st.booleans()) if dtype == "float32" else False, device=draw(st.sampled_from(DEVICES)))


# Names the tables draw, brackets included (rich would read "[...]" as markup unless escaped).
names = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
times = st.floats(0, 1e6, allow_nan=False)


@st.composite
def valid_entries(draw):
    params = draw(st.dictionaries(st.sampled_from(TRITON_KEYS), st.integers(1, 256), max_size=6))
    candidates = draw(st.lists(st.fixed_dictionaries(
        {"uid": names, "params": st.dictionaries(names, scalars, max_size=3),
         "status": st.sampled_from(("ok", "timeout", "compile_error", "wrong_result"))},
        optional={"error": names, "max_rel_error": st.one_of(st.none(), times)}), max_size=4))
    for cand in candidates:
        cand["ms"] = draw(times) if cand["status"] == "ok" else draw(st.one_of(st.none(), times))
    winner = draw(st.one_of(st.none(), st.fixed_dictionaries(
        {"uid": names, "params": st.just(params), "ms": times, "tflops": times},
        optional={"p20": st.one_of(st.none(), times), "p80": times})))
    entry = {
        "problem": draw(valid_problems()).to_dict(),
        "fingerprint": draw(st.fixed_dictionaries(
            {"device_name": names}, optional={"templates": st.dictionaries(names, names, max_size=3),
                                              "torch": names, "sm_count": st.integers(0, 200)})),
        "winner": winner,
        "candidates": candidates,
    }
    entry.update(draw(st.fixed_dictionaries({}, optional={
        "fingerprint_digest": st.just(digest_of(entry["fingerprint"])),
        "machine": st.just(machine_digest_of(entry["fingerprint"])), "tuned_at": names, "extra": json_values})))
    return entry


def key_of(entry: dict) -> str:
    """The key an entry belongs under: its problem's and its fingerprint's digest."""
    return f"{GemmProblem.from_dict(entry['problem']).key()}@{digest_of(entry['fingerprint'])}"


entry_maps = st.lists(valid_entries(), min_size=1, max_size=3).map(lambda es: {key_of(e): e for e in es})
NEW = {"problem": GemmProblem("mm", 1, 1, 1).to_dict(), "fingerprint": {"device_name": "x"},
       "winner": None, "candidates": []}


def cli_in_process(*args):
    """The CLI's main() in this process, its output captured: (exit code, stdout, stderr)."""
    from autotune_cli.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


# -- problems ------------------------------------------------------------------------------------

@SETTINGS
@given(problem_fields)
def test_problem_is_valid_and_round_trips_or_is_a_user_error(fields):
    try:
        problem = GemmProblem(**fields)
    except UserError as exc:
        assert "\n" not in str(exc)
        return
    again = GemmProblem.from_dict(json.loads(json.dumps(problem.to_dict())))
    assert again == problem and again.key() == problem.key() and hash(again) == hash(problem)


@SETTINGS
@given(valid_problems(), valid_problems())
def test_problem_keys_are_distinct_for_distinct_problems(first, second):
    assert (first.key() == second.key()) == (first == second)


@SETTINGS
@given(m=dims, n=dims, k=dims, batch=st.one_of(st.none(), dims),
       dtype=maybe(st.sampled_from(sorted(DTYPE_ALIASES)), st.text(max_size=10)),
       layout=maybe(st.sampled_from(LAYOUTS + ("NT", "Tn")), st.text(max_size=4)),
       bias=maybe(st.sampled_from((None, *BIAS_SHAPES))), device=maybe(st.sampled_from(DEVICES)))
def test_make_problem_is_valid_or_a_user_error(m, n, k, batch, dtype, layout, bias, device):
    assume(batch != 0)  # see test_batch_zero_is_refused
    try:
        problem = make_problem(m=m, n=n, k=k, batch=batch, dtype=dtype, layout=layout, bias=bias, device=device)
    except UserError:
        return
    assert GemmProblem.from_dict(problem.to_dict()) == problem
    assert problem.op == ("addmm" if bias else "bmm" if batch else "mm")


@SETTINGS
@given(st.one_of(st.text(max_size=30),
                 st.from_regex(r"\A\s*[0-9٣]{1,12}\s*[x,X]\s*-?[0-9]{1,12}\s*[x,]\s*[0-9]{1,12}\s*\Z")))
def test_parse_mnk_gives_three_ints_or_a_user_error(text):
    try:
        m, n, k = parse_mnk(text)
    except UserError:
        return
    assert all(isinstance(v, int) and v >= 0 for v in (m, n, k))


# -- --space files -------------------------------------------------------------------------------

config_like = st.dictionaries(
    st.one_of(st.sampled_from(TRITON_KEYS), st.text(max_size=6)),
    st.one_of(st.sampled_from((1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)), junk), max_size=7)
space_documents = st.one_of(
    json_values,
    st.lists(config_like, max_size=4),
    st.dictionaries(st.text(max_size=10), st.lists(config_like, max_size=3), max_size=3),
    st.fixed_dictionaries({"configs": st.lists(config_like, max_size=3)}),
)


@SETTINGS
@given(space_documents)
def test_space_file_is_a_config_list_or_a_user_error(data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "my space 'ü'.json"
        path.write_text(json.dumps(data))
        try:
            space = load_space_file(path)
        except UserError:
            return
    assert space and all(isinstance(uid, str) and configs for uid, configs in space.items())
    for configs in space.values():
        for config in configs:
            assert set(config) == set(TRITON_KEYS) and validate_config(config, "again") == config


@SETTINGS
@given(st.binary(max_size=64))
def test_space_file_of_raw_bytes_is_a_user_error(raw):
    """Arbitrary bytes: either a valid space (every config passes validation again) or one
    UserError line naming the file; never another exception."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "space.json"
        path.write_bytes(raw)
        try:
            space = load_space_file(path)
        except UserError as exc:
            message = str(exc)
            assert str(path) in message and "\n" not in message
            return
    assert space and all(configs for configs in space.values())
    for configs in space.values():
        for config in configs:
            assert validate_config(config, "again") == config


# -- the cache -----------------------------------------------------------------------------------

@FEWER
@given(entry_maps, entry_maps)
def test_cache_stores_and_loads_entries_unchanged(first, second):
    with tempfile.TemporaryDirectory() as folder:
        cache = Cache(folder)
        cache.update(first)
        cache.update(second)
        loaded = Cache(folder).load()
        assert {k: e.to_dict() for k, e in loaded.items()} == {**first, **second} and not cache.notices
        code, out, err = cli_in_process("cache", "show", "--cache-dir", folder)  # it can draw them
        assert code == 0, err
        code, out, _ = cli_in_process("cache", "show", "--json", "--cache-dir", folder)
        assert code == 0 and json.loads(out)["entries"] == {**first, **second}


def mutate(document, path, value):
    """document with the value at path (a list of keys and indexes) replaced."""
    target = document
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return document


@st.composite
def damaged_documents(draw):
    """A valid document with one value somewhere inside replaced by anything."""
    entries = draw(entry_maps)
    document = {"schema": 1, "entries": entries}
    path, node = [], document
    while isinstance(node, (dict, list)) and node and draw(st.integers(0, 4)) > 0:
        step = draw(st.sampled_from(sorted(node) if isinstance(node, dict) else range(len(node))))
        path.append(step)
        node = node[step]
    if not path:
        return draw(json_values)
    return mutate(document, path, draw(json_values))


def truncated(args):
    """A valid document cut somewhere inside."""
    entries, where = args
    text = json.dumps({"schema": 1, "entries": entries})
    return text[: int(len(text) * where)].encode()


FINGERPRINT_FIELDS = ("device_type", "device_name", "capability", "sm_count", "driver", "runtime", "torch",
                      "triton", "templates")
schema_0_documents = st.fixed_dictionaries({"entries": st.dictionaries(st.text(max_size=6), st.fixed_dictionaries({
    "problem": st.one_of(valid_problems().map(GemmProblem.to_dict), json_values),
    "fingerprint": st.fixed_dictionaries({name: json_values for name in FINGERPRINT_FIELDS}),
    "winner": st.none(), "candidates": st.just([])}), max_size=3)})


garbage = st.one_of(
    schema_0_documents.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=80),
    st.text(max_size=80).map(str.encode),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({"schema": junk, "entries": json_values}).map(lambda v: json.dumps(v).encode()),
    damaged_documents().map(lambda v: json.dumps(v).encode()),
    st.tuples(entry_maps, st.floats(0, 1, exclude_max=True)).map(truncated),
)



@SETTINGS
@given(garbage)
def test_any_cache_file_loads_or_is_moved_aside_intact(raw):
    with tempfile.TemporaryDirectory() as folder:
        cache = Cache(folder)
        cache.path.write_bytes(raw)
        entries = cache.load()  # never raises
        asides = list(Path(folder).glob(f"{CACHE_FILE}.damaged-*"))
        kept = list(Path(folder).glob(f"{CACHE_FILE}.schema-*"))
        if asides and not cache.path.exists():  # the file unusable: moved aside, work goes on empty
            assert entries == {} and len(cache.notices) == 1 and "\n" not in cache.notices[0]
            assert asides[0].read_bytes() == raw
        elif asides:  # entries of the wrong shape: left out, the others kept, the file as it was beside
            assert asides[0].read_bytes() == raw and not kept
            assert any("is damaged" in n and "\n" not in n for n in cache.notices)
            assert set(parse_document(cache.path.read_text()).entries) == set(entries)
        elif kept:  # an unversioned document, migrated; the original kept
            assert kept[0].read_bytes() == raw and "migrated" in cache.notices[0]
        elif cache.newer_schema is not None:  # a newer autotune's: read as empty, never written
            assert entries == {} and cache.path.read_bytes() == raw
            assert len(cache.notices) == 1 and "written by a newer autotune" in cache.notices[0]
            assert cli_in_process("cache", "show", "--cache-dir", folder)[0] == 0
            with pytest.raises(NewerCache):
                cache.put(key_of(NEW), NEW)
            assert cache.path.read_bytes() == raw
            return
        else:  # untouched; an entry under a key that does not describe it is not used
            assert cache.path.read_bytes() == raw and all("is not used" in n for n in cache.notices)
        for key, entry in entries.items():
            Entry.from_dict(entry.to_dict(), key)
        code, _, err = cli_in_process("cache", "show", "--cache-dir", folder)
        assert code == 0, err
        cache.put(key_of(NEW), NEW)
        assert set(Cache(folder).load()) == set(entries) | {key_of(NEW)}


@FEWER
@given(valid_entries(), st.sampled_from(["nan", "inf", "-inf"]))
def test_non_finite_numbers_never_reach_the_file(entry, word):
    entry["candidates"].append({"uid": "x", "params": {}, "status": "wrong_result", "ms": None,
                                "max_rel_error": float(word)})
    with tempfile.TemporaryDirectory() as folder:
        Cache(folder).put(key_of(entry), entry)
        text = (Path(folder) / CACHE_FILE).read_text()
        json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in the file"))
        assert Cache(folder).load()[key_of(entry)].candidates[-1].max_rel_error is None


def test_invalid_entries_are_refused_before_the_lock(tmp_path):
    for bad in ({"problem": {"op": "mm"}, "fingerprint": {"device_name": "x"}, "candidates": []},
                {"problem": GemmProblem("mm", 1, 1, 1).to_dict(), "fingerprint": {}, "candidates": []},
                {"problem": GemmProblem("mm", 1, 1, 1).to_dict(), "fingerprint": {"device_name": "x"},
                 "candidates": [], "extra": {1, 2}}):
        with pytest.raises(DamagedCache):
            Cache(tmp_path).put("k@fp", bad)
    assert not (tmp_path / CACHE_FILE).exists()


def test_deeply_nested_and_huge_number_cache_files_are_moved_aside(tmp_path):
    for raw in ("[" * 100_000, '{"schema": 1, "entries": {}, "x": ' + "9" * 5000 + "}",
                '{"schema": 1, "entries": {}, "x": 1e999}'):
        cache = Cache(tmp_path)
        cache.path.write_text(raw)
        assert cache.load() == {} and len(cache.notices) == 1, raw[:40]
    assert len(list(tmp_path.glob(f"{CACHE_FILE}.damaged-*"))) == 3


# -- bugs found by these tests, now fixed -------------------------------------------------------

def test_problem_from_dict_missing_fields_is_a_user_error():
    with pytest.raises(UserError):
        GemmProblem.from_dict({"op": "mm"})


def test_allow_tf32_must_be_a_bool():
    with pytest.raises(UserError):
        GemmProblem(op="mm", m=1, n=1, k=1, dtype="float32", allow_tf32="no")


def test_batch_zero_is_refused():
    with pytest.raises(UserError):
        make_problem(m=1, n=1, k=1, batch=0)


def test_parse_mnk_of_a_huge_number_is_a_user_error():
    with pytest.raises(UserError):
        parse_mnk("1" * 5000 + "x1x1")


def test_deeply_nested_space_file_is_a_user_error(tmp_path):
    path = tmp_path / "space.json"
    path.write_text("[" * 100_000)
    with pytest.raises(UserError):
        load_space_file(path)


def test_cache_show_draws_brackets_in_names(tmp_path):
    entry = {"problem": GemmProblem("mm", 1, 1, 1).to_dict(), "fingerprint": {"device_name": "gpu [/]"},
             "winner": {"uid": "my[/]mm", "params": {}, "ms": 1.0, "tflops": 1.0}, "candidates": []}
    Cache(tmp_path).put(key_of(entry), entry)
    code, out, _ = cli_in_process("cache", "show", "--cache-dir", tmp_path)
    assert code == 0 and "my[/]mm" in out


def test_empty_space_object_is_a_user_error(tmp_path):
    path = tmp_path / "space.json"
    path.write_text("{}")
    with pytest.raises(UserError):
        load_space_file(path)


def test_unknown_space_key_with_a_newline_stays_one_line(tmp_path):
    path = tmp_path / "space.json"
    path.write_text(json.dumps([{"BLOCK_M\nx": 16}]))
    with pytest.raises(UserError) as info:
        load_space_file(path)
    assert "\n" not in str(info.value)
