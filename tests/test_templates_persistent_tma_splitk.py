"""The templates triton::mm_persistent_tma and triton::mm_splitk.

Both kernels run for real under Triton's interpreter (which runs tensor descriptors since
Triton 3.4) against a float64 reference, on every layout, for mm and addmm; their fallbacks
(compute capability, Triton version, misaligned strides) and heuristics are checked too.
Split-K's one-launch reduction (FUSED_REDUCE) is checked for its product, its bits (those of
the two-launch reduction), its counters (back at zero after every call) and its warmup. The
interpreter runs the programs one after another, so it checks the arithmetic and the
counting, not the memory ordering between programs running at once."""

import ast

import pytest
import torch

from autotune_cli.runner.verify import check, make_operands, poison, reference
from autotune_cli.candidates.choices import get_choices
from autotune_cli.errors import UserError
from autotune_cli.hardware.device import DeviceInfo
from autotune_cli.heuristics import lookup_heuristic
from autotune_cli.heuristics import spaces
from autotune_cli.heuristics import triton_persistent_tma as tma_heuristics
from autotune_cli.heuristics import triton_splitk as splitk_heuristics
from autotune_cli.problem import make_problem
from autotune_cli.store.results import params_str
from autotune_cli.settings import TuneSettings
from autotune_cli.templates import get_template, templates_for
from autotune_cli.templates import triton_persistent_tma as tma_module
from autotune_cli.templates.triton_splitk import k_per_split
from helpers_kernels import run_kernel
from helpers_devices import H200, A100, CPU

TMA = "triton::mm_persistent_tma"
SPLITK = "triton::mm_splitk"
TILE = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2, "num_stages": 1, "num_warps": 4}
LAYOUTS = ["nn", "nt", "tn", "tt"]
DTYPE_OF_LAYOUT = {"nn": "float16", "nt": "bfloat16", "tn": "float32", "tt": "float16"}  # each dtype in turn
OPS = [dict(), dict(bias="n"), dict(bias="mn")]


def test_registered_for_mm_and_addmm_only():
    mm = make_problem(m=8, n=8, k=8, device="cpu")
    addmm = make_problem(m=8, n=8, k=8, bias="n", device="cpu")
    bmm = make_problem(m=8, n=8, k=8, batch=2, device="cpu")
    for problem in (mm, addmm):
        assert {TMA, SPLITK} <= {t.uid for t in templates_for(problem)}
    assert not {TMA, SPLITK} & {t.uid for t in templates_for(bmm)}
    for uid in (TMA, SPLITK):
        assert get_template(uid).backend == "triton"  # so the shared-memory prune applies


# -- split-K: the kernel ----------------------------------------------------------------------

@pytest.mark.parametrize("split_k, fused", [(2, 0), (4, 0), (4, 1)], ids=["split2", "split4", "split4_fused"])
@pytest.mark.parametrize("op", OPS, ids=["mm", "addmm_n", "addmm_mn"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_splitk_computes_the_product(layout, op, split_k, fused, tmp_path):
    # 24x40 in 32x32 tiles: edge tiles in M and N; K=200 in 4 slices of 64: the last is 8
    # long, not a multiple of BLOCK_K. `fused`: the one-launch reduction (FUSED_REDUCE=1).
    dtype = DTYPE_OF_LAYOUT[layout]
    problem = make_problem(m=24, n=40, k=200, dtype=dtype, layout=layout, device="cpu", **op)
    template = get_template(SPLITK)
    config = {**TILE, "SPLIT_K": split_k, "FUSED_REDUCE": fused}
    params = template.full_params(problem, config)
    assert params["EVEN_K"] is False and params["ATOMIC_ADD"] == 0 and params["FUSED_REDUCE"] == fused
    result = run_kernel(problem, template, config, tmp_path)
    assert result.correct, result.reasons
    assert result.discriminating


@pytest.mark.parametrize("case", [
    dict(m=33, n=65, k=256, split_k=4, atomic=0),   # EVEN_K: 256 = 4 * 2 * 32, no K masks
    dict(m=24, n=40, k=200, split_k=4, atomic=1),   # atomics into one zeroed plane
    dict(m=40, n=24, k=130, split_k=8, atomic=0),   # slices 5..7 start past K: empty
], ids=["even_k", "atomic", "empty_slices"])
def test_splitk_edge_cases(case, tmp_path):
    problem = make_problem(m=case["m"], n=case["n"], k=case["k"], dtype="float32", bias="n",
                           layout="nt", device="cpu")
    template = get_template(SPLITK)
    config = {**TILE, "SPLIT_K": case["split_k"], "ATOMIC_ADD": case["atomic"]}
    params = template.full_params(problem, config)
    assert params["EVEN_K"] is (problem.k % (32 * case["split_k"]) == 0)
    result = run_kernel(problem, template, config, tmp_path)
    assert result.correct, result.reasons
    assert result.discriminating
    run, ops = result.run, result.ops
    # The runnable keeps its workspace: a second run gives the same bits.
    first = ops.out.clone()
    poison(ops)
    run(ops)
    assert torch.equal(first, ops.out)


def test_splitk_source():
    problem = make_problem(m=24, n=40, k=200, dtype="bfloat16", bias="n", device="cpu")
    template = get_template(SPLITK)
    source = template.render(problem, template.full_params(problem, {**TILE, "SPLIT_K": 4}))
    tree = ast.parse(source)
    assert len([n for n in tree.body if isinstance(n, ast.FunctionDef)]) == 2
    assert "K_PER_SPLIT: tl.constexpr = 64" in source  # ceil(200 / 4) -> a multiple of 32
    assert "PARTS: tl.constexpr = 4" in source and "atomic_add" not in source
    assert "a = a.to(tl.float32)" in source  # bf16 upcast under the interpreter
    atomic = template.render(problem, template.full_params(problem, {**TILE, "SPLIT_K": 4, "ATOMIC_ADD": 1}))
    assert "tl.atomic_add" in atomic and "PARTS: tl.constexpr = 1" in atomic
    assert k_per_split(200, 4, 32) == 64 and k_per_split(256, 4, 32) == 64 and k_per_split(130, 8, 32) == 32


# -- split-K with the fused (one-launch) reduction --------------------------------------------

FUSED = {**TILE, "FUSED_REDUCE": 1}


@pytest.mark.parametrize("case", [
    dict(m=24, n=40, k=200, split_k=2, bias="n"),
    dict(m=33, n=65, k=256, split_k=4, bias="mn"),   # EVEN_K, 2x3 tiles
    dict(m=40, n=24, k=130, split_k=8, bias=None),   # slices 5..7 start past K: empty
], ids=["split2", "even_k", "empty_slices"])
def test_splitk_fused_runs_again_and_leaves_the_counters_at_zero(case, tmp_path):
    """The last program of a tile sets its counter back to 0: the same runnable, called
    again, gives the same bits (a counter left behind would make the wrong program reduce,
    or none), with no memset between calls."""
    problem = make_problem(m=case["m"], n=case["n"], k=case["k"], dtype="float16", layout="nt",
                           bias=case["bias"], device="cpu")
    template = get_template(SPLITK)
    config = {**FUSED, "SPLIT_K": case["split_k"]}
    result = run_kernel(problem, template, config, tmp_path, seed=5, calls=2)  # fresh operands each call
    assert len(result.verdicts) == 2 and result.correct, result.reasons
    assert result.discriminating
    run, ops = result.run, result.ops
    ((_, counters),) = run.workspaces.values()
    tiles = -(-case["m"] // 32) * -(-case["n"] // 32)
    assert counters.dtype == torch.int32 and counters.shape == (tiles,)
    assert torch.equal(counters, torch.zeros_like(counters))
    first = ops.out.clone()
    for _ in range(2):
        poison(ops)
        run(ops)
        assert torch.equal(first, ops.out)
        assert torch.equal(counters, torch.zeros_like(counters))
    assert len(run.workspaces) == 1  # the same workspace and counters every call


@pytest.mark.parametrize("dtype, bias", [("float32", "n"), ("float16", "mn"), ("bfloat16", None)])
def test_splitk_fused_gives_the_bits_of_the_two_launch_reduction(dtype, bias, tmp_path):
    """Both sum the float32 planes in split order, then add the bias and round: the same bits."""
    problem = make_problem(m=40, n=72, k=300, dtype=dtype, layout="tn", bias=bias, device="cpu")
    template = get_template(SPLITK)
    ops = make_operands(problem, seed=7, device="cpu")
    outs = []
    for fused in (0, 1):
        config = {**TILE, "SPLIT_K": 4, "FUSED_REDUCE": fused}
        run = template.build(problem, template.full_params(problem, config), str(tmp_path))
        poison(ops)
        run(ops)
        outs.append(ops.out.clone())
    assert check(problem, outs[1], reference(problem, ops)).ok
    assert torch.equal(outs[0], outs[1])


def test_splitk_fused_source_and_refusals():
    problem = make_problem(m=24, n=40, k=200, dtype="bfloat16", bias="n", device="cpu")
    template = get_template(SPLITK)
    source = template.render(problem, template.full_params(problem, {**FUSED, "SPLIT_K": 4}))
    tree = ast.parse(source)
    (kernel,) = [n for n in tree.body if isinstance(n, ast.FunctionDef)]  # no reduce kernel
    names = [arg.arg for arg in kernel.args.args]
    assert names[:6] == ["A", "B", "WS", "C", "BIAS", "COUNTERS"] and "stride_cm" in names
    assert "tl.debug_barrier()" in source
    assert 'tl.atomic_add(COUNTERS + pid, 1, sem="acq_rel"' in source
    assert "if arrived == SPLIT_K - 1:" in source and "SPLIT_K: tl.constexpr = 4" in source
    assert 'cache_modifier=".cg"' in source and "tl.atomic_xchg(COUNTERS + pid, 0" in source
    assert "total += bias.to(tl.float32)" in source
    plain = template.render(problem, template.full_params(problem, {**TILE, "SPLIT_K": 4}))
    assert "COUNTERS" not in plain and "debug_barrier" not in plain
    with pytest.raises(ValueError, match="FUSED_REDUCE=1 needs ATOMIC_ADD=0"):
        template.full_params(problem, {**FUSED, "SPLIT_K": 4, "ATOMIC_ADD": 1})
    with pytest.raises(ValueError, match="FUSED_REDUCE must be 0 or 1"):
        template.full_params(problem, {**TILE, "SPLIT_K": 4, "FUSED_REDUCE": 2})
    assert template.keeps_buffers is True  # the workspace (and counters) are per runnable


class _FakeKernel:
    """Stands in for a compiled kernel: records launches and warmups and their arguments."""

    def __init__(self, name, log):
        self.name, self.log = name, log

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.log.append(("run", self.name, grid, args, kwargs))

    def warmup(self, *args, grid, **kwargs):
        self.log.append(("warmup", self.name, grid, args, kwargs))
        return self.name


@pytest.mark.parametrize("fused", [0, 1])
def test_splitk_warmup_compiles_what_run_launches(fused, tmp_path, monkeypatch):
    """The compile pool warms a runnable up without launching: it must compile the kernels
    `run` launches, on the same argument kinds, or the binary it caches is not the one used."""
    from autotune_cli.templates import triton_splitk

    log = []
    monkeypatch.setattr(triton_splitk, "load_kernels", lambda source, kernel_dir, count: [
        _FakeKernel(name, log) for name in ("partial", "reduce")[:count]])
    problem = make_problem(m=24, n=40, k=200, dtype="float16", bias="n", device="cpu")
    template = get_template(SPLITK)
    run = template.build(problem, template.full_params(problem, {**TILE, "SPLIT_K": 4, "FUSED_REDUCE": fused}),
                         str(tmp_path))
    ops = make_operands(problem, seed=1, device="cpu")
    run(ops)
    launched = [entry[1:] for entry in log if entry[0] == "run"]
    log.clear()
    assert run.warmup(ops) == [name for name, *_ in launched]
    warmed = [entry[1:] for entry in log]
    assert [name for name, *_ in launched] == (["partial"] if fused else ["partial", "reduce"])

    def kinds(args):
        return [type(a) if not isinstance(a, torch.Tensor) else (a.dtype, a.data_ptr()) for a in args]

    for (name, grid, args, kwargs), (w_name, w_grid, w_args, w_kwargs) in zip(launched, warmed):
        assert (name, grid, kwargs) == (w_name, w_grid, w_kwargs)
        assert kinds(args) == kinds(w_args)


# -- persistent TMA: the kernel ---------------------------------------------------------------

needs_interpreter_tma = pytest.mark.skipif(
    tma_module.interpreter_descriptor_problem() is not None,
    reason=f"{tma_module.interpreter_descriptor_problem()}",
)


@needs_interpreter_tma
@pytest.mark.parametrize("op", OPS, ids=["mm", "addmm_n", "addmm_mn"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_persistent_tma_computes_the_product(layout, op, tmp_path):
    # 40x72 in 32x32 tiles is 6 tiles for 4 programs: some programs take two tiles, and the
    # edge tiles lean on the descriptors' zero padding and clipped stores.
    dtype = DTYPE_OF_LAYOUT[layout]
    problem = make_problem(m=40, n=72, k=56, dtype=dtype, layout=layout, device="cpu", **op)
    template = get_template(TMA)
    assert template.unavailable_reason(problem, CPU) is None
    result = run_kernel(problem, template, TILE, tmp_path)
    assert result.correct, result.reasons
    assert result.discriminating
    assert result.run.programs == tma_module.INTERPRETER_SMS == 4


@needs_interpreter_tma
@pytest.mark.parametrize("flatten", [0, 1])
def test_persistent_tma_flatten_and_grid(flatten, tmp_path):
    problem = make_problem(m=96, n=48, k=80, dtype="float32", bias="n", device="cpu")
    template = get_template(TMA)
    config = {**TILE, "GROUP_M": 8, "FLATTEN": flatten}
    assert template.full_params(problem, config)["FLATTEN"] == flatten
    result = run_kernel(problem, template, config, tmp_path)
    assert result.correct, result.reasons
    assert result.discriminating
    assert result.run.programs == 4  # 3x2 tiles, 4 programs
    small = make_problem(m=32, n=32, k=32, dtype="float32", device="cpu")
    assert template.build(small, template.full_params(small, config), str(tmp_path)).programs == 1


@needs_interpreter_tma
def test_persistent_tma_offers_neither_a_bound_launch_nor_launch_parts(tmp_path):
    """Its allocator is set before every launch: a bound launch or torch.compile's own launch
    (launch_parts) would skip it, so the API calls it with Operands and routing keeps it opaque."""
    from autotune_cli.templates.base import bound

    problem = make_problem(m=32, n=32, k=32, dtype="float32", device="cpu")
    template = get_template(TMA)
    run = template.build(problem, template.full_params(problem, TILE), str(tmp_path))
    ops = make_operands(problem, seed=1, device="cpu")
    assert run.compiles and run.bind(ops) is None and run.launch_parts is None
    ops.out.fill_(float("nan"))
    bound(run, ops)(ops.a, ops.b, ops.out, None)  # through an Operands per call
    assert check(problem, ops.out, reference(problem, ops)).ok


@needs_interpreter_tma
def test_persistent_tma_rejects_a_misaligned_base(tmp_path):
    problem = make_problem(m=32, n=32, k=32, dtype="float16", device="cpu")
    template = get_template(TMA)
    run = template.build(problem, template.full_params(problem, TILE), str(tmp_path))
    ops = make_operands(problem, seed=1, device="cpu")
    storage = torch.empty(32 * 32 + 1, dtype=torch.float16)
    ops.a = storage[1:].view(32, 32)  # 2 bytes past an aligned address
    with pytest.raises(ValueError, match="16-byte aligned"):
        run(ops)


def test_persistent_tma_source():
    template = get_template(TMA)
    problem = make_problem(m=64, n=64, k=64, dtype="bfloat16", layout="tn", bias="n")
    params = template.full_params(problem, TILE)
    assert params["FLATTEN"] == 1 and params["ACC_TYPE"] == "tl.float32"
    source = template.render(problem, params)
    ast.parse(source)
    assert "tl.make_tensor_descriptor(A, shape=[K, M]" in source  # A described as stored
    assert "a_desc.load([off_k, off_m]).T" in source
    assert "b_desc.load([off_k, off_n])" in source and "shape=[K, N]" in source
    assert "c_desc.store(" in source and "flatten=True" in source
    assert "NUM_SMS: tl.constexpr" in source and "BIAS + offs_m" in source
    assert "a.to(tl.float32)" not in source  # CUDA: no interpreter upcast
    nt = make_problem(m=64, n=64, k=64, dtype="float32", layout="nt", allow_tf32=True)
    nt_source = template.render(nt, template.full_params(nt, {**TILE, "FLATTEN": 0}))
    ast.parse(nt_source)
    assert "b_desc.load([off_n, off_k]).T" in nt_source and "shape=[N, K]" in nt_source
    assert 'input_precision="tf32"' in nt_source and "flatten=True" not in nt_source
    assert "BIAS + offs_m" not in nt_source


# -- persistent TMA: when it is unavailable ---------------------------------------------------

def test_tma_unavailable_below_hopper_and_on_unknown_devices():
    template = get_template(TMA)
    problem = make_problem(m=4096, n=4096, k=4096, dtype="bfloat16")
    assert template.unavailable_reason(problem, H200) is None
    assert "9.0" in template.unavailable_reason(problem, A100)
    assert template.unavailable_reason(problem, DeviceInfo("cuda", "NVIDIA B200", capability="10.0")) is None
    assert template.unavailable_reason(problem, DeviceInfo("cuda", "mystery", capability="")) is not None
    amd = DeviceInfo("cuda", "AMD Instinct MI300X", capability="9.4")
    assert "NVIDIA" in template.unavailable_reason(problem, amd)


@pytest.mark.parametrize("spec, operand", [
    (dict(m=1000, n=3000, k=777, dtype="float16"), "A rows are 1554 B"),          # K * 2 B
    (dict(m=1001, n=3000, k=776, dtype="float16", layout="tn"), "A rows are 2002 B"),  # A stored [K, M]
    (dict(m=64, n=64, k=777, dtype="bfloat16", layout="nt"), "B rows are 1554 B"),  # B stored [N, K]
    (dict(m=64, n=100, k=64, dtype="bfloat16", layout="nt"), "C rows are 200 B"),
    (dict(m=64, n=64, k=3, dtype="float32"), "A rows are 12 B"),
])
def test_tma_unavailable_for_misaligned_rows(spec, operand):
    problem = make_problem(**spec)
    reason = get_template(TMA).unavailable_reason(problem, H200)
    assert reason is not None and operand in reason and "16 bytes" in reason
    fine = make_problem(m=1000, n=3000, k=776, dtype="float16", layout="tt")  # 1552, 2000, 6000 B
    assert get_template(TMA).unavailable_reason(fine, H200) is None


def test_tma_unavailable_when_triton_lacks_the_api(monkeypatch):
    template = get_template(TMA)
    problem = make_problem(m=64, n=64, k=64, dtype="float16")
    monkeypatch.setattr(tma_module, "descriptor_api_problem", lambda: "triton 3.2 lacks it")
    assert template.unavailable_reason(problem, H200) == "triton 3.2 lacks it"
    assert template.unavailable_reason(problem.with_device("cpu"), CPU) == "triton 3.2 lacks it"


def test_tma_cpu_follows_the_interpreter(monkeypatch):
    template = get_template(TMA)
    problem = make_problem(m=64, n=64, k=64, dtype="float16", device="cpu")
    expected = tma_module.interpreter_descriptor_problem()
    assert template.unavailable_reason(problem, CPU) == expected
    import triton  # noqa: F401  (triton 3.9's interpreter runs descriptors)

    assert tma_module.interpreter_descriptor_problem() is None
    monkeypatch.setattr(tma_module, "interpreter_descriptor_problem", lambda: "no descriptors here")
    assert template.unavailable_reason(problem, CPU) == "no descriptors here"


def test_tma_api_probe_reads_the_installed_version(monkeypatch):
    tma_module.descriptor_api_problem.cache_clear()
    try:
        monkeypatch.setattr(tma_module, "_imported", lambda name: None)  # as in a parent process
        monkeypatch.setattr(tma_module, "installed_triton_version", lambda: (3, 3))
        assert "3.3" in tma_module.descriptor_api_problem()
        tma_module.descriptor_api_problem.cache_clear()
        monkeypatch.setattr(tma_module, "installed_triton_version", lambda: (3, 6))
        assert tma_module.descriptor_api_problem() is None
    finally:
        tma_module.descriptor_api_problem.cache_clear()


# -- heuristics -------------------------------------------------------------------------------

def test_heuristics_registered_for_cuda_and_cpu():
    assert isinstance(lookup_heuristic(TMA, "cuda", "mm"), tma_heuristics.PersistentTMACuda)
    assert isinstance(lookup_heuristic(TMA, "cpu", "addmm"), tma_heuristics.PersistentTMACpu)
    assert isinstance(lookup_heuristic(SPLITK, "cuda", "addmm"), splitk_heuristics.SplitKCuda)
    assert isinstance(lookup_heuristic(SPLITK, "cpu", "mm"), splitk_heuristics.SplitKCpu)


def assert_valid_split(problem, config):
    split, block_k = config["SPLIT_K"], config["BLOCK_K"]
    assert split in (2, 4, 8, 16)
    assert problem.k // split >= block_k
    assert (split - 1) * k_per_split(problem.k, split, block_k) < problem.k  # no empty slice
    assert split * problem.m * problem.n <= splitk_heuristics.SPLITK_MAX_WORKSPACE


@pytest.mark.parametrize("spec", [
    dict(m=16, n=4096, k=16384, dtype="bfloat16"),
    dict(m=64, n=8192, k=8192, dtype="float16"),
    dict(m=16, n=4096, k=1100, dtype="bfloat16", bias="n"),
])
def test_splitk_offered_for_small_mn_and_long_k(spec):
    problem = make_problem(**spec)
    configs = list(lookup_heuristic(SPLITK, "cuda", problem.op).get_configs(problem))
    assert configs
    for config in configs:
        assert_valid_split(problem, config)
        assert config["BLOCK_M"] <= max(16, problem.m)  # scaled down to the problem
    assert len({tuple(sorted(c.items())) for c in configs}) == len(configs)


def test_splitk_filters_slices_that_would_be_empty_or_short():
    problem = make_problem(m=16, n=4096, k=1100, dtype="bfloat16")
    # 16 slices of 1100: each rounds up to 128 (two BK64 steps), so 9+ slices are empty.
    assert not splitk_heuristics.split_fits(problem, {"SPLIT_K": 16, "BLOCK_K": 64})
    assert not splitk_heuristics.split_fits(problem, {"SPLIT_K": 8, "BLOCK_K": 256})  # 137 < 256
    assert not splitk_heuristics.split_fits(problem, {"SPLIT_K": 4, "BLOCK_K": 128})  # 3 x 384 >= 1100
    assert splitk_heuristics.split_fits(problem, {"SPLIT_K": 4, "BLOCK_K": 64})  # 4 x 320, last is 140
    assert splitk_heuristics.split_fits(problem, {"SPLIT_K": 2, "BLOCK_K": 128})
    assert not splitk_heuristics.split_fits(problem, {"SPLIT_K": 1, "BLOCK_K": 16})
    wide = make_problem(m=2048, n=1024, k=8192)  # M*N = 2^21: 16 planes pass 2^24 floats
    assert not splitk_heuristics.split_fits(wide, {"SPLIT_K": 16, "BLOCK_K": 64})
    assert splitk_heuristics.split_fits(wide, {"SPLIT_K": 16, "BLOCK_K": 64, "ATOMIC_ADD": 1})


@pytest.mark.parametrize("spec", [
    dict(m=4096, n=4096, k=4096),   # M*N too large
    dict(m=16, n=4096, k=512),      # K too short
    dict(m=8, n=8, k=4096, batch=4),  # bmm: not served
])
def test_splitk_not_offered(spec):
    problem = make_problem(**spec)
    assert list(lookup_heuristic(SPLITK, "cuda", problem.op).get_configs(problem)) == []


def test_splitk_expands_user_and_exhaustive_spaces():
    problem = make_problem(m=16, n=4096, k=16384, dtype="bfloat16")
    heuristic = lookup_heuristic(SPLITK, "cuda", "mm")
    tile = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 8, "num_stages": 3, "num_warps": 4}
    configs = list(heuristic.get_configs(problem, "default", [tile]))
    # each split with the two-launch and the one-launch reduction
    assert sorted((c["SPLIT_K"], c["FUSED_REDUCE"]) for c in configs) == [
        (split, fused) for split in (2, 4, 8, 16) for fused in (0, 1)]
    atomic = list(heuristic.get_configs(problem, "default", [{**tile, "ATOMIC_ADD": 1}]))
    assert [c["FUSED_REDUCE"] for c in atomic] == [0, 0, 0, 0]  # never atomic and fused
    exhaustive = list(heuristic.get_configs(problem, "exhaustive"))
    assert len(exhaustive) > 100
    for config in exhaustive:
        assert_valid_split(problem, config)
    both = {(tuple(sorted((k, v) for k, v in c.items() if k != "FUSED_REDUCE")), c["FUSED_REDUCE"])
            for c in exhaustive}
    assert len(both) == len(exhaustive) and {f for _, f in both} == {0, 1}
    assert len([c for c in exhaustive if c["FUSED_REDUCE"]]) * 2 == len(exhaustive)


def test_splitk_fused_offered_for_decode_shapes():
    problem = make_problem(m=16, n=4096, k=4096, dtype="bfloat16", device="cuda")
    configs = list(lookup_heuristic(SPLITK, "cuda", problem.op).get_configs(problem))
    fused = [c for c in configs if c.get("FUSED_REDUCE")]
    assert len(fused) >= 8 and all(not c.get("ATOMIC_ADD") for c in configs if c.get("FUSED_REDUCE"))
    template = get_template(SPLITK)
    for config in fused:
        assert_valid_split(problem, config)
        assert config["BLOCK_M"] == 16
        assert template.full_params(problem, config)["FUSED_REDUCE"] == 1
    # at least one keeps two programs per SM of an H200 busy
    assert max(problem.n // c["BLOCK_N"] * c["SPLIT_K"] for c in fused) >= 2 * H200.sm_count
    for spec in (dict(m=8, n=14336, k=4096), dict(m=16, n=4096, k=14336)):
        other = make_problem(dtype="bfloat16", **spec)
        assert any(c.get("FUSED_REDUCE") for c in lookup_heuristic(SPLITK, "cuda", "mm").get_configs(other))
    # the tuner's choices keep them: nothing pruned for shared memory or registers on an H200
    result = get_choices(problem, H200, TuneSettings(device="cuda"), templates=[template])
    assert result.pruned == [] and sum(bool(c.config_dict.get("FUSED_REDUCE")) for c in result.choices) == len(fused)
    # ATOMIC_ADD=1 with FUSED_REDUCE=1 is refused everywhere
    assert not splitk_heuristics.split_fits(problem, {"SPLIT_K": 4, "BLOCK_K": 64, "ATOMIC_ADD": 1, "FUSED_REDUCE": 1})
    assert splitk_heuristics.split_fits(problem, {"SPLIT_K": 4, "BLOCK_K": 64, "FUSED_REDUCE": 1})
    with pytest.raises(ValueError, match="FUSED_REDUCE=1 needs ATOMIC_ADD=0"):
        template.full_params(problem, {**fused[0], "ATOMIC_ADD": 1})
    cpu = make_problem(m=16, n=64, k=1024, dtype="float16", device="cpu")
    assert any(c.get("FUSED_REDUCE") for c in lookup_heuristic(SPLITK, "cpu", "mm").get_configs(cpu))


def test_tma_heuristic_scales_and_keeps_flatten():
    heuristic = lookup_heuristic(TMA, "cuda", "mm")
    big = make_problem(m=4096, n=4096, k=4096, dtype="bfloat16")
    configs = list(heuristic.get_configs(big))
    assert len(configs) == len(spaces.shipped_configs("triton_persistent_tma_cuda")) >= 8
    assert {c.get("FLATTEN", 1) for c in configs} == {0, 1}
    for c in configs:  # operand stages + the staged output tile fit an H200's 227 KiB
        operands = (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] * c["num_stages"]
        smem = 2 * (operands + c["BLOCK_M"] * c["BLOCK_N"])
        assert smem <= H200.smem_per_block
    skinny = make_problem(m=16, n=4096, k=4096, dtype="bfloat16")
    assert {c["BLOCK_M"] for c in heuristic.get_configs(skinny)} == {16}
    cpu = list(lookup_heuristic(TMA, "cpu", "mm").get_configs(make_problem(m=64, n=64, k=64, device="cpu")))
    assert 1 <= len(cpu) <= 4


def test_shipped_config_extras_are_checked():
    good = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "num_stages": 3, "num_warps": 4}
    parsed = spaces.parse_configs({"configs": [{**good, "SPLIT_K": 4, "FLATTEN": 0}]}, "x.json")
    assert parsed == ({**good, "GROUP_M": 8, "SPLIT_K": 4, "FLATTEN": 0},)
    with pytest.raises(UserError, match="SPLIT_K=3"):
        spaces.parse_configs({"configs": [{**good, "SPLIT_K": 3}]}, "x.json")
    with pytest.raises(UserError, match="unknown config key"):
        spaces.parse_configs({"configs": [{**good, "SPLITK": 4}]}, "x.json")
    for name in ("triton_persistent_tma_cuda", "triton_persistent_tma_cpu",
                 "triton_splitk_cuda", "triton_splitk_cpu"):
        assert spaces.shipped_configs(name)
    shipped = spaces.shipped_configs("triton_splitk_cuda")
    assert all(c["SPLIT_K"] >= 2 and not c.get("ATOMIC_ADD") for c in shipped)  # deterministic
    assert {c.get("FUSED_REDUCE", 0) for c in shipped} == {0, 1}
    parsed = spaces.parse_configs({"configs": [{**good, "SPLIT_K": 4, "FUSED_REDUCE": 1}]}, "x.json")
    assert parsed[0]["FUSED_REDUCE"] == 1
    with pytest.raises(UserError, match="FUSED_REDUCE=2"):
        spaces.parse_configs({"configs": [{**good, "SPLIT_K": 4, "FUSED_REDUCE": 2}]}, "x.json")


def test_params_str_names_the_new_knobs():
    problem = make_problem(m=16, n=4096, k=16384, dtype="bfloat16")
    params = get_template(SPLITK).full_params(problem, {**TILE, "SPLIT_K": 8})
    assert "sk8" in params_str(params) and "atomic0" in params_str(params) and "fused0" in params_str(params)
    assert "flat1" in params_str(get_template(TMA).full_params(problem, TILE))


# -- choices on a (fake) H200 and A100 --------------------------------------------------------

def uids(result):
    return {c.uid for c in result.choices}


def test_choices_on_h200_decode_shape_include_both():
    problem = make_problem(m=16, n=4096, k=16384, dtype="bfloat16")
    # without swap-AB, which would leave the plain and persistent tiles out (choices.decode_stage)
    selection = (TMA, SPLITK, "triton::mm", "aten::mm")
    result = get_choices(problem, H200, TuneSettings(device="cuda", templates=selection))
    assert {TMA, SPLITK, "triton::mm", "aten::mm"} <= uids(result)
    assert result.pruned == []
    for choice in result.choices:
        if choice.uid == SPLITK:
            assert_valid_split(problem, choice.config_dict)


def test_choices_on_h200_square_shape_have_tma_not_splitk():
    problem = make_problem(m=4096, n=4096, k=4096, dtype="bfloat16")
    result = get_choices(problem, H200, TuneSettings(device="cuda"))
    assert TMA in uids(result) and SPLITK not in uids(result)
    assert set(result.pruned_counts()) == {"tile_model"}  # no static stage prunes; only small tiles go


def test_choices_prune_tma_with_a_reason():
    decode = make_problem(m=16, n=4096, k=16384, dtype="bfloat16")
    on_a100 = get_choices(decode, A100, TuneSettings(device="cuda"))
    assert TMA not in uids(on_a100) and SPLITK in uids(on_a100)
    reasons = {p.reason for p in on_a100.pruned if p.choice.uid == TMA}
    assert len(reasons) == 1 and "compute capability" in reasons.pop()
    odd = make_problem(m=1000, n=3000, k=777, dtype="float16")
    on_h200 = get_choices(odd, H200, TuneSettings(device="cuda"))
    assert TMA not in uids(on_h200) and {p.stage for p in on_h200.pruned if p.choice.uid == TMA} == {"hardware"}


# -- on a GPU (skipped without one) -----------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("uid, spec", [
    (TMA, dict(m=256, n=384, k=512, dtype="bfloat16", layout="tn", bias="n")),
    (SPLITK, dict(m=16, n=512, k=4096, dtype="float16", layout="nt", bias="mn")),
])
def test_gpu_persistent_tma_and_splitk_verify(uid, spec, tmp_path):
    from autotune_cli.hardware.device import probe_device

    problem = make_problem(device="cuda", **spec)
    device = probe_device("cuda")
    template = get_template(uid)
    if template.unavailable_reason(problem, device):
        pytest.skip(template.unavailable_reason(problem, device))
    config = next(iter(lookup_heuristic(uid, "cuda", problem.op).get_configs(problem)))
    run = template.build(problem, template.full_params(problem, config), str(tmp_path))
    ops = make_operands(problem, seed=3, device="cuda")
    ref = reference(problem, ops)
    poison(ops)
    run(ops)
    torch.cuda.synchronize()
    verdict = check(problem, ops.out, ref)
    assert verdict.ok, verdict.reason


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [
    dict(m=16, n=4096, k=4096, dtype="bfloat16"),
    dict(m=7, n=1000, k=3000, dtype="float16", layout="nt", bias="n"),
])
def test_gpu_fused_splitk_is_the_two_launch_result_every_time(spec, tmp_path):
    """On the GPU the programs of a tile really run at once: the one-launch reduction (per-tile
    counter, the last program sums) gives bit for bit the two-launch result, on every one of
    many calls in a row (a counter left wrong or a plane read before it was stored would
    show as a differing call)."""
    problem = make_problem(device="cuda", **spec)
    template = get_template(SPLITK)
    tile = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 8, "num_stages": 4, "num_warps": 4,
            "SPLIT_K": 8}
    ops = make_operands(problem, seed=5, device="cuda")
    two = template.build(problem, template.full_params(problem, {**tile, "FUSED_REDUCE": 0}), str(tmp_path))
    two(ops)
    expected = ops.out.clone()
    assert check(problem, expected, reference(problem, ops)).ok
    one = template.build(problem, template.full_params(problem, {**tile, "FUSED_REDUCE": 1}), str(tmp_path))
    for _ in range(200):
        poison(ops)
        one(ops)
        torch.cuda.synchronize()
        assert torch.equal(ops.out, expected)
