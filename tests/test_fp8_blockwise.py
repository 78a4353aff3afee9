"""float8 GEMMs with blockwise scales (1x128 blocks of A, 128x128 of B): the problem and its
key, the operands and the float64 reference, triton::scaled_mm_blockwise under Triton's
interpreter (which runs float8 tl.dot exactly), a kernel that reads the wrong block's scale
caught by the verifier, the whole tune through the CLI on the CPU, the API and torch.compile
on its winner; where aten::_scaled_mm serves it. GPU tests run both candidates on CUDA."""

import json

import pytest
import torch

import autotune_cli
from autotune_cli import api
from autotune_cli.candidates.choices import get_choices
from autotune_cli.hardware.device import DeviceInfo
from autotune_cli.errors import UserError
from autotune_cli.problem import GemmProblem, make_problem
from autotune_cli.runner.verify import check, dequantized, empty_operands, make_operands, poison, reference
from autotune_cli.settings import TuneSettings
from autotune_cli.templates import get_template, templates_for
from conftest import INTERPRETING, ran_verified
from helpers_kernels import run_kernel
from helpers_devices import H200, CPU

BLOCK = "triton::scaled_mm_blockwise"
ATEN = "aten::_scaled_mm"
GEMV = "triton::scaled_gemv"  # the decode GEMV, blockwise too for M <= 16
B200 = DeviceInfo(device_type="cuda", name="NVIDIA B200", capability="10.0", sm_count=148,
                  smem_per_block=232448, l2_bytes=126 << 20, total_memory=180 << 30)
TILE = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 128, "GROUP_M": 2, "num_stages": 1, "num_warps": 4}
needs_interpreter = pytest.mark.skipif(not INTERPRETING, reason="runs Triton on CPU tensors: needs TRITON_INTERPRET=1")


def block(device="cpu", **kwargs):
    args = dict(m=40, n=256, k=384, dtype="float8_e4m3fn", scale="block", device=device)
    args.update(kwargs)
    return make_problem(**args)


# -- the problem -------------------------------------------------------------------------------

def test_the_problem_its_scales_and_its_key():
    problem = block(bias="n")
    assert problem.op == "scaled_mm" and problem.scale == "block" and problem.layout == "nt"
    assert problem.scale_shapes() == ((40, 3), (3, 2))
    assert "scale_block" in problem.key() and problem.key() != block(bias="n", scale="row").key()
    assert GemmProblem.from_dict(json.loads(json.dumps(problem.to_dict()))) == problem
    assert make_problem(m=8, n=128, k=128, dtype="fp8", scale="blockwise").scale == "block"
    # the scale bytes: one fp32 per block of each operand
    assert problem.min_bytes - block(scale="row", bias="n").min_bytes == 4 * ((40 * 3 + 3 * 2) - (40 + 256))


@pytest.mark.parametrize("kwargs, message", [
    (dict(k=200), "need K and N multiples of 128, got K=200, N=256"),
    (dict(n=100), "need K and N multiples of 128"),
    (dict(fast_accum=True), "--fast-accum does not apply to blockwise scales"),
])
def test_refused_where_the_blocks_do_not_tile_the_operands(kwargs, message):
    with pytest.raises(UserError, match=message):
        block(**kwargs)


# -- operands and the reference ----------------------------------------------------------------

def test_operands_are_quantized_per_block_and_stored_as_cublaslt_takes_them():
    problem = block(bias="n")
    ops = make_operands(problem, seed=1, device="cpu")
    assert ops.scale_a.shape == (40, 3) and ops.scale_a.stride() == (1, 40)  # column-major
    assert ops.scale_b.shape == (3, 2) and ops.scale_b.stride() == (1, 3)
    empty = empty_operands(problem, "cpu")
    assert (empty.scale_a.stride(), empty.scale_b.stride()) == (ops.scale_a.stride(), ops.scale_b.stride())
    a, b = dequantized(problem, ops)
    # each block's largest magnitude sits at float8's largest (448): the scales are the blocks'
    block_a = a.reshape(40, 3, 128).abs().amax(-1)
    torch.testing.assert_close(block_a / ops.scale_a.double(), torch.full((40, 3), 448.0, dtype=torch.float64))
    block_b = b.reshape(3, 128, 2, 128).abs().amax(dim=(1, 3))
    torch.testing.assert_close(block_b / ops.scale_b.double(), torch.full((3, 2), 448.0, dtype=torch.float64))
    want = a @ b + ops.bias.double()
    torch.testing.assert_close(reference(problem, ops).exact, want)


# -- the template ------------------------------------------------------------------------------

def test_served_for_blockwise_scales_only():
    assert {t.uid for t in templates_for(block())} == {ATEN, BLOCK}
    row = make_problem(m=40, n=256, k=384, dtype="fp8", scale="row")
    assert BLOCK not in {t.uid for t in templates_for(row)}


@pytest.mark.parametrize("config, message", [
    ({**TILE, "BLOCK_K": 64}, "BLOCK_K must be 128"),
    ({**TILE, "BLOCK_N": 256}, "BLOCK_N must divide 128"),
])
def test_refuses_tiles_that_straddle_a_block(config, message):
    with pytest.raises(ValueError, match=message):
        get_template(BLOCK).full_params(block(), config)


@needs_interpreter
@pytest.mark.parametrize("kwargs, config", [
    (dict(), TILE),                                                         # edge rows of M
    (dict(bias="n", out_dtype="float16"), {**TILE, "BLOCK_M": 32, "BLOCK_N": 64}),
    (dict(m=16, n=128, k=256, out_dtype="float32"), {**TILE, "BLOCK_N": 128}),
    (dict(m=3, bias="n"), {**TILE, "BLOCK_N": 16}),                         # decode, narrow columns
])
def test_computes_the_product_of_the_dequantized_operands(kwargs, config, tmp_path):
    problem = block(**kwargs)
    template = get_template(BLOCK)
    assert template.unavailable_reason(problem, CPU) is None
    result = run_kernel(problem, template, config, tmp_path, calls=2)
    assert result.correct, result.reasons
    assert result.discriminating


@needs_interpreter
def test_a_kernel_that_reads_one_block_scale_for_every_step_is_caught(tmp_path):
    """The operands' scales differ from block to block of K, so a kernel applying the first
    block's scales to every step (as a rowwise kernel would) fails the check."""
    problem = block()
    ops = make_operands(problem, seed=4, device="cpu")
    ref = reference(problem, ops)
    template = get_template(BLOCK)
    run = template.build(problem, template.full_params(problem, TILE), str(tmp_path))
    first = ops.scale_a[:, :1].expand(-1, 3)
    first_b = ops.scale_b[:1, :].expand(3, -1)
    wrong = type(ops)(a=ops.a, b=ops.b, out=ops.out, bias=None, scale_a=first, scale_b=first_b)
    poison(ops)
    run(wrong)
    assert not check(problem, ops.out, ref).ok
    run(ops)
    assert check(problem, ops.out, ref).ok


def test_aten_serves_it_on_hopper_only():
    aten = get_template(ATEN)
    assert "CPU takes tensorwise and rowwise scales only" in aten.unavailable_reason(block(), CPU)
    assert aten.unavailable_reason(block(device="cuda"), H200) is None
    assert "Hopper" in aten.unavailable_reason(block(device="cuda"), B200)
    mi300 = DeviceInfo(device_type="cuda", name="AMD Instinct MI300X", capability="9.4", sm_count=304,
                       smem_per_block=65536, l2_bytes=256 << 20, total_memory=192 << 30)
    assert "not ROCm's" in aten.unavailable_reason(block(device="cuda"), mi300)


def test_choices_on_an_h200():
    prefill = get_choices(block(m=2048, n=4096, k=4096, device="cuda"), H200, TuneSettings(device="cuda"))
    assert {c.uid for c in prefill.choices} == {ATEN, BLOCK} and not prefill.pruned
    tiles = [c.config_dict for c in prefill.choices if c.uid == BLOCK]
    assert len(tiles) >= 8 and all(t["BLOCK_K"] == 128 and 128 % t["BLOCK_N"] == 0 for t in tiles)
    decode = get_choices(block(m=8, n=4096, k=4096, device="cuda"), H200, TuneSettings(device="cuda"))
    narrow = [c.config_dict for c in decode.choices if c.uid == BLOCK]
    assert all(t["BLOCK_M"] == 16 for t in narrow) and min(t["BLOCK_N"] for t in narrow) <= 32
    exhaustive = get_choices(block(m=2048, n=4096, k=4096, device="cuda"), H200,
                             TuneSettings(device="cuda", search="exhaustive", templates=(BLOCK,)))
    assert exhaustive.choices and all(c.config_dict["BLOCK_K"] == 128 for c in exhaustive.choices)


# -- through the CLI, the API and torch.compile ------------------------------------------------

@pytest.fixture
def fresh_api():
    api.reset()
    yield
    api.reset()


def block_tensors(m, n, k, seed=0, bias=False):
    problem = make_problem(m=m, n=n, k=k, dtype="fp8", scale="block", device="cpu", bias="n" if bias else None)
    return problem, make_operands(problem, seed=seed, device="cpu")


@pytest.mark.slow
@needs_interpreter
def test_tuned_through_the_cli_and_used_by_the_api_and_torch_compile(cli, cache_dir, fresh_api):
    code, out, err = cli("mm", "--device", "cpu", "--json", "--workers", "1", "--m", 16, "--n", 128, "--k", 256,
                         "--dtype", "float8_e4m3fn", "--scale", "block", "--bias")
    assert code == 0, err
    doc = json.loads(out)
    winner = doc["winner"]["uid"]  # M = 16: the decode GEMV runs too; the interpreter's times pick
    assert doc["problem"]["scale"] == "block" and winner in (BLOCK, GEMV)
    ran = [c for c in doc["candidates"] if c["uid"] in (BLOCK, GEMV)]
    assert {c["uid"] for c in ran} == {BLOCK, GEMV}
    assert all(ran_verified(c) for c in ran), [(c["uid"], c["status"], c["error"]) for c in ran]
    assert not any(c["uid"] == ATEN for c in doc["candidates"])  # unavailable on the CPU

    problem, ops = block_tensors(16, 128, 256, seed=7, bias=True)
    want = reference(problem, ops)
    args = (ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias)
    info = api.Dispatcher().route_scaled(*args, out_dtype=torch.bfloat16)[1]  # planned as the default one plans
    assert info.uid == winner and not info.fallback
    got = autotune_cli.scaled_mm(*args, out_dtype=torch.bfloat16)
    assert check(problem, got, want).ok

    class Fp8Linear(torch.nn.Module):
        def forward(self, a, b, scale_a, scale_b, bias):
            return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, bias=bias, out_dtype=torch.bfloat16)

    routes: list = []
    compiled = autotune_cli.compile(Fp8Linear(), backend="aot_eager", routes=routes, fullgraph=True)
    assert check(problem, compiled(*args), want).ok
    assert [r.uid for r in routes if not r.fallback] == [winner]


class _BlockwiseLinear(torch.nn.Module):
    """A Linear layer quantized DeepSeek-style: x with 1x128 scales, W [n, k] with 128x128."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(256, 384).to(torch.float8_e4m3fn), requires_grad=False)
        self.sw = torch.nn.Parameter(torch.rand(2, 3).t(), requires_grad=False)  # [k/128, n/128]

    def forward(self, x, sx):
        return torch._scaled_mm(x, self.w.t(), scale_a=sx, scale_b=self.sw, out_dtype=torch.bfloat16)


def test_autotune_model_finds_a_blockwise_scaled_mm_in_an_exported_program(tmp_path, cli, cache_dir):
    """torch.export traces the call (torch's meta kernel takes blockwise scales); `autotune
    model --plan` lists it as a blockwise problem."""
    x = torch.randn(16, 384).to(torch.float8_e4m3fn)
    program = torch.export.export(_BlockwiseLinear(), (x, torch.rand(3, 16).t()))
    path = tmp_path / "blockwise.pt2"
    torch.export.save(program, path)
    code, out, err = cli("model", path, "--plan", "--json", "--device", "cpu")
    assert code == 0, err
    (planned,) = json.loads(out)["plan"]
    problem = GemmProblem.from_dict(planned["problem"])
    assert problem == make_problem(m=16, n=256, k=384, dtype="fp8", scale="block", device="cpu")
    assert planned["count"] == 1


# -- on the GPU --------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_tunes_blockwise_with_both_candidates_verified(cli, cache_dir):
    code, out, err = cli("mm", "--device", "cuda", "--json", "--m", 256, "--n", 512, "--k", 1024,
                         "--dtype", "float8_e4m3fn", "--scale", "block")
    assert code == 0, err
    doc = json.loads(out)
    by_uid = {}
    for c in doc["candidates"]:
        by_uid.setdefault(c["uid"], []).append(c)
    assert set(by_uid) == {ATEN, BLOCK}
    assert any(ran_verified(c) for c in by_uid[BLOCK]), [(c["status"], c["error"]) for c in by_uid[BLOCK]]
    assert all(c["status"] != "wrong_result" for c in doc["candidates"]), \
        [(c["uid"], c["params"], c["error"]) for c in doc["candidates"] if c["status"] == "wrong_result"]
    assert ran_verified(by_uid[ATEN][0]), by_uid[ATEN][0]["error"]
