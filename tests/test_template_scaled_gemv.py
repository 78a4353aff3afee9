"""triton::scaled_gemv: triton::gemv's decode stream over B for torch._scaled_mm's float8
operands. Under Triton's interpreter each form (FMA, REDUCE_EACH, DOT with and without fast
accumulation) and each way of summing a split of K (one kernel, a second kernel, the fused
last slice) runs against the float64 product of the dequantized operands, tensorwise,
rowwise and blockwise (scaled at every step), with and without the bias; the source says
which scales it applies; its configs are float8's own; the CLI tunes it on the CPU. A GPU
test runs every default config."""

import ast
import json

import pytest

from autotune_cli.heuristics import lookup_heuristic
from autotune_cli.heuristics.gemv import FP8_DOT_LEAST_K, FP8_DOT_MOST_K
from autotune_cli.problem import make_problem
from autotune_cli.templates import get_template, templates_for
from helpers_kernels import run_kernel, check_configs_on_gpu
from helpers_devices import H200, A100, CPU

UID = "triton::scaled_gemv"


def fp8(scale="row", device="cpu", **kwargs):
    args = dict(m=5, n=48, k=256, dtype="float8_e4m3fn", scale=scale, device=device)
    args.update(kwargs)
    return make_problem(**args)


def tile(block_m, split=1, dot=0, each=0, fused=0, block_n=16, block_k=32):
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "SPLIT_K": split,
            "num_stages": 1, "num_warps": 4, "DOT": dot, "REDUCE_EACH": each, "FUSED_REDUCE": fused}


def test_offered_for_decode_shapes_of_every_scale_kind():
    assert UID in {t.uid for t in templates_for(fp8(m=16))}
    assert UID in {t.uid for t in templates_for(fp8("tensor", m=1))}
    assert UID in {t.uid for t in templates_for(fp8("block", m=8, n=128, k=256))}
    assert UID not in {t.uid for t in templates_for(fp8(m=17))}
    assert UID not in {t.uid for t in templates_for(make_problem(m=8, n=48, k=256, dtype="bfloat16"))}
    template = get_template(UID)
    assert template.unavailable_reason(fp8(device="cuda"), H200) is None
    assert template.unavailable_reason(fp8(), CPU) is None
    assert "compute capability >= 8.9" in template.unavailable_reason(fp8(device="cuda"), A100)


@pytest.mark.parametrize("scale, bias, m, k, config", [
    ("row", "n", 5, 256, tile(8)),                                   # FMA, one kernel
    ("tensor", None, 3, 200, tile(4, split=2, each=1)),              # per-step sums, the second kernel
    ("row", None, 8, 256, tile(8, split=2, fused=1)),                # the fused last slice
    ("tensor", "n", 16, 256, tile(16, dot=1)),                       # DOT, M = BLOCK_M
    ("row", "n", 9, 96, tile(16, split=2, dot=1, fused=1)),          # DOT, rows past M, a short slice
], ids=["fma-row-bias", "each-split-tensor", "fused-row", "dot-tensor-bias", "dot-fused-row-bias"])
def test_computes_the_scaled_product(scale, bias, m, k, config, tmp_path):
    problem = fp8(scale, m=m, k=k, bias=bias)
    template = get_template(UID)
    params = template.full_params(problem, config)
    assert (params["SCALE"], params["OUT_DTYPE"], params["FAST_ACCUM"]) == (scale, "bfloat16", False)
    result = run_kernel(problem, template, config, tmp_path, calls=2)  # workspace, counters reused
    assert result.correct, result.reasons
    assert result.discriminating
    if config["FUSED_REDUCE"]:
        (_, counters), = result.run.workspaces.values()
        assert int(counters.abs().sum()) == 0


@pytest.mark.parametrize("bias, m, n, k, config", [
    ("n", 5, 256, 256, tile(8, each=1)),                              # per-step sums, one kernel
    (None, 3, 128, 384, tile(4, split=2, each=1)),                    # the second kernel sums
    ("n", 16, 256, 256, tile(16, dot=1)),                             # DOT, M = BLOCK_M
    (None, 9, 256, 512, tile(16, split=2, dot=1, fused=1)),           # the fused last slice
    ("n", 9, 256, 512, tile(16, split=3, dot=1, block_k=64)),         # uneven slices, 64-long steps
    (None, 2, 128, 256, tile(2, each=1, block_n=8, block_k=128)),     # a step a whole block
], ids=["each-bias", "each-split", "dot-bias", "dot-fused", "dot-split3-bias", "each-bk128"])
def test_computes_the_blockwise_scaled_product(bias, m, n, k, config, tmp_path):
    """Each step's sum times A's scale for its block of K (per row) and B's (per 128
    columns): against the float64 product of the blockwise-dequantized operands."""
    problem = fp8("block", m=m, n=n, k=k, bias=bias)
    result = run_kernel(problem, get_template(UID), config, tmp_path, calls=2)
    assert result.correct, result.reasons
    assert result.discriminating


@pytest.mark.parametrize("config, message", [
    (tile(8), "blockwise scales need a form that sums each step"),        # FMA
    (tile(8, each=1, block_k=256), "BLOCK_K must divide 128"),
])
def test_blockwise_scales_refuse_tiles_that_cannot_scale_each_step(config, message):
    with pytest.raises(ValueError, match=message):
        get_template(UID).full_params(fp8("block", m=5, n=256, k=512), config)


def test_the_source_applies_the_scales_once_where_c_is_written():
    template = get_template(UID)
    row = template.render(fp8("row"), template.full_params(fp8("row"), tile(8, split=2)))
    ast.parse(row)
    # the partial kernel writes float32 planes; the second kernel scales, once per element
    assert row.count("SCALE_A + row * stride_scale_a") == 1 and row.count("SCALE_B + col * stride_scale_b") == 1
    tensor = template.render(fp8("tensor"), template.full_params(fp8("tensor"), tile(8)))
    assert "tl.load(SCALE_A) * tl.load(SCALE_B)" in tensor and "stride_scale_a" in tensor
    dot = fp8("row", m=16)
    slow = template.render(dot, template.full_params(dot, tile(16, dot=1)))
    fast_problem = fp8("row", m=16, fast_accum=True)
    fast = template.render(fast_problem, template.full_params(fast_problem, tile(16, dot=1)))
    assert "acc += tl.dot(b, a, out_dtype=tl.float32)" in slow and "acc += tl.dot" not in fast
    # blockwise: in the loop, the first kernel of a split takes the scales, the second none
    block = fp8("block", m=5, n=256, k=512)
    split = template.render(block, template.full_params(block, tile(8, split=2, each=1)))
    ast.parse(split)
    assert split.count("k_block * stride_sak") == 1 and "tl.load(SCALE_A) * tl.load(SCALE_B)" not in split
    partial, second = split.split("def gemv_reduce_")
    assert "SCALE_A, SCALE_B," in partial and "SCALE_A" not in second
    # triton::gemv's own source carries none of it
    plain = make_problem(m=5, n=48, k=256, dtype="bfloat16", layout="nt")
    gemv = get_template("triton::gemv")
    assert "SCALE" not in gemv.render(plain, gemv.full_params(plain, tile(8)))


def test_fast_accumulation_is_computed_too(tmp_path):
    problem = fp8("row", m=16, fast_accum=True)
    result = run_kernel(problem, get_template(UID), tile(16, dot=1), tmp_path)
    assert result.correct, result.reasons


def test_float8_configs_of_their_own():
    heuristic = lookup_heuristic(UID, "cuda", "scaled_mm")
    decode = list(heuristic.get_configs(fp8("row", m=8, n=4096, k=4096, device="cuda")))
    plain = list(lookup_heuristic("triton::gemv", "cuda", "mm").get_configs(
        make_problem(m=8, n=4096, k=4096, dtype="bfloat16", layout="nt", device="cuda")))
    assert decode and all(c["DOT"] for c in decode)  # M = 8: the matrix units
    tiles = {(c["BLOCK_N"], c["BLOCK_K"], c["num_stages"], c["num_warps"], c["SPLIT_K"]) for c in decode}
    # the H200's decode leaders: 64 columns (the float8 MMA's least M), deep pipelines
    assert {(64, 256, 6, 4, 1), (64, 512, 4, 4, 1)} <= tiles
    assert any(c["SPLIT_K"] > 1 and c["FUSED_REDUCE"] for c in decode)
    assert len(decode) == len(plain) == 8
    one = list(heuristic.get_configs(fp8("tensor", m=1, n=4096, k=4096, device="cuda")))
    assert any(c["REDUCE_EACH"] for c in one) and any(c["DOT"] for c in one)
    short = list(heuristic.get_configs(fp8("row", m=8, n=64, k=32, device="cuda")))
    assert short and all(c["DOT"] and c["BLOCK_K"] == FP8_DOT_LEAST_K for c in short)
    # the DOT steps without fast accumulation: at most FP8_DOT_MOST_K products in the unit
    assert all(c["BLOCK_K"] <= FP8_DOT_MOST_K for c in decode)
    exhaustive = list(heuristic.get_configs(fp8("row", m=8, n=4096, k=4096, device="cuda"), "exhaustive"))
    assert all(c["BLOCK_K"] <= FP8_DOT_MOST_K for c in exhaustive if c["DOT"])
    # a whole row of a long K in one CUDA-core step (14336: 8192 and a masked rest)
    long = list(heuristic.get_configs(fp8("row", m=1, n=4096, k=14336, device="cuda")))
    template = get_template(UID)
    for config in long:
        template.full_params(fp8("row", m=1, n=4096, k=14336, device="cuda"), config)
    assert max(c["BLOCK_K"] for c in long) == 8192
    assert len(list(lookup_heuristic(UID, "cpu", "scaled_mm").get_configs(fp8()))) == 2


def test_blockwise_configs_step_at_most_one_block():
    """Blockwise: DOT and per-step-sum tiles only, each step dividing a scale's block of K,
    in the default, exhaustive and CPU lists and from a user's --space."""
    heuristic = lookup_heuristic(UID, "cuda", "scaled_mm")
    template = get_template(UID)
    for m in (1, 8, 16):
        problem = fp8("block", m=m, n=4096, k=4096, device="cuda")
        default = list(heuristic.get_configs(problem))
        exhaustive = list(heuristic.get_configs(problem, "exhaustive"))
        assert default and len(exhaustive) > len(default)
        for config in default + exhaustive:
            template.full_params(problem, config)  # every one is a config the template takes
            assert 128 % config["BLOCK_K"] == 0 and (config["DOT"] or config["REDUCE_EACH"])
        assert any(c["SPLIT_K"] > 1 for c in default)
    space = [{"BLOCK_N": 32, "BLOCK_K": 256, "num_warps": 4, "DOT": 1}, {"BLOCK_N": 32, "BLOCK_K": 64, "num_warps": 4},
             {"BLOCK_N": 32, "BLOCK_K": 64, "num_warps": 4, "DOT": 1}]
    kept = list(heuristic.get_configs(fp8("block", m=8, n=4096, k=4096, device="cuda"), space=space))
    assert [(c["BLOCK_K"], c["DOT"]) for c in kept] == [(64, 1)]  # BLOCK_K 256 and FMA left out
    cpu = list(lookup_heuristic(UID, "cpu", "scaled_mm").get_configs(fp8("block", m=5, n=256, k=512)))
    assert len(cpu) == 2 and all(c["REDUCE_EACH"] for c in cpu)


@pytest.mark.parametrize("scale", ["tensor", "row", pytest.param("block", marks=pytest.mark.slow)])
def test_cli_tunes_it_on_the_cpu(cli, cache_dir, scale):
    n, k = (128, 256) if scale == "block" else (40, 64)
    code, out, err = cli("mm", "--device", "cpu", "--json", "--templates", UID, "--m", 3, "--n", n,
                         "--k", k, "--dtype", "float8_e4m3fn", "--scale", scale, "--bias")
    assert code == 0, err
    doc = json.loads(out)
    assert {c["uid"] for c in doc["candidates"]} == {UID}
    assert all(c["status"] == "ok" and c["max_rel_error"] is not None for c in doc["candidates"])
    assert doc["winner"]["uid"] == UID and doc["winner"]["params"]["SCALE"] == scale


@pytest.mark.gpu
@pytest.mark.parametrize("scale, m, n, k, bias", [
    (scale, m, n, k, bias) for scale in ("tensor", "row", "block")
    for m, n, k, bias in [(8, 4096, 4096, None), (1, 4096, 4096, "n"),
                          # columns of C off the tile (blockwise needs N a multiple of 128)
                          (16, 1024 if scale == "block" else 1000, 4096, "n")]])
def test_gpu_every_default_config_verifies(scale, m, n, k, bias, tmp_path):
    problem = fp8(scale, m=m, n=n, k=k, bias=bias, device="cuda")
    configs = list(lookup_heuristic(UID, "cuda", "scaled_mm").get_configs(problem))
    check_configs_on_gpu(problem, get_template(UID), configs, tmp_path)
