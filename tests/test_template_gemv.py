"""triton::gemv: a decode GEMM (M <= 16) as a stream over B, split over programs.

The kernel runs for real under Triton's interpreter against a float64 reference in each of
its forms (FMA, REDUCE_EACH, DOT) for M from 1 to 16 (odd M too), odd N and K, layouts nn
and nt (and A transposed), float16, bfloat16 and float32, mm and addmm, with and without a
split of K; the split's sum is deterministic;
the heuristic's configs fill an H200 and stay in its registers; the CLI tunes it through
the real pipeline on the CPU; with Triton's NVIDIA backend (no GPU needed) its sm_90
binaries are built by the compile pool and read B with 128-bit loads."""

import ast
import json
import os
import re
from pathlib import Path

import pytest

from autotune_cli.hardware.device import DeviceInfo
from autotune_cli.heuristics import gemv, lookup_heuristic
from autotune_cli.problem import make_problem
from autotune_cli.templates import get_template, templates_for
from autotune_cli.templates.params import BadParams, check_winner
from autotune_cli.templates import triton_gemv as gemv_module
from autotune_cli.templates.triton_gemv import k_per_split
from helpers_devices import A100, CPU, H200
from helpers_kernels import check_configs_on_gpu, compile_through_pool, run_kernel

GEMV = "triton::gemv"
in_process = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
                                reason="runs Triton on CPU tensors in-process: needs TRITON_INTERPRET=1")


def tile(block_m, block_n=16, block_k=32, split=1, warps=4, dot=0, each=0, fused=0):
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "SPLIT_K": split,
            "num_stages": 1, "num_warps": warps, "DOT": dot, "REDUCE_EACH": each, "FUSED_REDUCE": fused}


# -- the template and its source --------------------------------------------------------------

def test_offered_for_mm_and_addmm_up_to_m_16():
    template = get_template(GEMV)
    assert template.backend == "triton" and template.ops == ("mm", "addmm") and template.keeps_buffers
    for spec in (dict(m=1), dict(m=8, bias="n"), dict(m=5, layout="tt"), dict(m=16)):
        assert GEMV in {t.uid for t in templates_for(make_problem(n=4096, k=4096, **spec))}
    for spec in (dict(m=17), dict(m=4, batch=2), dict(m=4096)):
        assert GEMV not in {t.uid for t in templates_for(make_problem(n=4096, k=4096, **spec))}


def test_renders_real_triton_with_what_the_problem_fixes():
    template = get_template(GEMV)
    problem = make_problem(m=3, n=100, k=70, dtype="bfloat16", layout="nt", bias="n", device="cpu")
    params = template.full_params(problem, tile(4, split=2))
    assert (params["EVEN_K"], params["EVEN_N"], params["EVEN_M"]) == (False, False, False)
    source = template.render(problem, params)
    kernels = [node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)]
    assert [k.name.split("_")[0] for k in kernels] == ["gemv", "gemv"]  # the slices, then the sum
    assert [a.arg for a in kernels[0].args.args][:6] == ["A", "B", "WS", "M", "N", "K"]
    assert [a.arg for a in kernels[1].args.args][:3] == ["WS", "C", "BIAS"]
    assert k_per_split(70, 2, 32) == 64 and "K_PER_SPLIT: tl.constexpr = 64" in source
    assert "B^T stored [N, K]" in source and "acc = tl.zeros((BLOCK_M, BLOCK_N, BLOCK_K)" in source
    assert "k_ok = offs_k < k_last - k_start" in source and "tl.atomic" not in source
    assert "total += bias.to(tl.float32)" in source and "tl.static_range(SPLIT_K)" in source
    # B [k, n], M a power of two, everything even, no split: one kernel that writes C, no masks
    even = make_problem(m=4, n=4096, k=4096, dtype="float16", layout="nn")
    one = template.render(even, template.full_params(even, tile(4, 128, 32)))
    (kernel,) = [node for node in ast.parse(one).body if isinstance(node, ast.FunctionDef)]
    assert [a.arg for a in kernel.args.args][:4] == ["A", "B", "C", "BIAS"]
    assert "B stored [K, N]" in one and "acc = tl.zeros((BLOCK_M, BLOCK_K, BLOCK_N)" in one
    assert 'a = tl.load(a_ptrs, eviction_policy="evict_last")\n' in one and "WS" not in one
    assert 'b = tl.load(b_ptrs, eviction_policy="evict_first")\n' in one
    plain = template.render(even, template.full_params(even, {**tile(4, 128, 32), "EVICT": 0}))
    assert "a = tl.load(a_ptrs)\n" in plain and "b = tl.load(b_ptrs)\n" in plain and "evict" not in plain
    assert "tl.dot" not in one and "axis=1)\n" not in one.split("for _ in range")[1].split("total")[0]
    # REDUCE_EACH: a [BLOCK_M, BLOCK_N] accumulator, summed over the tile's K at every step
    each = template.render(even, template.full_params(even, tile(4, 4, 1024, each=1)))
    assert "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)" in each
    assert "acc += tl.sum(a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :], axis=1)" in each
    # DOT: C^T's tile from B^T's and A^T's, M padded to 16, stored transposed
    dot_problem = make_problem(m=5, n=4096, k=4096, dtype="bfloat16", layout="nt")
    dot = template.render(dot_problem, template.full_params(dot_problem, tile(16, 32, 256, dot=1)))
    assert "acc = tl.dot(b, a, acc, out_dtype=tl.float32)" in dot and "total = tl.trans(acc)" in dot
    assert 'a = tl.load(a_ptrs, mask=m_ok[None, :], other=0.0, eviction_policy="evict_last")' in dot


def test_one_step_over_k_is_straight_line_code():
    """SPLIT_K 1 and K within one BLOCK_K: no loop whose trip count is known at run time
    only; a longer K, or slices of it, keep the loop."""
    template = get_template(GEMV)
    looped = "for k_start in range(k_first, k_last, BLOCK_K):"
    for k, config, one_step in ((768, tile(1, 2, 1024, each=1), True), (70, tile(2, 16, 128), True),
                                (1100, tile(1, 2, 1024, each=1), False), (768, tile(1, 2, 512, split=2), False)):
        problem = make_problem(m=config["BLOCK_M"], n=50257, k=k, dtype="bfloat16", layout="nt")
        source = template.render(problem, template.full_params(problem, config))
        assert ("tl.static_range(1)" in source, looped in source) == (one_step, not one_step), (k, config)


@pytest.mark.parametrize("config, message", [
    (tile(2), "must be M=3 rounded up to a power of two"),
    (tile(8), "must be M=3 rounded up to a power of two"),
    (tile(4, dot=1), "DOT needs BLOCK_M=16"),
    (tile(16, 8, dot=1), "DOT needs BLOCK_M=16 and BLOCK_N, BLOCK_K >= 16"),
    (tile(4, fused=1), "FUSED_REDUCE sums slices: it needs SPLIT_K > 1"),
    (tile(4, block_n=24), "BLOCK_N=24 must be a power of two"),
    (tile(4, split=0), "SPLIT_K must be at least 1"),
    ({**tile(4, each=1), "FLAT_ROW": 1}, "FLAT_ROW is the per-step sum of one row"),
])
def test_refuses_params_it_cannot_run(config, message):
    with pytest.raises(ValueError, match=message):
        get_template(GEMV).full_params(make_problem(m=3, n=64, k=64), config)


def test_a_flat_row_is_one_row_summed_each_step_along_b_transposed():
    template = get_template(GEMV)
    flat = {**tile(1, each=1), "FLAT_ROW": 1}
    assert template.full_params(make_problem(m=1, n=64, k=64, layout="nt"), flat)["FLAT_ROW"] == 1
    for problem, config in ((make_problem(m=1, n=64, k=64, layout="nn"), flat),  # N contiguous
                            (make_problem(m=1, n=64, k=64, layout="nt"), {**tile(1), "FLAT_ROW": 1})):  # FMA
        with pytest.raises(ValueError, match="FLAT_ROW"):
            template.full_params(problem, config)
    # a --space tile asking for it keeps it where it applies and is left out elsewhere
    space = [{"BLOCK_M": 1, "BLOCK_N": 2, "BLOCK_K": 1024, "num_stages": 1, "num_warps": 2, "REDUCE_EACH": 1,
              "FLAT_ROW": 1}]
    assert [c.get("FLAT_ROW") for c in configs(make_problem(m=1, n=50257, k=768, layout="nt"), space=space)] == [1]
    assert configs(make_problem(m=1, n=50257, k=768, layout="nn"), space=space) == []
    # the eviction hints: on unless a --space tile turns them off
    assert [c.get("EVICT", 1) for c in configs(make_problem(m=1, n=50257, k=768, layout="nt"), space=[
        {**space[0], "EVICT": 0}, {**space[0], "num_warps": 4}])] == [0, 1]


def test_dot_serves_16_bit_dtypes_only():
    with pytest.raises(ValueError, match="DOT serves float16 and bfloat16, not float32"):
        get_template(GEMV).full_params(make_problem(m=3, n=64, k=64, dtype="float32"), tile(16, dot=1))


def test_a_stored_winner_must_be_its_declared_params():
    template = get_template(GEMV)
    problem = make_problem(m=1, n=64, k=64)
    good = template.full_params(problem, tile(1, split=2))
    check_winner(template, problem, good)
    for bad in ({**good, "BLOCK_M": 16}, {**good, "BLOCK_M": 32}, {**good, "DOT": 2},
                {**good, "SPLIT_K": "2"}, {**good, "EVEN_K": 1},
                {**good, "GROUP_M": 8}, {k: v for k, v in good.items() if k != "EVEN_M"}):
        with pytest.raises(BadParams):
            check_winner(template, problem, bad)


# -- the kernel under the interpreter ---------------------------------------------------------

@in_process
@pytest.mark.parametrize("spec, config", [
    (dict(m=1, n=33, k=70, dtype="bfloat16", layout="nt"), tile(1)),                  # decode, odd N and K
    (dict(m=1, n=33, k=70, dtype="bfloat16", layout="nt"), tile(1, split=2)),         # its K split in two
    (dict(m=1, n=64, k=128, dtype="float16", layout="nt"), tile(1, 32, 32, 2)),      # all even
    (dict(m=4, n=45, k=96, dtype="float16", layout="nn", bias="n"), tile(4, split=3)),  # B [k, n], 3 slices
    (dict(m=4, n=32, k=64, dtype="float32", layout="nn"), tile(4, 32, 16)),           # fp32, even
    (dict(m=8, n=17, k=64, dtype="float32", layout="nt", bias="mn"), tile(8, split=2)),
    (dict(m=8, n=40, k=50, dtype="bfloat16", layout="nn"), tile(8, 8, 16)),
    (dict(m=5, n=24, k=40, dtype="float16", layout="tt", bias="n"), tile(8, 8, 16, 2)),  # A stored [k, m]
    (dict(m=3, n=20, k=33, dtype="bfloat16", layout="tn"), tile(4)),
    (dict(m=1, n=33, k=300, dtype="bfloat16", layout="nt"), tile(1, 4, 128, each=1)),  # per-step sums
    (dict(m=1, n=64, k=512, dtype="float16", layout="nt"), tile(1, 2, 256, 2, each=1)),  # even, split
    (dict(m=3, n=70, k=100, dtype="bfloat16", layout="nn", bias="n"), tile(4, 16, 32, each=1)),
    (dict(m=13, n=40, k=70, dtype="float32", layout="tn"), tile(16, 8, 16, 3, each=1)),
    (dict(m=16, n=64, k=128, dtype="bfloat16", layout="nt"), tile(16, 32, 32, dot=1)),  # dot, even
    (dict(m=5, n=70, k=100, dtype="bfloat16", layout="nt", bias="n"), tile(16, 16, 32, dot=1)),
    (dict(m=12, n=45, k=96, dtype="float16", layout="nn", bias="mn"), tile(16, 16, 32, 2, dot=1)),
    (dict(m=1, n=33, k=70, dtype="bfloat16", layout="tt"), tile(16, 16, 32, 2, dot=1)),
    (dict(m=9, n=24, k=64, dtype="float16", layout="tn"), tile(16, 16, 16, dot=1)),
    (dict(m=1, n=70, k=300, dtype="bfloat16", layout="nn", bias="n"), tile(1, 32, 32, 4, each=1, fused=1)),
    (dict(m=6, n=45, k=96, dtype="float16", layout="nt"), tile(16, 16, 32, 3, dot=1, fused=1)),
    (dict(m=2, n=33, k=128, dtype="float32", layout="nn", bias="mn"), tile(2, 16, 16, 2, fused=1)),
    (dict(m=1, n=33, k=300, dtype="bfloat16", layout="nt", bias="n"), {**tile(1, 2, 128, each=1), "FLAT_ROW": 1}),
    (dict(m=1, n=64, k=512, dtype="float16", layout="nt"), {**tile(1, 2, 256, 2, each=1), "FLAT_ROW": 1}),
    (dict(m=1, n=33, k=70, dtype="bfloat16", layout="nt", bias="n"), {**tile(1, 2, 128, each=1), "FLAT_ROW": 1}),
    (dict(m=2, n=45, k=100, dtype="float16", layout="nn"), tile(2, 16, 128)),
], ids=["m1-nt", "m1-nt-split2", "m1-even", "m4-nn-bias-split3", "m4-fp32", "m8-nt-bias-mn",
        "m8-nn-bf16", "m5-tt-bias", "m3-tn", "each-m1-nt", "each-m1-split2", "each-m3-nn-bias",
        "each-m13-fp32-split3", "dot-m16-even", "dot-m5-nt-bias", "dot-m12-nn-bias-mn-split2",
        "dot-m1-tt-split2", "dot-m9-tn", "fused-each-m1-nn-bias-split4", "fused-dot-m6-split3",
        "fused-fma-m2-fp32-bias-mn", "flat-m1-nt-bias", "flat-m1-split2",
        "flat-m1-one-step-bias", "m2-nn-one-step"])
def test_computes_the_product(spec, config, tmp_path):
    problem = make_problem(device="cpu", **spec)
    result = run_kernel(problem, get_template(GEMV), config, tmp_path, seed=2, calls=2)
    assert len(result.verdicts) == 2 and result.correct, result.reasons
    assert result.discriminating
    if config["SPLIT_K"] > 1:  # the workspace was made once and kept
        ((workspace, counters),) = result.run.workspaces.values()
        assert tuple(workspace.shape) == (config["SPLIT_K"], problem.m, problem.n)
        if config.get("FUSED_REDUCE"):  # one per column block, left at zero by every call
            assert tuple(counters.shape) == (-(-problem.n // config["BLOCK_N"]),) and not counters.any()
        else:
            assert counters is None


@in_process
@pytest.mark.parametrize("spec, config", [
    (dict(m=1, n=33, k=70, dtype="float32", layout="nt"), tile(1)),                       # one launch, no bias
    (dict(m=4, n=45, k=96, dtype="float32", layout="nn", bias="n"), tile(4, split=3)),     # two launches
    (dict(m=2, n=33, k=128, dtype="float32", layout="nt", bias="mn"), tile(2, 16, 16, 2, fused=1)),
    (dict(m=3, n=40, k=64, dtype="float32", layout="nt"), tile(4, 16, 16, 4, fused=1)),    # fused, no bias
], ids=["one", "split-bias-n", "fused-bias-mn", "fused-no-bias"])
def test_bound_launches_stay_right_on_new_operands(spec, config, tmp_path):
    """The API binds a decode kernel once (its own bind: the workspace and counters are the
    runnable's, not the call's) and calls it with new operands of the same layout: right
    every time, and the fused form's counters left at zero."""
    import torch

    from autotune_cli.runner.verify import make_operands
    from autotune_cli.templates.base import bound

    problem = make_problem(device="cpu", **spec)
    template = get_template(GEMV)
    run = template.build(problem, template.full_params(problem, config), str(tmp_path))
    sample = make_operands(problem, seed=0, device="cpu")
    assert run.bind(sample) is not None  # its own bound launch, not an Operands per call
    go = bound(run, sample)
    for seed in range(1, 4):
        ops = make_operands(problem, seed=seed, device="cpu")
        ops.out.fill_(float("nan"))
        go(ops.a, ops.b, ops.out, ops.bias)
        want = ops.a.double() @ ops.b.double()
        if ops.bias is not None:
            want = want + ops.bias.double()
        torch.testing.assert_close(ops.out.double(), want, rtol=1e-4, atol=1e-4)
    for _workspace, counters in run.workspaces.values():
        assert counters is None or not counters.any()


@in_process
def test_the_split_sum_is_deterministic(tmp_path):
    import torch

    from autotune_cli.runner.verify import make_operands

    problem = make_problem(m=2, n=24, k=128, dtype="float32", layout="nt", device="cpu")
    template = get_template(GEMV)
    params = template.full_params(problem, tile(2, 8, 16, 4))
    run = template.build(problem, params, str(tmp_path))
    ops = make_operands(problem, seed=5, device="cpu")
    run(ops)
    first = ops.out.clone()
    ops.out.fill_(float("nan"))
    run(ops)
    assert torch.equal(first, ops.out)
    # the one-launch sum adds the same planes in the same order: the same bits
    fused = template.build(problem, template.full_params(problem, {**tile(2, 8, 16, 4), "FUSED_REDUCE": 1}),
                           str(tmp_path))
    ops.out.fill_(float("nan"))
    fused(ops)
    assert torch.equal(first, ops.out)


# -- the heuristic ----------------------------------------------------------------------------

def configs(problem, search="default", space=None):
    return list(lookup_heuristic(GEMV, problem.device, problem.op).get_configs(problem, search, space))


def test_heuristics_registered_for_cuda_and_cpu():
    assert isinstance(lookup_heuristic(GEMV, "cuda", "mm"), gemv.GemvCuda)
    assert isinstance(lookup_heuristic(GEMV, "cpu", "addmm"), gemv.GemvCpu)


@pytest.mark.parametrize("m", [1, 2, 4, 5, 8, 16])
@pytest.mark.parametrize("layout", ["nt", "nn"])
@pytest.mark.parametrize("n, k", [(4096, 4096), (14336, 4096), (4096, 14336)])
def test_default_configs_fill_an_h200_and_its_registers(m, layout, n, k):
    problem = make_problem(m=m, n=n, k=k, dtype="bfloat16", layout=layout)
    found = configs(problem)
    assert 2 <= len(found) <= 10 and len({json.dumps(c, sort_keys=True) for c in found}) == len(found)
    template = get_template(GEMV)
    for config in found:
        tuned = {"DOT", "REDUCE_EACH", "FUSED_REDUCE"} | ({"FLAT_ROW"} if config.get("FLAT_ROW") else set())
        assert set(config) == set(template.config_keys) | tuned  # EVICT, PDL: default
        assert config["FUSED_REDUCE"] == 0 or config["SPLIT_K"] > 1
        assert config["BLOCK_M"] == (16 if config["DOT"] else {1: 1, 2: 2, 4: 4, 5: 8, 8: 8, 16: 16}[m])
        # the CUDA cores' M multiply-adds per element of B: DOT alone past a few rows
        assert config["DOT"] or m <= gemv.CUDA_CORE_MAX_M
        programs = -(-problem.n // config["BLOCK_N"]) * config["SPLIT_K"]
        # the CUDA-core tiles: four per SM, or as many as slices at least BLOCK_K long make;
        # a split only where needed (DOT's are split where the list says)
        if not config["DOT"]:
            assert programs >= gemv.TARGET_PROGRAMS or not gemv.slice_fits(problem, config["BLOCK_K"],
                                                                           2 * config["SPLIT_K"])
        assert config["SPLIT_K"] == 1 or programs < 2 * gemv.TARGET_PROGRAMS
        if not config["DOT"]:
            form = gemv.EACH if config["REDUCE_EACH"] else gemv.FMA
            per_thread = config["BLOCK_M"] * config["BLOCK_N"] * config["BLOCK_K"] / (32 * config["num_warps"])
            assert per_thread <= gemv.PER_THREAD[form]
        assert problem.k // config["SPLIT_K"] >= config["BLOCK_K"]  # no slice shorter than a step
        # each a winner the cache would take back: declared and derived
        check_winner(template, problem, template.full_params(problem, config))
    # the CUDA-core tiles run long along B's contiguous dimension: K for B^T [n, k], N for B [k, n]
    cores = [c for c in found if not c["DOT"]]
    assert all((c["BLOCK_K"] > c["BLOCK_N"]) == (layout == "nt") for c in cores)
    assert bool(cores) == (m <= gemv.CUDA_CORE_MAX_M)


@pytest.mark.parametrize("k", [768, 4096])
def test_a_short_k_on_b_transposed_adds_the_short_k_tile(k):
    """Up to SHORT_K on B^T at a few rows, the list gains DOT 64x128 with 4 stages (whole
    128-long steps of a 768-long K), and at one row the one-step FLAT_ROW tile (two rows of B
    a program, four warps); a long K keeps the default tiles."""
    short = {"BLOCK_N": 64, "BLOCK_K": 128, "num_stages": 4, "num_warps": 4, "DOT": 1, "SPLIT_K": 1}
    flat = {"BLOCK_N": 2, "BLOCK_K": 1024, "num_warps": 4, "REDUCE_EACH": 1, "SPLIT_K": 1, "FLAT_ROW": 1}
    for m in (1, 4):
        found = configs(make_problem(m=m, n=50257, k=k, dtype="bfloat16", layout="nt"))
        matches = [c for c in found if all(c[key] == value for key, value in short.items())]
        flats = [c for c in found if all(c.get(key) == value for key, value in flat.items())]
        assert len(matches) == (k <= gemv.SHORT_K) and len(found) <= 10 + len(gemv.SHORT_K_TILES) * (k <= gemv.SHORT_K)
        assert len(flats) == (k <= gemv.SHORT_K and m == 1)
        assert all(c["num_warps"] == 16 for c in found if c.get("FLAT_ROW") and c not in flats)
        assert not any(c.get("FLAT_ROW") for c in found) if m > 1 else any(c.get("FLAT_ROW") for c in found)
    wide = configs(make_problem(m=8, n=50257, k=768, dtype="bfloat16", layout="nt"))  # DOT's own list
    assert len(wide) <= 8 and wide == [c for c in wide if c["DOT"]]


def test_float32_takes_the_cuda_core_forms_at_every_m():
    for m in (1, 8, 16):
        found = configs(make_problem(m=m, n=4096, k=4096, dtype="float32", layout="nt"))
        assert found and not any(c["DOT"] for c in found)


def test_splits_come_from_the_column_blocks():
    wide = make_problem(m=1, n=65536, k=4096, dtype="bfloat16", layout="nt")  # columns alone fill it
    assert {c["SPLIT_K"] for c in configs(wide)} == {1}
    some = make_problem(m=1, n=4096, k=4096, dtype="bfloat16", layout="nn")  # 32 blocks of 128: 16 slices
    assert {c["SPLIT_K"] for c in configs(some) if c["BLOCK_N"] == 128} == {16}
    # DOT's tiles split only where the list says so, summing in the one launch (a second
    # launch costs more than its programs gain)
    decode = make_problem(m=8, n=4096, k=4096, dtype="bfloat16", layout="nt")
    split = [c for c in configs(decode) if c["SPLIT_K"] > 1]
    assert len(split) == 1 and all(c["FUSED_REDUCE"] for c in split)  # and in one launch
    short = make_problem(m=1, n=4096, k=256, dtype="bfloat16", layout="nn")  # no slice below BLOCK_K
    assert all(256 // c["SPLIT_K"] >= c["BLOCK_K"] for c in configs(short))
    assert gemv.split_for(short, 64, 32) == 8  # 64 blocks: 8 slices of 32 make 512 programs


def test_block_k_divides_k_where_a_halving_or_two_makes_it():
    long_k = make_problem(m=1, n=4096, k=14336, dtype="bfloat16", layout="nt")  # 7 x 2048
    assert all(14336 % c["BLOCK_K"] == 0 for c in configs(long_k))
    odd = make_problem(m=1, n=4096, k=4100, dtype="bfloat16", layout="nt")  # no halving helps: kept
    assert max(c["BLOCK_K"] for c in configs(odd)) == 4096


def test_exhaustive_holds_the_default_list_and_more():
    for m in (1, 8):
        problem = make_problem(m=m, n=4096, k=4096, dtype="bfloat16", layout="nt")
        default = configs(problem)
        exhaustive = configs(problem, "exhaustive")
        assert all(c in exhaustive for c in default) and len(exhaustive) > 5 * len(default)
        assert exhaustive[:2] == default[:2]  # the default tiles lead
        assert len(exhaustive) <= gemv.MAX_EXHAUSTIVE
        assert all(c["DOT"] for c in exhaustive) == (m > gemv.CUDA_CORE_MAX_M)
    # the tile model (dot tiles) does not rank them: every one is timed
    from autotune_cli.candidates.choices import KernelTemplateChoice
    from autotune_cli.search.exhaustive import _modelled

    assert not _modelled(KernelTemplateChoice.make(get_template(GEMV), problem, exhaustive[0]))


def test_a_user_space_keeps_what_the_kernel_can_take():
    problem = make_problem(m=2, n=1000, k=512, dtype="float16", layout="nt")
    space = [{"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 64, "GROUP_M": 8, "num_stages": 3, "num_warps": 4},
             {"BLOCK_M": 64, "BLOCK_N": 512, "BLOCK_K": 64, "GROUP_M": 8, "num_stages": 3, "num_warps": 4},
             {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 128, "GROUP_M": 8, "num_stages": 1, "num_warps": 4,
              "SPLIT_K": 2},
             {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 128, "num_stages": 3, "num_warps": 4, "DOT": 1}]
    found = configs(problem, space=space)
    # 32 column blocks: 8 slices make 256 programs (16 would leave slices under BLOCK_K);
    # BLOCK_N 512 is more than the kernel takes; a given SPLIT_K is kept; DOT where asked
    assert [(c["BLOCK_N"], c["BLOCK_K"], c["SPLIT_K"], c["num_stages"], c["DOT"]) for c in found] == [
        (32, 64, 8, 3, 0), (16, 128, 2, 1, 0), (32, 128, 4, 3, 1)]
    assert [c["BLOCK_M"] for c in found] == [2, 2, 16]


def test_cpu_list_is_two_small_tiles():
    for m in (1, 16):
        found = configs(make_problem(m=m, n=33, k=70, dtype="bfloat16", layout="nt", device="cpu"))
        assert [(c["BLOCK_N"], c["BLOCK_K"], c["SPLIT_K"]) for c in found] == [(16, 32, 1), (16, 32, 2)]


# -- through the CLI, on the CPU --------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["--m", 1, "--n", 33, "--k", 70, "--dtype", "bfloat16", "--layout", "nt"],
    ["--m", 4, "--n", 20, "--k", 96, "--dtype", "float16", "--layout", "nn", "--bias"],
], ids=["1x33x70-bf16-nt", "4x20x96-fp16-nn-bias"])
def test_cli_tunes_it_on_the_cpu(cli, cache_dir, args):
    code, out, err = cli("mm", "--device", "cpu", "--json", "--templates", GEMV, *args)
    assert code == 0, err
    doc = json.loads(out)
    candidates = doc["candidates"]
    assert len(candidates) == 2 and {c["uid"] for c in candidates} == {GEMV}
    assert all(c["status"] == "ok" and c["max_rel_error"] is not None for c in candidates), candidates
    assert doc["winner"]["uid"] == GEMV
    assert doc["fingerprint"]["templates"] == {GEMV: get_template(GEMV).source_hash()}


def test_a_space_file_sets_the_eviction_hints_and_the_flat_row(cli, cache_dir, tmp_path):
    """EVICT and FLAT_ROW listed under the template's uid in a --space file reach the tuned
    kernel: the winner carries both, run and verified under the interpreter."""
    space = tmp_path / "space.json"
    space.write_text(json.dumps({GEMV: [{"BLOCK_M": 1, "BLOCK_N": 2, "BLOCK_K": 128, "num_warps": 2, "num_stages": 1,
                                         "REDUCE_EACH": 1, "FLAT_ROW": 1, "EVICT": 0}]}))
    code, out, err = cli("mm", "--device", "cpu", "--json", "--templates", GEMV, "--space", str(space),
                         "--m", 1, "--n", 33, "--k", 70, "--dtype", "bfloat16", "--layout", "nt")
    assert code == 0, err
    doc = json.loads(out)
    assert [c["status"] for c in doc["candidates"]] == ["ok"]
    params = doc["winner"]["params"]
    assert (params["EVICT"], params["FLAT_ROW"], params["BLOCK_N"], params["BLOCK_K"]) == (0, 1, 2, 128)


def test_a_space_config_the_template_refuses_is_one_line_naming_the_file(cli, cache_dir, tmp_path):
    """DOT on a block under 16 columns can run on no problem: exit 2, one line that names the
    file and says why, not a traceback."""
    space = tmp_path / "space.json"
    space.write_text(json.dumps({GEMV: [{"BLOCK_M": 16, "BLOCK_N": 8, "BLOCK_K": 32, "num_warps": 4,
                                         "num_stages": 1, "DOT": 1}]}))
    code, out, err = cli("mm", "--device", "cpu", "--templates", GEMV, "--space", str(space),
                         "--m", 1, "--n", 64, "--k", 64, "--layout", "nt")
    assert code == 2 and out == "", err
    assert err.startswith(f"autotune: error: space file {space}: {GEMV}: DOT needs") and "BN8" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_space_configs_a_problem_cannot_take_are_said_not_dropped(cli, cache_dir, tmp_path):
    """A FLAT_ROW tile at four rows gives no config: a note names the file and how many of
    the configs listed under the uid were left out; where none is left, the error says so."""
    from conftest import messages

    tile = {"BLOCK_M": 1, "BLOCK_N": 16, "BLOCK_K": 32, "num_stages": 1, "num_warps": 4}
    args = ("mm", "--device", "cpu", "--templates", GEMV, "--m", 4, "--n", 64, "--k", 64, "--layout", "nt")
    space = tmp_path / "space.json"
    space.write_text(json.dumps({GEMV: [{**tile, "REDUCE_EACH": 1, "FLAT_ROW": 1}, tile]}))
    code, out, err = cli(*args, "--json", "--space", str(space))
    assert code == 0, err
    assert len(json.loads(out)["candidates"]) == 1
    assert f"note: {space}: 1 of 2 configs listed under {GEMV} left out for mm 4x64x64 float16 nt (a form it " \
           "cannot take, or the same config as another once the blocks fit it)" in messages(err), err
    only = tmp_path / "only.json"
    only.write_text(json.dumps({GEMV: [{**tile, "REDUCE_EACH": 1, "FLAT_ROW": 1}]}))
    code, out, err = cli(*args, "--space", str(only))
    assert code == 2 and f"autotune: error: no candidates for mm 4x64x64 float16 nt: none of the configs {only} " \
        "lists applies to it" in err.splitlines(), err


def test_cli_refuses_it_past_m_16(cli, cache_dir):
    code, out, err = cli("mm", "--device", "cpu", "--json", "--templates", GEMV, "--m", 17, "--n", 64, "--k", 64)
    assert code == 2 and "no candidates" in err and out == ""


# -- sm_90 binaries, compiled without a GPU ---------------------------------------------------

def _ptxas_missing() -> bool:
    try:
        import triton
    except ImportError:
        return True
    return not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists()


@pytest.mark.skipif(_ptxas_missing(), reason="needs Triton's NVIDIA backend (its bundled ptxas)")
def test_compiles_for_sm90_with_wide_loads(tmp_path, monkeypatch):
    """The compile pool builds the decode cases' kernels for a described H200 (a per-step
    sum over K for M = 1, the matrix units for M = 8); B^T is read with 128-bit loads, or
    16-byte asynchronous copies into shared memory where the loop is pipelined."""
    triton_cache = tmp_path / "triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(triton_cache))
    described = DeviceInfo(device_type="cuda", name="NVIDIA H200 (described, not present)", capability="9.0",
                           sm_count=132, smem_per_block=232448, l2_bytes=50 << 20, runtime="12.8")
    cases = []
    for m, form in ((1, "REDUCE_EACH"), (8, "DOT")):
        problem = make_problem(m=m, n=4096, k=4096, dtype="bfloat16", layout="nt")
        config = next(c for c in configs(problem) if c[form] and c["num_stages"] == (1 if m == 1 else 3))
        cases.append((GEMV, problem, config))
    pdl_problem = make_problem(m=4, n=4096, k=4096, dtype="bfloat16", layout="nt")
    cases.append((GEMV, pdl_problem, {**tile(4, split=4), "PDL": 1}))  # a --space choice
    answers, _ = compile_through_pool(described, cases, tmp_path / "kernels", by_index=True)
    assert all(payload["ok"] for payload in answers.values()), answers
    ptx = [p.read_text() for p in triton_cache.rglob("gemv_*.ptx") if "reduce" not in p.name]
    assert len(ptx) == 3
    pdl = [text for text in ptx if "griddepcontrol" in text]
    # as a PDL: the wait before the first load, the early signal to the next kernel
    assert len(pdl) == 1 and "griddepcontrol.wait" in pdl[0] and "griddepcontrol.launch_dependents" in pdl[0]
    ptx = [text for text in ptx if "griddepcontrol" not in text]
    each = [text for text in ptx if "mma" not in text]
    dot = [text for text in ptx if "mma" in text]
    # 16-byte loads, B's marked evict_first (EVICT): ld.global.L1::evict_first.L2::cache_hint.v4.b32
    assert len(each) == 1 and re.search(r"ld\.global\.L1::evict_first[\w.:]*\.v4\.b32", each[0])
    assert len(dot) == 1 and ("cp.async.cg.shared.global" in dot[0] or "cp.async.bulk" in dot[0])


def _loops_back(ptx: str) -> bool:
    """Whether a branch of the PTX goes back to a label above it (a loop)."""
    lines = ptx.splitlines()
    labels = {found.group(1): i for i, line in enumerate(lines) if (found := re.match(r"(\$\w+):", line))}
    return any(labels.get(target, len(lines)) < i for i, line in enumerate(lines)
               for target in re.findall(r"\bbra(?:\.uni)?\s+(\$\w+);", line))


@pytest.mark.skipif(_ptxas_missing(), reason="needs Triton's NVIDIA backend (its bundled ptxas)")
def test_one_step_tiles_compile_for_sm90_as_straight_line_code(tmp_path, monkeypatch):
    """A one-row decode with a short K (a GPT-2 head, 1x50257x768): the one-step tile and its
    FLAT_ROW form build for a described H200 with 128-bit loads of B and not one branch (a
    loop over K <= BLOCK_K compiled to a guard around its body); a K two steps long (1100)
    keeps its loop."""
    described = DeviceInfo(device_type="cuda", name="NVIDIA H200 (described, not present)", capability="9.0",
                           sm_count=132, smem_per_block=232448, l2_bytes=50 << 20, runtime="12.8")
    one_step = tile(1, 2, 1024, warps=4, each=1)
    for k, configs_, loops in ((768, [one_step, {**one_step, "FLAT_ROW": 1}], False), (1100, [one_step], True)):
        triton_cache = tmp_path / f"triton{k}"
        monkeypatch.setenv("TRITON_CACHE_DIR", str(triton_cache))
        problem = make_problem(m=1, n=50257, k=k, dtype="bfloat16", layout="nt")
        cases = [(GEMV, problem, c) for c in configs_]
        answers, _ = compile_through_pool(described, cases, tmp_path / f"kernels{k}", by_index=True)
        assert all(payload["ok"] for payload in answers.values()), answers
        ptx = [p.read_text() for p in triton_cache.rglob("gemv_*.ptx")]
        assert len(ptx) == len(configs_)
        for text in ptx:
            assert _loops_back(text) == loops, k
            assert loops or "bra" not in text, "a branch around the one step"  # straight-line code
            assert loops or re.search(r"ld\.global\.L1::evict_first[\w.:]*\.v4\.b32", text)  # B: 16 bytes a load


def test_programmatic_dependent_launch_on_hopper_only(monkeypatch):
    """PDL=1 (a --space choice; the shipped lists leave it off) renders the wait for the
    kernel before (ahead of every load) and the early signal to the next, in each kernel of
    a split; it is fitted away before Hopper, on AMD, on the CPU and with a Triton older
    than 3.4, where the config runs as a plain launch; the interpreter refuses it."""
    template = get_template(GEMV)
    problem = make_problem(m=4, n=4096, k=4096, dtype="bfloat16", layout="nt", device="cuda")
    source = template.render(problem, template.full_params(problem, {**tile(4, split=4), "PDL": 1}))
    ast.parse(source)
    assert source.count("tl.extra.cuda.gdc_wait()") == 2 == source.count("tl.extra.cuda.gdc_launch_dependents()")
    body = source.split("def gemv_")[1]
    assert body.index("gdc_wait()") < body.index("tl.load(")
    assert "gdc_wait" not in template.render(problem, template.full_params(problem, tile(4, split=4)))
    config = {**tile(4), "PDL": 1}
    mi300 = DeviceInfo(device_type="cuda", name="AMD Instinct MI300X", capability="9.4", sm_count=304)
    assert template.fit_to_device(config, H200)["PDL"] == 1
    for device in (A100, mi300, CPU):
        assert template.fit_to_device(config, device) == {**config, "PDL": 0}
    monkeypatch.setattr(gemv_module, "installed_triton_version", lambda: (3, 3))
    assert template.fit_to_device(config, H200)["PDL"] == 0
    space = configs(problem, space=[{**tile(4), "PDL": 1}, tile(4)])
    assert [c.get("PDL", 0) for c in space] == [1, 0]
    assert not any(c.get("PDL") for c in configs(problem))
    with pytest.raises(ValueError, match="PDL is a GPU launch"):
        template.full_params(make_problem(m=4, n=64, k=64, device="cpu"), config)


# -- on a GPU ---------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("spec", [
    dict(m=1, n=4096, k=4096, dtype="bfloat16", layout="nt"),
    dict(m=13, n=333, k=1030, dtype="bfloat16", layout="tt", bias="mn"),
    dict(m=3, n=1000, k=777, dtype="float32", layout="nn", bias="n"),
], ids=["1x4096x4096-nt", "13x333x1030-tt-bias-mn", "3x1000x777-fp32-nn-bias"])
def test_gpu_every_default_config_verifies(spec, tmp_path):
    """Each default config of the heuristic compiles for the GPU and is right, twice (the
    split's workspace reused)."""
    problem = make_problem(device="cuda", **spec)
    check_configs_on_gpu(problem, get_template(GEMV), configs(problem), tmp_path)
