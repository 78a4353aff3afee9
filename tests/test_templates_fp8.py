"""The float8 templates: triton::scaled_mm_persistent_tma and triton::scaled_mm run for real
under Triton's interpreter (which runs float8 tl.dot exactly, and tensor descriptors on float8) against the
float64 product of the dequantized operands, its source, where it and aten::_scaled_mm are
unavailable, and its configs. A GPU test runs it on CUDA."""

import ast

import pytest
import torch

from autotune_cli.runner.verify import check, make_operands, poison, reference
from autotune_cli.candidates.choices import get_choices
from autotune_cli.heuristics import lookup_heuristic
from autotune_cli.problem import make_problem
from autotune_cli.settings import TuneSettings
from autotune_cli.templates import get_template, templates_for
from autotune_cli.templates import triton_persistent_tma as tma_module
from helpers_kernels import run_kernel
from helpers_devices import A100, CPU, H200, L40S

TRITON = "triton::scaled_mm_persistent_tma"
TILED = "triton::scaled_mm"
SPLITK = "triton::scaled_mm_splitk"
ATEN = "aten::_scaled_mm"
TILE = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 64, "GROUP_M": 2, "num_stages": 1, "num_warps": 4}


def fp8(scale="row", device="cpu", **kwargs):
    args = dict(m=40, n=48, k=128, dtype="float8_e4m3fn", scale=scale, device=device)
    args.update(kwargs)
    return make_problem(**args)


needs_interpreter_tma = pytest.mark.skipif(
    tma_module.interpreter_descriptor_problem() is not None,
    reason=f"{tma_module.interpreter_descriptor_problem()}",
)


def test_served_for_scaled_mm_only():
    assert {t.uid for t in templates_for(fp8())} == {ATEN, TRITON, TILED, SPLITK}
    assert not {ATEN, TRITON, TILED, SPLITK} & {t.uid for t in templates_for(make_problem(m=8, n=8, k=8, dtype="bf16"))}


@needs_interpreter_tma
@pytest.mark.parametrize("out_dtype, bias", [("bfloat16", None), ("bfloat16", "n"), ("float16", "n"),
                                             ("float32", None)])  # no bias with float32 (torch's rule)
@pytest.mark.parametrize("scale", ["tensor", "row"])
def test_triton_scaled_mm_computes_the_scaled_product(scale, out_dtype, bias, tmp_path):
    # 40x48 in 32x32 tiles is 4 tiles for 4 programs, edge tiles in M and N (the descriptors'
    # zero padding, the clipped store, the masked scale and bias loads); K=128 is two steps.
    problem = fp8(scale, out_dtype=out_dtype, bias=bias)
    template = get_template(TRITON)
    assert template.unavailable_reason(problem, CPU) is None
    result = run_kernel(problem, template, TILE, tmp_path, calls=2)
    assert result.correct, result.reasons
    assert result.discriminating
    assert result.ops.out.dtype == getattr(torch, out_dtype)


@needs_interpreter_tma
def test_triton_scaled_mm_persistent_programs_take_several_tiles(tmp_path):
    problem = fp8("row", m=96, n=64, k=64)  # 3x2 tiles for 4 programs
    template = get_template(TRITON)
    for flatten in (0, 1):
        result = run_kernel(problem, template, {**TILE, "FLATTEN": flatten}, tmp_path)
        assert result.correct, result.reasons
        assert result.run.programs == 4


@needs_interpreter_tma
def test_a_kernel_that_drops_the_row_scales_is_caught(tmp_path):
    """The verifier sees the difference between the two scale kinds: the tensorwise kernel
    (which reads one element of each scale) run on rowwise inputs fails the check."""
    row = fp8("row")
    tensor_kernel = get_template(TRITON)
    params = tensor_kernel.full_params(fp8("tensor"), TILE)
    run = tensor_kernel.build(fp8("tensor"), params, str(tmp_path))
    ops = make_operands(row, seed=3, device="cpu")
    ref = reference(row, ops)
    poison(ops)
    run(ops)
    assert not check(row, ops.out, ref).ok


def test_source_for_each_scale_kind():
    template = get_template(TRITON)
    row = fp8("row", bias="n", device="cuda")
    params = template.full_params(row, TILE)
    assert (params["SCALE"], params["OUT_DTYPE"], params["FLATTEN"]) == ("row", "bfloat16", 1)
    source = template.render(row, params)
    ast.parse(source)
    assert "tl.make_tensor_descriptor(B, shape=[N, K]" in source and "b_desc.load([off_n, off_k]).T" in source
    assert "scale_a = tl.load(SCALE_A + offs_m * stride_scale_a" in source
    assert "acc * scale_a[:, None] * scale_b[None, :]" in source
    assert "acc += tl.dot(a, b, out_dtype=tl.float32)" in source  # fp32 sum of each K step
    assert "BIAS + offs_n" in source and "BLOCK_K: tl.constexpr = 64" in source
    tensor = fp8("tensor", device="cuda")
    tensor_source = template.render(tensor, template.full_params(tensor, {**TILE, "FLATTEN": 0}))
    ast.parse(tensor_source)
    assert "scale = tl.load(SCALE_A) * tl.load(SCALE_B)" in tensor_source and "acc = acc * scale" in tensor_source
    assert "offs_m * stride_scale_a" not in tensor_source and "BIAS + offs_n" not in tensor_source
    assert "flatten=True" not in tensor_source
    # sizes are runtime arguments: another shape renders the same text; another output dtype does not
    assert template.render(fp8("row", bias="n", m=4096, n=4096, k=4096), params) == source
    f16 = fp8("row", bias="n", out_dtype="float16")
    assert template.render(f16, template.full_params(f16, TILE)) != source


def test_triton_unavailable_below_hopper_or_misaligned():
    template = get_template(TRITON)
    assert template.unavailable_reason(fp8(device="cuda"), H200) is None
    assert "compute capability >= 9.0" in template.unavailable_reason(fp8(device="cuda"), L40S)
    assert "A rows are 40 B" in template.unavailable_reason(fp8(k=40, device="cuda"), H200)
    assert "C rows are 24 B" in template.unavailable_reason(fp8(n=12, device="cuda"), H200)
    assert template.unavailable_reason(fp8(n=12, out_dtype="float32", device="cuda"), H200) is None  # 48 B


def test_aten_scaled_mm_unavailable_where_cublaslt_refuses():
    template = get_template(ATEN)
    assert template.unavailable_reason(fp8(k=40), CPU) is None  # torch's CPU kernel takes any size
    assert template.unavailable_reason(fp8(device="cuda"), H200) is None
    assert "multiples of 16" in template.unavailable_reason(fp8(k=40, device="cuda"), H200)
    assert "bfloat16 only" in template.unavailable_reason(fp8("row", out_dtype="float16", device="cuda"), H200)
    assert template.unavailable_reason(fp8("tensor", out_dtype="float16", device="cuda"), H200) is None


def test_float8_configs_of_their_own():
    big = fp8("row", m=4096, n=4096, k=4096, device="cuda")
    configs = list(lookup_heuristic(TRITON, "cuda", "scaled_mm").get_configs(big))
    assert len(configs) >= 8
    for config in configs:
        assert config["BLOCK_K"] >= 64
        staged = (config["BLOCK_M"] + config["BLOCK_N"]) * config["BLOCK_K"] * config["num_stages"]
        assert staged + config["BLOCK_M"] * config["BLOCK_N"] * 2 <= H200.smem_per_block  # + the store's tile
    assert any(c["BLOCK_K"] >= 128 and c["BLOCK_M"] >= 128 for c in configs)
    decode = fp8("row", m=8, n=4096, k=4096, device="cuda")
    assert any(c["BLOCK_M"] == 16 for c in lookup_heuristic(TRITON, "cuda", "scaled_mm").get_configs(decode))
    exhaustive = list(lookup_heuristic(TRITON, "cuda", "scaled_mm").get_configs(big, "exhaustive"))
    assert exhaustive and min(c["BLOCK_K"] for c in exhaustive) == 64
    assert list(lookup_heuristic(TRITON, "cpu", "scaled_mm").get_configs(fp8()))
    assert list(lookup_heuristic(ATEN, "cuda", "scaled_mm").get_configs(big)) == [{}]


def test_choices_on_an_h200_and_on_the_cpu():
    big = fp8("tensor", m=2048, n=4096, k=4096, device="cuda")
    chosen = get_choices(big, H200, TuneSettings(device="cuda"))
    uids = [c.uid for c in chosen.choices]
    assert uids.count(ATEN) == 1 and uids.count(TRITON) >= 8
    assert not chosen.pruned_counts().get("hardware")
    older = get_choices(big, L40S, TuneSettings(device="cuda"))  # sm_89: no TMA, the tiled kernel
    assert {c.uid for c in older.choices} == {ATEN, TILED}


@pytest.mark.gpu
@pytest.mark.parametrize("scale", ["tensor", "row"])
def test_triton_scaled_mm_on_the_gpu(scale, tmp_path):
    problem = fp8(scale, m=256, n=512, k=1024, bias="n", device="cuda")
    config = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_stages": 3, "num_warps": 8}
    template = get_template(TRITON)
    params = template.full_params(problem, config)
    run = template.build(problem, params, str(tmp_path))
    ops = make_operands(problem, seed=1, device="cuda")
    ref = reference(problem, ops)
    poison(ops)
    run(ops)
    torch.cuda.synchronize()
    verdict = check(problem, ops.out, ref)
    assert verdict.ok, verdict.reason


@pytest.mark.gpu
@pytest.mark.parametrize("extra", [{"PROMOTE_IN_DOT": 1}, {"PROMOTE_IN_DOT": 1, "FLATTEN": 0},
                                   {"WARP_SPECIALIZE": 2, "FLATTEN": 0}])
def test_triton_scaled_mm_variants_on_the_gpu(extra, tmp_path):
    problem = fp8("row", m=256, n=512, k=1024, bias="n", device="cuda")
    config = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_stages": 3, "num_warps": 8, **extra}
    template = get_template(TRITON)
    run = template.build(problem, template.full_params(problem, config), str(tmp_path))
    ops = make_operands(problem, seed=1, device="cuda")
    ref = reference(problem, ops)
    poison(ops)
    run(ops)
    torch.cuda.synchronize()
    verdict = check(problem, ops.out, ref)
    assert verdict.ok, verdict.reason


@pytest.mark.gpu
@pytest.mark.parametrize("scale", ["tensor", "row"])
def test_scaled_mm_splitk_on_the_gpu(scale, tmp_path):
    problem = fp8(scale, m=8, n=4096, k=4096, bias="n", device="cuda")
    config = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "GROUP_M": 8, "num_stages": 4, "num_warps": 4,
              "SPLIT_K": 4}
    template = get_template(SPLITK)
    run = template.build(problem, template.full_params(problem, config), str(tmp_path))
    for seed in (1, 2, 3):  # the counters are back at zero after each call
        ops = make_operands(problem, seed=seed, device="cuda")
        ref = reference(problem, ops)
        poison(ops)
        run(ops)
        torch.cuda.synchronize()
        verdict = check(problem, ops.out, ref)
        assert verdict.ok, verdict.reason
    assert int(run.workspaces[ops.out.device][1].abs().sum()) == 0


@needs_interpreter_tma
@pytest.mark.parametrize("extra", [{"PROMOTE_IN_DOT": 1}, {"WARP_SPECIALIZE": 1}, {"WARP_SPECIALIZE": 2, "FLATTEN": 0}])
def test_accumulation_in_the_dot_and_warp_specialization_render_and_compute(extra, tmp_path):
    template = get_template(TRITON)
    problem = fp8("row", bias="n")
    params = template.full_params(problem, {**TILE, **extra})
    source = template.render(problem, params)
    ast.parse(source)
    if extra.get("PROMOTE_IN_DOT"):
        assert "acc = tl.dot(a, b, acc, max_num_imprecise_acc=BLOCK_K, out_dtype=tl.float32)" in source
        assert "acc += tl.dot" not in source
    ws = extra.get("WARP_SPECIALIZE", 0)
    assert ("NUM_SMS, flatten=True, warp_specialize=True" in source) == (ws == 1)
    assert ("tl.range(k_steps, warp_specialize=True)" in source) == (ws == 2)
    result = run_kernel(problem, template, {**TILE, **extra}, tmp_path)
    assert result.correct, result.reasons
    assert result.discriminating
    # fast accumulation has nothing to promote: the in-place dot, whatever PROMOTE_IN_DOT says
    fast = fp8("row", fast_accum=True)
    fast_source = template.render(fast, template.full_params(fast, {**TILE, **extra}))
    assert "acc = tl.dot(a, b, acc, out_dtype=tl.float32)" in fast_source


# -- split-K for decode shapes (triton::scaled_mm_splitk) ----------------------------------------

SPLIT_TILE = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 1, "num_warps": 4}


@pytest.mark.parametrize("scale, bias, k, split", [("row", "n", 256, 2), ("tensor", None, 256, 4),
                                                   ("row", None, 200, 3), ("tensor", "n", 96, 2)])
def test_splitk_scaled_mm_computes_the_scaled_product(scale, bias, k, split, tmp_path):
    # M = 5, N = 48: edge tiles in both; K = 200 or 96 leaves short or empty last slices
    problem = fp8(scale, m=5, n=48, k=k, bias=bias)
    template = get_template(SPLITK)
    config = {**SPLIT_TILE, "SPLIT_K": split}
    params = template.full_params(problem, config)
    assert params["EVEN_K"] == (k % (32 * split) == 0)
    source = template.render(problem, params)
    ast.parse(source)
    assert "tl.atomic_add(COUNTERS + pid, 1" in source and f"SPLIT_K: tl.constexpr = {split}" in source
    result = run_kernel(problem, template, config, tmp_path, calls=3)  # counters back at 0 each call
    assert result.correct, result.reasons
    assert result.discriminating
    (workspace, counters), = result.run.workspaces.values()
    assert workspace.shape == (split, 5, 48) and int(counters.abs().sum()) == 0
    assert template.keeps_buffers


def test_splitk_configs_serve_decode_shapes_only():
    heuristic = lookup_heuristic(SPLITK, "cuda", "scaled_mm")
    decode = list(heuristic.get_configs(fp8("row", m=8, n=4096, k=4096, device="cuda")))
    assert decode and all(c["SPLIT_K"] >= 2 and 4096 >= c["SPLIT_K"] * c["BLOCK_K"] for c in decode)
    assert not list(heuristic.get_configs(fp8("row", m=2048, n=4096, k=4096, device="cuda")))
    # a user's tile without SPLIT_K: tried at each split whose slices hold a BLOCK_K step;
    # one with SPLIT_K: at that one alone; past the decode rows: none
    listed = list(heuristic.get_configs(fp8("row", m=8, n=4096, k=256, device="cuda"), "default",
                                        [{**SPLIT_TILE, "BLOCK_K": 64}, {**SPLIT_TILE, "SPLIT_K": 8}]))
    assert [c["SPLIT_K"] for c in listed] == [2, 4, 8]
    assert [c["BLOCK_K"] for c in listed] == [64, 64, 32]
    assert not list(heuristic.get_configs(fp8("row", m=2048, n=4096, k=4096, device="cuda"), "default",
                                          [SPLIT_TILE]))
    assert list(lookup_heuristic(SPLITK, "cpu", "scaled_mm").get_configs(fp8("row", m=8, k=128)))
    with pytest.raises(ValueError):
        get_template(SPLITK).full_params(fp8(), {**SPLIT_TILE, "SPLIT_K": 1})


@needs_interpreter_tma
def test_fast_accumulation_renders_the_in_place_dot_and_computes_the_product(tmp_path):
    template = get_template(TRITON)
    problem = fp8("row", bias="n", fast_accum=True)
    params = template.full_params(problem, TILE)
    assert params["FAST_ACCUM"] is True
    source = template.render(problem, params)
    ast.parse(source)
    assert "acc = tl.dot(a, b, acc, out_dtype=tl.float32)" in source and "acc += tl.dot" not in source
    assert template.render(fp8("row", bias="n"), template.full_params(fp8("row", bias="n"), TILE)) != source
    result = run_kernel(problem, template, TILE, tmp_path)
    assert result.correct, result.reasons
    assert result.discriminating


# -- the tiled kernel (triton::scaled_mm) ------------------------------------------------------

@pytest.mark.parametrize("scale, bias, fast, k", [("row", "n", False, 96), ("tensor", None, False, 128),
                                                  ("row", None, True, 128), ("tensor", "n", True, 80)])
def test_tiled_scaled_mm_computes_the_scaled_product(scale, bias, fast, k, tmp_path):
    # N = 44: bfloat16 rows of 88 B, which TMA refuses and the tiled kernel serves; K = 96 or
    # 80 is not a multiple of BLOCK_K = 64 (the masked K tail)
    problem = fp8(scale, n=44, k=k, bias=bias, fast_accum=fast)
    assert get_template(TRITON).unavailable_reason(problem, H200) is not None
    template = get_template(TILED)
    assert template.unavailable_reason(problem, H200) is None and template.unavailable_reason(problem, CPU) is None
    params = template.full_params(problem, TILE)
    assert params["EVEN_K"] == (k % 64 == 0) and params["FAST_ACCUM"] == fast
    source = template.render(problem, params)
    ast.parse(source)
    assert ("k_left = K - k_start" in source) == (k % 64 != 0)
    assert ("acc += tl.dot" in source) == (not fast)
    result = run_kernel(problem, template, TILE, tmp_path, calls=2)
    assert result.correct, result.reasons
    assert result.discriminating


def test_tiled_scaled_mm_needs_the_float8_mma():
    template = get_template(TILED)
    assert "compute capability >= 8.9" in template.unavailable_reason(fp8(device="cuda"), A100)
    assert template.unavailable_reason(fp8(device="cuda"), L40S) is None
    configs = list(lookup_heuristic(TILED, "cuda", "scaled_mm").get_configs(fp8("row", m=4096, n=4096, k=4096)))
    assert configs and all("FLATTEN" not in c for c in configs)
    assert len({tuple(sorted(c.items())) for c in configs}) == len(configs)
