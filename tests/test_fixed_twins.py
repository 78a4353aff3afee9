"""A contender's FIXED_NK twin: triton::mm with the problem's N and K written into its source,
timed after the first timing for the best contenders alone, checked like every candidate."""

import json
import tempfile

import pytest

from autotune_cli.problem import make_problem
from autotune_cli.runner.verify import check, make_operands, reference
from autotune_cli.store.results import params_str
from autotune_cli.settings import MeasurePolicy, Switches, TuneSettings
from autotune_cli.templates import get_template

TILE = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 1, "num_warps": 4}


@pytest.mark.parametrize("op", ["mm", "addmm", "bmm"])
def test_the_twin_writes_n_and_k_in_and_computes_the_same(op):
    problem = make_problem(m=33, n=47, k=72, dtype="float32", layout="nt", device="cpu",
                           bias="n" if op == "addmm" else None, batch=2 if op == "bmm" else None)
    template = get_template("triton::bmm" if op == "bmm" else "triton::mm")
    twin = template.fixed_twin(TILE)
    assert twin == {**TILE, "FIXED_NK": 1} and template.fixed_twin(twin) is None
    plain, fixed = template.full_params(problem, TILE), template.full_params(problem, twin)
    assert plain["FIXED_NK"] == 0 and fixed["FIXED_NK"] == 1
    assert params_str(fixed).endswith(" fixed1") and "fixed" not in params_str(plain)  # the winner's line
    assert "\n    K: tl.constexpr = 72\n" in template.render(problem, fixed)
    assert "\n    K: tl.constexpr" not in template.render(problem, plain)
    ops = make_operands(problem, 3, "cpu")
    ref = reference(problem, ops)
    for params in (plain, fixed):
        ops.out.fill_(float("nan"))
        template.build(problem, params, tempfile.mkdtemp())(ops)
        assert check(problem, ops.out, ref).ok


def test_one_twin_serves_operands_of_other_strides():
    """A twin writes N and K in, never the strides: one built kernel serves an A with a
    wider pitch (a slice of a larger tensor) as well as a packed one."""
    import torch

    from autotune_cli.templates.base import Operands

    problem = make_problem(m=33, n=47, k=72, dtype="float32", layout="nt", device="cpu")
    template = get_template("triton::mm")
    kernel = template.build(problem, template.full_params(problem, template.fixed_twin(TILE)), tempfile.mkdtemp())
    ops = make_operands(problem, 3, "cpu")
    wide = torch.randn(problem.m, problem.k + 24)[:, 5:5 + problem.k]  # pitch 96, not K
    for a in (ops.a, wide):
        out = torch.full((problem.m, problem.n), float("nan"))
        kernel(Operands(a, ops.b, out, None))
        torch.testing.assert_close(out, a @ ops.b, rtol=1e-4, atol=1e-4)


def test_the_padded_template_has_no_twin():
    """Its B wraps at the padded width and its stores run to the output's pitch."""
    assert get_template("triton::mm_padded").fixed_twin(TILE) is None
    assert get_template("aten::mm").fixed_twin({}) is None


def test_a_tune_times_the_twins_of_its_best_contenders(tmp_path):
    """The real pipeline on the interpreter: the twin of the best triton::mm result is
    compiled, verified and timed beside the rest, and may win like any other."""
    from autotune_cli.tune.tuner import Tuner

    measure = MeasurePolicy.for_device("cpu", Switches(), fixed_twins=1)
    assert MeasurePolicy.for_device("cpu", Switches()).fixed_twins == 0
    assert MeasurePolicy.for_device("cuda", Switches()).fixed_twins == 2
    settings = TuneSettings(device="cpu", cache_dir=tmp_path, templates=("triton::mm",), workers=1,
                            measure=measure)
    problem = make_problem(m=16, n=40, k=32, device="cpu", dtype="float32", layout="nt")
    with Tuner(settings) as tuner:
        outcome = tuner.tune(problem)
    candidates = outcome.entry.to_dict()["candidates"]
    fixed = [c for c in candidates if c["params"].get("FIXED_NK") == 1]
    plain = [c for c in candidates if c["uid"] == "triton::mm" and c["params"]["FIXED_NK"] == 0]
    assert len(fixed) == 1 and fixed[0]["status"] == "ok" and plain
    def tile(c):
        return {k: v for k, v in c["params"].items() if k != "FIXED_NK"}

    assert tile(fixed[0]) in [tile(c) for c in plain if c["status"] == "ok"]


def test_a_space_tune_with_twins_is_a_hit_and_a_resume_keeps_its_twin(tmp_path):
    """Twins are results of the listed configs: a --space entry holding them still answers
    that space (a hit, not a re-tune), and a tune resumed after its twin round keeps them."""
    from dataclasses import replace

    from autotune_cli.store.cache import Cache
    from autotune_cli.tune.tuner import Tuner

    space = tmp_path / "space.json"
    space.write_text(json.dumps([TILE, {**TILE, "BLOCK_M": 32}]))
    settings = TuneSettings(device="cpu", cache_dir=tmp_path / "c", templates=("triton::mm",), workers=1,
                            measure=MeasurePolicy.for_device("cpu", Switches(), fixed_twins=1),
                            space_file=str(space))
    problem = make_problem(m=16, n=40, k=32, device="cpu", dtype="float32", layout="nt")
    with Tuner(settings) as tuner:
        first = tuner.tune(problem)
        assert sum(c.params["FIXED_NK"] for c in first.entry.candidates) == 1
        assert tuner.tune(problem).from_cache
    cache = Cache(tmp_path / "c")
    cache.put(first.key, replace(cache.load()[first.key], winner=None, partial=True))  # stopped in the re-time
    with Tuner(settings) as tuner:
        again = tuner.tune(problem)
    assert not again.from_cache
    assert sorted(c.identity for c in again.entry.candidates) == sorted(c.identity for c in first.entry.candidates)


def test_the_exhaustive_search_times_twins_too(tmp_path):
    from autotune_cli.tune.tuner import Tuner

    settings = TuneSettings(device="cpu", cache_dir=tmp_path, templates=("triton::mm",), workers=1,
                            measure=MeasurePolicy.for_device("cpu", Switches(), fixed_twins=1), search="exhaustive",
                            interpreter_budget_s=1e9)
    problem = make_problem(m=16, n=40, k=32, device="cpu", dtype="float32", layout="nt")
    with Tuner(settings) as tuner:
        outcome = tuner.tune(problem)
    fixed = [c for c in outcome.entry.candidates if c.params.get("FIXED_NK") == 1]
    assert len(fixed) == 1 and fixed[0].ok
