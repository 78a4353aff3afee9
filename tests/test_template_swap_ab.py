"""triton::mm_swap_ab: C^T = B^T A^T for decode shapes (M <= 64).

The kernel runs for real under Triton's interpreter against a float64 reference on every
layout, for mm, addmm (bias n and mn) and bmm, with M, N and K off the block sizes and M past
one tile; the CLI tunes it through the real pipeline (worker processes, verification) on the
CPU; its heuristic, its M <= 64 limit, the shared-memory prune of its space, and (with
Triton's NVIDIA backend, no GPU needed) its sm_90 binaries through the compile pool are
checked; on a GPU the CLI tunes a decode problem with it."""

import ast
import json
import os
from pathlib import Path

import pytest

from autotune_cli.candidates.choices import get_choices
from autotune_cli.hardware.device import DeviceInfo
from autotune_cli.heuristics import lookup_heuristic
from autotune_cli.heuristics import swap_ab
from autotune_cli.heuristics.spaces import shipped_space
from autotune_cli.problem import make_problem
from autotune_cli.settings import TuneSettings
from autotune_cli.templates import get_template, templates_for
from autotune_cli.templates import triton_swap_ab as swap_module
from conftest import ran_verified
from helpers_kernels import compile_through_pool, run_kernel
from helpers_devices import H200

SWAP = "triton::mm_swap_ab"
TILE = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 32, "num_stages": 3, "num_warps": 4}
BEST_4096 = {"BLOCK_N": 64, "BLOCK_K": 256, "num_stages": 5, "num_warps": 4}  # H200, 16x4096x{4096,14336}
BEST_14336 = {"BLOCK_N": 128, "BLOCK_K": 64, "num_stages": 5, "num_warps": 4}  # H200, 8x14336x4096

# Kernels run in this process need the interpreter (conftest sets it where there is no GPU).
in_process = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
                                reason="runs Triton on CPU tensors in-process: needs TRITON_INTERPRET=1")


def swap_choices(result):
    return [c for c in result.choices if c.uid == SWAP]


# -- the template and its source --------------------------------------------------------------

def test_registered_for_small_m_only():
    template = get_template(SWAP)
    assert template.backend == "triton" and template.ops == ("mm", "addmm", "bmm")
    for spec in (dict(m=1), dict(m=16, bias="n"), dict(m=64, batch=2), dict(m=5, layout="tt")):
        problem = make_problem(n=4096, k=4096, **spec)
        assert SWAP in {t.uid for t in templates_for(problem)}
    for m in (65, 128, 4096):
        problem = make_problem(m=m, n=4096, k=4096)
        assert not template.supports(problem) and SWAP not in {t.uid for t in templates_for(problem)}


def test_renders_real_triton_with_what_the_problem_fixes():
    template = get_template(SWAP)
    problem = make_problem(m=5, n=200, k=100, dtype="bfloat16", bias="n", layout="nt", device="cpu")
    params = template.full_params(problem, {**TILE, "GROUP_M": 8})  # a GROUP_M is ignored
    assert "GROUP_M" not in params
    assert params["EVEN_K"] is False and params["EVEN_N"] is False  # 100 % 32, 200 % 64
    source = template.render(problem, params)
    tree = ast.parse(source)
    (kernel,) = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    assert kernel.name.startswith("mm_swap_ab_")
    assert ast.unparse(kernel.decorator_list[0]) == "triton.jit(do_not_specialize=['M'])"
    assert [a.arg for a in kernel.args.args][:7] == ["A", "B", "C", "BIAS", "M", "N", "K"]
    assert "BLOCK_M: tl.constexpr = 16" in source and "BLOCK_N: tl.constexpr = 64" in source
    assert "acc = tl.zeros((BLOCK_N, BLOCK_M)" in source
    assert "acc = tl.dot(bt, at, acc, out_dtype=tl.float32)" in source  # B^T A^T
    assert "at = at.to(tl.float32)" in source  # bf16 upcast under the interpreter
    assert "k_ok = offs_k < K - k_start" in source and "mask=n_ok & k_ok[None, :]" in source
    assert "acc += bias.to(tl.float32)" in source and "program_id(1)" not in source
    assert "GROUP_M" not in source  # no grouping
    # on a GPU: no upcast; with EVEN_K and EVEN_N no K masks and B read unmasked
    even = make_problem(m=16, n=4096, k=4096, dtype="bfloat16")
    gpu = template.render(even, template.full_params(even, {**BEST_4096, "BLOCK_M": 16}))
    assert "at.to(tl.float32)" not in gpu and "k_ok" not in gpu
    assert "bt = tl.load(bt_ptrs)\n" in gpu and "bias" not in gpu.split("acc is C^T")[1]
    # float32 keeps the precision the problem asks for
    for tf32, precision in ((True, "tf32"), (False, "ieee")):
        fp32 = make_problem(m=16, n=256, k=256, dtype="float32", allow_tf32=tf32)
        assert f'input_precision="{precision}"' in template.render(fp32, template.full_params(fp32, TILE))
    bmm = make_problem(m=8, n=64, k=64, batch=3, device="cpu")
    assert "batch = tl.program_id(1)" in template.render(bmm, template.full_params(bmm, TILE))


def test_source_hash_covers_the_jinja_and_the_module():
    template = get_template(SWAP)
    text = template.source_text()
    assert Path(swap_module.TEMPLATE_FILE).read_text() in text
    assert Path(swap_module.__file__).read_text() in text
    assert len(template.source_hash()) == 16
    assert template.source_hash() not in {get_template(u).source_hash() for u in ("triton::mm", "triton::mm_splitk")}


def test_sizes_share_one_kernel(tmp_path):
    """M, N, K are runtime arguments (M not even specialized): decode problems of any M and
    sizes that keep EVEN_K / EVEN_N render the same text and share one module."""
    template = get_template(SWAP)
    sources = set()
    for m, n, k in ((1, 256, 512), (5, 4096, 4096), (16, 14336, 4096)):
        problem = make_problem(m=m, n=n, k=k, dtype="bfloat16")
        sources.add(template.render(problem, template.full_params(problem, TILE)))
    assert len(sources) == 1
    odd = make_problem(m=16, n=200, k=4096, dtype="bfloat16")
    assert template.render(odd, template.full_params(odd, TILE)) not in sources  # EVEN_N baked in


class _FakeKernel:
    def __init__(self, log):
        self.log = log

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.log.append(("run", grid, args, kwargs))

    def warmup(self, *args, grid, **kwargs):
        self.log.append(("warmup", grid, args, kwargs))
        return "compiled"


@pytest.mark.parametrize("spec, grid", [
    (dict(m=16, n=4096, k=4096), (64, 1)),           # one M tile, 4096 / 64 column blocks
    (dict(m=70, n=200, k=64, bias="mn"), (5 * 4, 1)),  # 5 M tiles of 16 x 4 column blocks
    (dict(m=8, n=128, k=64, batch=3), (2, 3)),        # bmm: the batch on axis 1
])
def test_grid_and_warmup_match_the_launch(spec, grid, tmp_path, monkeypatch):
    """The compile pool warms a runnable up without launching: it must compile what `run`
    launches, with the same grid and argument kinds."""
    import torch

    from autotune_cli.runner.verify import make_operands

    log = []
    monkeypatch.setattr(swap_module, "load_kernel", lambda source, kernel_dir: _FakeKernel(log))
    problem = make_problem(dtype="float16", device="cpu", **spec)
    template = get_template(SWAP)
    run = template.build(problem, template.full_params(problem, TILE), str(tmp_path))
    ops = make_operands(problem, seed=1, device="cpu")
    run(ops)
    assert run.warmup(ops) == ["compiled"]
    (_, run_grid, run_args, run_kwargs), (_, warm_grid, warm_args, warm_kwargs) = log
    assert run_grid == warm_grid == grid
    assert run_kwargs == warm_kwargs == {"num_warps": 4, "num_stages": 3}

    def kinds(args):
        return [(a.dtype, a.data_ptr()) if isinstance(a, torch.Tensor) else a for a in args]

    assert kinds(run_args) == kinds(warm_args)
    assert run_args[4:7] == (problem.m, problem.n, problem.k)


# -- the kernel under the interpreter ---------------------------------------------------------

LAYOUTS = ["nn", "nt", "tn", "tt"]
DTYPE_OF_LAYOUT = {"nn": "float16", "nt": "bfloat16", "tn": "float32", "tt": "float16"}
OPS = [dict(), dict(bias="n"), dict(bias="mn")]


@in_process
@pytest.mark.parametrize("op", OPS, ids=["mm", "addmm_n", "addmm_mn"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_computes_the_product(layout, op, tmp_path):
    # M=5 in a 16-row tile, N=100 over two 64-column blocks (the second masked), K=72: the
    # last K step is 8 long, masked.
    problem = make_problem(m=5, n=100, k=72, dtype=DTYPE_OF_LAYOUT[layout], layout=layout, device="cpu", **op)
    result = run_kernel(problem, get_template(SWAP), TILE, tmp_path)
    assert result.correct, result.reasons
    assert result.discriminating


@in_process
@pytest.mark.parametrize("spec, tile", [
    (dict(m=16, n=128, k=64, dtype="bfloat16"), TILE),                          # EVEN_K and EVEN_N
    (dict(m=70, n=96, k=40, dtype="float16", layout="tn", bias="n"), TILE),      # 5 M tiles
    (dict(m=40, n=64, k=64, dtype="float32", layout="nt"), {**TILE, "BLOCK_M": 64}),  # one 64-row tile
    (dict(m=7, n=72, k=40, batch=3, dtype="bfloat16", layout="tt"), TILE),      # bmm
    (dict(m=1, n=64, k=64, dtype="float16"), TILE),                             # one row
], ids=["even", "m_tiles", "block_m64", "bmm", "m1"])
def test_edge_cases(spec, tile, tmp_path):
    problem = make_problem(device="cpu", **spec)
    result = run_kernel(problem, get_template(SWAP), tile, tmp_path, seed=3, calls=2)
    assert len(result.verdicts) == 2 and result.correct, result.reasons
    assert result.discriminating


# -- the heuristic ----------------------------------------------------------------------------

def test_heuristics_registered_for_cuda_and_cpu():
    assert isinstance(lookup_heuristic(SWAP, "cuda", "mm"), swap_ab.SwapABCuda)
    assert isinstance(lookup_heuristic(SWAP, "cuda", "bmm"), swap_ab.SwapABCuda)
    assert isinstance(lookup_heuristic(SWAP, "cpu", "addmm"), swap_ab.SwapABCpu)


@pytest.mark.parametrize("m, block_m", [(1, 16), (16, 16), (17, 32), (32, 32), (33, 64), (64, 64)])
def test_block_m_is_the_smallest_that_covers_m(m, block_m):
    problem = make_problem(m=m, n=4096, k=4096, dtype="bfloat16")
    for search in ("default", "exhaustive"):
        configs = list(lookup_heuristic(SWAP, "cuda", "mm").get_configs(problem, search))
        assert configs and {c["BLOCK_M"] for c in configs} == {block_m}


def test_default_list_leads_with_the_h200_bests_and_exhaustive_is_the_product():
    problem = make_problem(m=16, n=4096, k=4096, dtype="bfloat16")
    heuristic = lookup_heuristic(SWAP, "cuda", "mm")
    default = list(heuristic.get_configs(problem, "default"))
    assert default[0] == {**BEST_4096, "BLOCK_M": 16} and default[1] == {**BEST_14336, "BLOCK_M": 16}
    assert len(default) == len(shipped_space("triton_mm_swap_ab_cuda")) == 8
    exhaustive = list(heuristic.get_configs(problem, "exhaustive"))
    assert exhaustive[:8] == default  # the list first, then the rest of the product
    assert len(exhaustive) == 2 * 3 * 4 * 2 == len({tuple(sorted(c.items())) for c in exhaustive})
    for config in exhaustive:
        assert set(config) == {"BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages", "num_warps"}  # no GROUP_M
        assert config["BLOCK_N"] in (64, 128) and config["BLOCK_K"] in (64, 128, 256)
        assert config["num_stages"] in (3, 4, 5, 6) and config["num_warps"] in (4, 8)
    # a user's --space is taken as given (scaled to the problem), its GROUP_M dropped
    tile = {"BLOCK_M": 32, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_stages": 4, "num_warps": 8}
    expected = {k: v for k, v in tile.items() if k != "GROUP_M"}
    assert list(heuristic.get_configs(problem, "default", [tile])) == [{**expected, "BLOCK_M": 16}]
    wider = make_problem(m=40, n=4096, k=4096, dtype="bfloat16")
    assert list(heuristic.get_configs(wider, "default", [tile])) == [expected]  # two M tiles of 32
    # on the CPU two tiles, scaled to small problems
    cpu = list(lookup_heuristic(SWAP, "cpu", "mm").get_configs(make_problem(m=5, n=48, k=40, device="cpu")))
    assert 1 <= len(cpu) <= 2 and all(c["BLOCK_M"] == 16 and c["BLOCK_N"] == 64 for c in cpu)


def test_default_search_adds_a_short_list_on_an_h200():
    """The default search times every choice it is given: swap-AB adds its 8 configs to a
    decode problem's candidates (all fit an H200 at M <= 16), not its 48-config product."""
    problem = make_problem(m=16, n=4096, k=4096, dtype="bfloat16")
    result = get_choices(problem, H200, TuneSettings(device="cuda"))
    swaps = swap_choices(result)
    assert len(swaps) == 8 and not [p for p in result.pruned if p.choice.uid == SWAP]
    assert swaps[0].config_dict == {**BEST_4096, "BLOCK_M": 16}
    assert swaps[1].config_dict == {**BEST_14336, "BLOCK_M": 16}
    exhaustive = get_choices(problem, H200, TuneSettings(device="cuda", search="exhaustive", templates=(SWAP,)))
    assert exhaustive.considered == 48 and len(exhaustive.choices) == 40  # the product; 8 do not fit


@pytest.mark.parametrize("m", [65, 128, 4096])
def test_no_candidates_past_m_64(m):
    problem = make_problem(m=m, n=4096, k=4096, dtype="bfloat16")
    for search in ("default", "exhaustive"):
        result = get_choices(problem, H200, TuneSettings(device="cuda", search=search))
        assert result.choices and not swap_choices(result)
        assert not [p for p in result.pruned if p.choice.uid == SWAP]
    assert swap_choices(get_choices(make_problem(m=64, n=4096, k=4096, dtype="bfloat16"), H200,
                                    TuneSettings(device="cuda")))


@pytest.mark.parametrize("m, dtype", [(16, "bfloat16"), (64, "bfloat16"), (16, "float32")])
def test_shared_memory_prune_drops_what_a_small_device_cannot_hold(m, dtype):
    """(BLOCK_N + BLOCK_M) * BLOCK_K * dtype size * stages must fit the block's shared memory:
    the prune pipeline's shared_memory stage drops the rest, with the reason."""
    small = DeviceInfo(device_type="cuda", name="small", capability="8.6", sm_count=46, smem_per_block=101376)
    problem = make_problem(m=m, n=4096, k=4096, dtype=dtype)
    size = problem.dtype_size

    def need(c):
        return (c["BLOCK_N"] + c["BLOCK_M"]) * c["BLOCK_K"] * size * c["num_stages"]

    for search in ("default", "exhaustive"):
        result = get_choices(problem, small, TuneSettings(device="cuda", search=search, templates=(SWAP,)))
        kept = [c.config_dict for c in result.choices]
        dropped = result.pruned
        assert dropped and len(kept) + len(dropped) == result.considered
        if search == "exhaustive":
            assert kept  # 3 stages of 64 x 64 fit
        assert all(need(c) <= small.smem_per_block for c in kept)
        for item in dropped:
            assert item.stage == "shared_memory" and need(item.choice.config_dict) > small.smem_per_block
            assert f"needs {need(item.choice.config_dict)} B of shared memory" in item.reason
    roomy = get_choices(problem, H200, TuneSettings(device="cuda", templates=(SWAP,)))
    assert len(roomy.choices) > len(get_choices(problem, small, TuneSettings(device="cuda", templates=(SWAP,))).choices)


# -- through the CLI, on the CPU --------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["--m", 16, "--n", 256, "--k", 512, "--dtype", "bfloat16"],
    ["--m", 5, "--n", 200, "--k", 320, "--dtype", "float16", "--layout", "nt", "--bias"],
    ["--m", 16, "--n", 128, "--k", 96, "--dtype", "float32", "--layout", "tt"],
], ids=["16x256x512-bf16", "5x200x320-fp16-nt-bias", "16x128x96-fp32-tt"])
def test_cli_tunes_it_on_the_cpu(cli, cache_dir, args):
    code, out, err = cli("mm", "--device", "cpu", "--json", "--templates", SWAP, *args)
    assert code == 0, err
    doc = json.loads(out)
    candidates = doc["candidates"]
    assert len(candidates) == 2 and {c["uid"] for c in candidates} == {SWAP}
    assert all(c["status"] == "ok" for c in candidates), [(c["status"], c["error"]) for c in candidates]
    assert all(c["max_rel_error"] is not None for c in candidates)  # checked against float64
    assert doc["winner"]["uid"] == SWAP and doc["winner"]["params"]["BLOCK_M"] == 16
    assert doc["fingerprint"]["templates"] == {SWAP: get_template(SWAP).source_hash()}


def test_cli_refuses_it_past_m_64(cli, cache_dir):
    code, out, err = cli("mm", "--device", "cpu", "--json", "--templates", SWAP,
                         "--m", 65, "--n", 64, "--k", 64)
    assert code == 2 and "no candidates" in err and out == ""


# -- sm_90 binaries, compiled without a GPU ---------------------------------------------------

def _ptxas_missing() -> bool:
    try:
        import triton
    except ImportError:
        return True
    return not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists()


@pytest.mark.skipif(_ptxas_missing(), reason="needs Triton's NVIDIA backend (its bundled ptxas)")
def test_compiles_to_wgmma_for_sm90_without_a_gpu(tmp_path, monkeypatch):
    """The compile pool builds sm_90 binaries from the described H200: the two H200 bests on
    decode shapes, and an odd addmm; the swapped dot is Hopper's wgmma with the columns of C
    in its 64-row slot, and the shared memory Triton allots is what the prune stage counts."""
    triton_cache = tmp_path / "triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(triton_cache))
    described = DeviceInfo(device_type="cuda", name="NVIDIA H200 (described, not present)", capability="9.0",
                           sm_count=132, smem_per_block=232448, l2_bytes=50 << 20, runtime="12.8")
    cases = [
        (SWAP, make_problem(m=16, n=4096, k=4096, dtype="bfloat16"), {**BEST_4096, "BLOCK_M": 16}),
        (SWAP, make_problem(m=8, n=14336, k=4096, dtype="bfloat16"), {**BEST_14336, "BLOCK_M": 16}),
        (SWAP, make_problem(m=5, n=200, k=320, dtype="float16", layout="nt", bias="n"),
         {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_stages": 4, "num_warps": 4}),
    ]
    answers, pool = compile_through_pool(described, cases, tmp_path / "kernels", by_index=True)
    assert all(payload["ok"] for payload in answers.values()), answers
    metadata = [json.loads(p.read_text()) for p in triton_cache.rglob("mm_swap_ab_*.json")
                if not p.name.startswith("__grp__")]
    assert len(metadata) == 3
    by_stages = {(m["num_stages"], m["shared"]) for m in metadata}
    assert (5, (64 + 16) * 256 * 2 * 5) in by_stages and (5, (128 + 16) * 64 * 2 * 5) in by_stages
    ptx = "".join(p.read_text() for p in triton_cache.rglob("mm_swap_ab_*.ptx"))
    assert "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16" in ptx


# -- on a GPU (skipped without one) -----------------------------------------------------------

@pytest.mark.gpu
def test_gpu_tunes_a_decode_problem(cli, cache_dir):
    code, out, err = cli("mm", "--device", "cuda", "--json", "--templates", SWAP,
                         "--m", 16, "--n", 4096, "--k", 4096, "--dtype", "bfloat16")
    assert code == 0, err
    doc = json.loads(out)
    candidates = doc["candidates"]
    assert candidates and {c["uid"] for c in candidates} == {SWAP}
    assert all(ran_verified(c) for c in candidates), [(c["params"], c["status"], c["error"]) for c in candidates]
    assert doc["winner"]["uid"] == SWAP
