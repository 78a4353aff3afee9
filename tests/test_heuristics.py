import inspect
import json

import pytest

from autotune_cli.errors import UserError
from autotune_cli.heuristics import (
    Heuristic, exhaustive_space, load_space_file, lookup_heuristic, register_heuristic, shipped_space,
)
from autotune_cli.heuristics.triton_mm import TritonMMCpu, TritonMMCuda
from autotune_cli.problem import make_problem


def test_lookup_goes_from_specific_to_general():
    @register_heuristic("x::t")
    class General(Heuristic):
        pass

    @register_heuristic("x::t", "cuda")
    class ForCuda(Heuristic):
        pass

    @register_heuristic("x::t", None, "bmm")
    class ForBmm(Heuristic):
        pass

    @register_heuristic("x::t", "cuda", "bmm")
    class ForCudaBmm(Heuristic):
        pass

    assert type(lookup_heuristic("x::t", "cuda", "bmm")) is ForCudaBmm
    assert type(lookup_heuristic("x::t", "cpu", "bmm")) is ForBmm
    assert type(lookup_heuristic("x::t", "cuda", "mm")) is ForCuda
    assert type(lookup_heuristic("x::t", "cpu", "mm")) is General
    assert type(lookup_heuristic("y::t", "cpu", "mm")) is Heuristic
    assert list(lookup_heuristic("y::t", "cpu", "mm").get_configs(make_problem(m=1, n=1, k=1))) == []
    with pytest.raises(ValueError, match="already registered"):
        register_heuristic("x::t")(General)


def test_builtin_lookup():
    assert isinstance(lookup_heuristic("triton::mm", "cuda", "addmm"), TritonMMCuda)
    assert isinstance(lookup_heuristic("triton::bmm", "cpu", "bmm"), TritonMMCpu)


def test_configs_are_lazy_and_scaled_down():
    heuristic = lookup_heuristic("triton::mm", "cuda", "mm")
    small = make_problem(m=16, n=40, k=24)
    configs = heuristic.get_configs(small)
    assert inspect.isgenerator(configs)
    configs = list(configs)
    assert all(c["BLOCK_M"] == 16 and c["BLOCK_N"] <= 64 and c["BLOCK_K"] <= 32 for c in configs)
    assert len({tuple(sorted(c.items())) for c in configs}) == len(configs)  # no duplicates
    big = list(heuristic.get_configs(make_problem(m=4096, n=4096, k=4096)))
    assert len(big) == len(shipped_space("triton_mm_cuda")) >= 18
    assert len(configs) < len(big)


def test_exhaustive_space_matches_inductors_size():
    space = exhaustive_space()
    assert len(space) == 1875
    assert {c["num_warps"] for c in space} == {2, 4, 8}
    assert {c["num_stages"] for c in space} == {1, 2, 3, 4, 5}


def test_space_file(tmp_path):
    path = tmp_path / "space.json"
    path.write_text(json.dumps([{"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "num_stages": 1, "num_warps": 4}]))
    space = load_space_file(path)
    assert space == {"*": [{"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 1,
                            "num_warps": 4}]}
    odd = {"BLOCK_M": 48, "BLOCK_N": 32, "BLOCK_K": 32, "num_stages": 1, "num_warps": 4}
    path.write_text(json.dumps({"triton::mm": [odd]}))
    with pytest.raises(UserError, match="power of two"):
        load_space_file(path)
    path.write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        load_space_file(path)
    path.write_text(json.dumps([{"BLOCK_M": 32, "bogus": 1}]))
    with pytest.raises(UserError, match="unknown config key"):
        load_space_file(path)
    with pytest.raises(UserError, match="not found"):
        load_space_file(tmp_path / "missing.json")


def test_a_space_listed_under_a_template_takes_its_own_keys_checked_by_it(tmp_path):
    """Under triton::gemv's uid: its own keys (PDL, FLAT_ROW, REDUCE_EACH) and its own ranges
    (BLOCK_N from 1); a value its schema refuses, a value it derives (EVEN_K), its keys in a
    list for every template, an unknown uid and a template without configs are said."""
    path = tmp_path / "space.json"
    gemv = {"BLOCK_M": 1, "BLOCK_N": 2, "BLOCK_K": 1024, "num_stages": 1, "num_warps": 2, "REDUCE_EACH": 1,
            "FLAT_ROW": 1, "PDL": 1}
    path.write_text(json.dumps({"triton::gemv": [gemv]}))
    assert load_space_file(path) == {"triton::gemv": [{**gemv, "GROUP_M": 8}]}
    for bad, message in (({**gemv, "PDL": 2}, "PDL=2 is not one of 0, 1"),
                         ({**gemv, "EVEN_K": True}, "unknown config key"),
                         ({**gemv, "num_warps": 3}, "num_warps=3 is not one of")):
        path.write_text(json.dumps({"triton::gemv": [bad]}))
        with pytest.raises(UserError, match=message):
            load_space_file(path)
    path.write_text(json.dumps([gemv]))
    with pytest.raises(UserError, match="unknown config key"):
        load_space_file(path)
    # a float8 kernel's SCALE and OUT_DTYPE come from the problem: no config sets them; the
    # split-K kernel's SPLIT_K is its config's
    tile = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "num_stages": 1, "num_warps": 2}
    path.write_text(json.dumps({"triton::scaled_mm": [{**tile, "SCALE": "tensor"}]}))
    with pytest.raises(UserError, match="unknown config key.*'SCALE'; expected BLOCK_M"):
        load_space_file(path)
    path.write_text(json.dumps({"triton::scaled_mm_splitk": [{**tile, "SPLIT_K": 4}]}))
    assert load_space_file(path) == {"triton::scaled_mm_splitk": [{**tile, "SPLIT_K": 4, "GROUP_M": 8}]}
    path.write_text(json.dumps({"triton::nope": [gemv]}))
    with pytest.raises(UserError, match=f"space file {path} names unknown template 'triton::nope'; Triton"):
        load_space_file(path)
    # a template that takes no configs: said, not ignored
    path.write_text(json.dumps({"aten::mm": [{key: gemv[key] for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K",
                                                                         "num_stages", "num_warps")}]}))
    with pytest.raises(UserError, match=f"space file {path} lists configs for aten::mm, which takes none"):
        load_space_file(path)
