"""On a GPU: the CLI tunes real problems, Triton candidates compile and pass verification."""

import json

import pytest

from conftest import is_pick, ran_verified


@pytest.mark.gpu
@pytest.mark.parametrize("args", [
    ["--m", "512", "--n", "384", "--k", "256", "--dtype", "bfloat16"],
    ["--m", "300", "--n", "200", "--k", "100", "--dtype", "float32", "--layout", "tt", "--bias"],
    ["--m", "128", "--n", "256", "--k", "64", "--dtype", "float16", "--batch", "4", "--layout", "nt"],
])
def test_cuda_tune_end_to_end(cli, cache_dir, args):
    code, out, err = cli("mm", "--device", "cuda", "--json", *args)
    assert code == 0, err
    doc = json.loads(out)
    verified = [c for c in doc["candidates"] if ran_verified(c)]  # timed, or given up as far behind
    assert any(c["uid"].startswith("triton::") for c in verified), doc["candidates"]
    assert is_pick(doc["winner"], doc["candidates"])  # the fastest, or cuBLAS within its margin
    assert doc["fingerprint"]["device_type"] == "cuda" and doc["fingerprint"]["sm_count"] > 0


@pytest.mark.gpu
@pytest.mark.parametrize("args", [
    ["--m", "256", "--n", "1001", "--k", "100", "--dtype", "float16"],
    ["--m", "200", "--n", "777", "--k", "333", "--dtype", "bfloat16", "--bias", "--layout", "nt"],
    ["--m", "64", "--n", "2050", "--k", "40", "--dtype", "float16"],  # B's rows longer than a copy block
])
def test_cuda_alignment_templates_copy_and_verify(cli, cache_dir, args):
    """Misaligned rows on a GPU: the alignment templates copy operands with the Triton row
    copy into padded storage and write outputs with padded rows; every one verifies."""
    code, out, err = cli("mm", "--device", "cuda", "--json", *args)
    assert code == 0, err
    doc = json.loads(out)
    aligned = [c for c in doc["candidates"] if c["uid"] in ("aten::mm_aligned", "triton::mm_padded")]
    assert {c["uid"] for c in aligned} == {"aten::mm_aligned", "triton::mm_padded"}
    assert all(ran_verified(c) for c in aligned), [(c["uid"], c["status"], c.get("error")) for c in aligned]


@pytest.mark.gpu
def test_cuda_timing_process_reuses_the_offline_binaries(tmp_path, monkeypatch):
    """The compile pool's processes compile without CUDA (runner/offline_compile.py); a
    process on the GPU then finds every binary they built in Triton's cache and compiles
    none itself: the cache keys are the same."""
    import torch

    from autotune_cli.runner.verify import make_operands
    from autotune_cli.hardware.device import probe_device
    from autotune_cli.problem import make_problem
    from autotune_cli.templates import get_template
    from helpers_kernels import POOL_CONFIGS, compile_through_pool

    triton_cache = tmp_path / "triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(triton_cache))
    problem = make_problem(m=256, n=1024, k=4096, dtype="bfloat16", device="cuda")
    answers, pool = compile_through_pool(probe_device("cuda", 0),
                                         [(uid, problem, config) for uid, config in POOL_CONFIGS.items()],
                                         tmp_path / "kernels")
    assert all(p["ok"] for p in answers.values()), answers
    assert pool.offline_modes == {"offline": 2}  # compiled without CUDA, not the fallback
    before = sorted(p.name for p in triton_cache.rglob("*.cubin"))
    assert len(before) == 4, before
    for uid, config in POOL_CONFIGS.items():
        template = get_template(uid)
        params = template.full_params(problem, config)
        run = template.build(problem, params, str(tmp_path / "kernels"))
        ops = make_operands(problem, 0, "cuda", template.out_pitch(problem, params))
        run(ops)
        torch.cuda.synchronize()
        ref = ops.a.float() @ ops.b.float()
        assert torch.allclose(ops.out.float(), ref, rtol=3e-2, atol=0.5), uid
    after = sorted(p.name for p in triton_cache.rglob("*.cubin"))
    assert after == before  # nothing compiled again on the GPU


@pytest.mark.gpu
@pytest.mark.parametrize("rows,cols,pitch,extra_rows", [
    (777, 3000, 3000, 7),   # odd's B: rows exactly cols apart, K padded: one contiguous run
    (1000, 777, 784, 0),    # odd's A: narrow rows into a wider pitch: flat, padding zeroed
    (96, 50257, 50264, 0),  # lm_head's B (rows cut): wide rows into a wider pitch: flat too
], ids=["run", "flat", "flat-wide"])
def test_row_copy_forms_on_gpu(rows, cols, pitch, extra_rows):
    """The alignment templates' copy kernels on a GPU (compiled, not interpreted): every
    element lands, the padding is zero, and rows of the storage past the view keep theirs;
    without owning the padding, lm_head's B goes by row and the padding keeps what it held."""
    import torch

    from autotune_cli.templates.row_copy import copier

    src = torch.randn(rows, cols, dtype=torch.float16, device="cuda")
    storage = torch.full((rows + extra_rows, pitch), 7.0, dtype=torch.float16, device="cuda")
    copier(storage[:rows, :cols], owns_padding=True)(src)
    torch.cuda.synchronize()
    assert torch.equal(storage[:rows, :cols], src)
    assert torch.count_nonzero(storage[:rows, cols:]) == 0
    assert bool((storage[rows:] == 7.0).all())
    if pitch > cols and not extra_rows:  # by row: the view's elements only
        storage.fill_(7.0)
        copier(storage[:, :cols])(src)
        torch.cuda.synchronize()
        assert torch.equal(storage[:, :cols], src) and bool((storage[:, cols:] == 7.0).all())
