"""The split-key attention kernel for grouped-query attention at decode (routing/
decode_attention.py), through Triton's interpreter on the CPU: SDPA's values over the repeated
heads, under each kind of mask and split; and `autotune_cli.compile(..., split_keys=True)`
running it in place of SDPA where the plain fold would not be made (batch x K/V heads under
gqa.MIN_HEADS)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import autotune_cli
from autotune_cli.routing import decode_attention, gqa, split_choice
from helpers_llama import tiny_llama


def repeat_kv(x, n):
    """transformers' repeat_kv."""
    b, kv, s, d = x.shape
    return x[:, :, None, :, :].expand(b, kv, n, s, d).reshape(b, kv * n, s, d)


def sdpa_repeated(q, k, v, mask=None, scale=None):
    """SDPA over K and V repeated for the query heads, in float32 (the reference)."""
    n = q.shape[1] // k.shape[1]
    if mask is not None and mask.dtype != torch.bool:
        mask = mask.float()
    return F.scaled_dot_product_attention(q.float(), repeat_kv(k.float(), n), repeat_kv(v.float(), n),
                                          attn_mask=mask, scale=scale)


def operands(batch, heads, heads_kv, rows, keys, dim, dtype=torch.float32, seed=0):
    """q laid out as transformers makes it ([B, L, H, D] transposed: not contiguous), K, V."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, rows, heads, dim, generator=g).to(dtype).transpose(1, 2)
    k = torch.randn(batch, heads_kv, keys, dim, generator=g).to(dtype)
    v = torch.randn(batch, heads_kv, keys, dim, generator=g).to(dtype)
    return q, k, v


def some_keys(shape, seed=1):
    mask = torch.rand(shape, generator=torch.Generator().manual_seed(seed)) > 0.3
    mask[..., 0] = True  # every row sees one key at least
    return mask


@pytest.mark.parametrize("mask_kind", ["none", "bool one row", "bool each row", "float each row",
                                       "bool of one batch", "bool 2-D"])
@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("splits", [1, 3])
def test_the_kernel_gives_sdpas_values_over_the_repeated_heads(mask_kind, rows, splits):
    """130 keys (not a whole number of blocks; 3 splits of 64, 64 and 2), 8 query heads over
    2 K/V heads, batch 2."""
    q, k, v = operands(2, 8, 2, rows, 130, 16)
    mask = {"none": None,
            "bool one row": some_keys((2, 1, 1, 130)),
            "bool each row": some_keys((2, 1, rows, 130)),
            "float each row": torch.randn(2, 1, rows, 130, generator=torch.Generator().manual_seed(2)),
            "bool of one batch": some_keys((1, 1, 1, 130)),
            "bool 2-D": some_keys((1, 130))}[mask_kind]
    got = decode_attention.gqa_attention(q, k, v, mask, None, splits)
    assert got.shape == (2, 8, rows, 16) and got.dtype == q.dtype
    torch.testing.assert_close(got, sdpa_repeated(q, k, v, mask), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_kernel_in_half_precision_and_a_given_scale(dtype):
    """A decode step's shape (4 query heads a K/V head, one row), head size 64, 200 keys."""
    q, k, v = operands(1, 8, 2, 1, 200, 64, dtype)
    mask = some_keys((1, 1, 1, 200))
    got = decode_attention.gqa_attention(q, k, v, mask, 0.3, 4)
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), sdpa_repeated(q, k, v, mask, 0.3), rtol=2e-2, atol=2e-2)


def test_a_row_that_sees_no_key_is_zeros_as_in_sdpa():
    """A bool mask that hides every key of a row: zeros, as torch's SDPA gives (no split has a
    key to weigh), not NaN; the other row as before."""
    q, k, v = operands(1, 4, 1, 2, 100, 16)
    mask = some_keys((1, 1, 2, 100))
    mask[0, 0, 1] = False
    got = decode_attention.gqa_attention(q, k, v, mask, None, 2)
    assert (got[:, :, 1] == 0).all()
    torch.testing.assert_close(got, sdpa_repeated(q, k, v, mask), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_blocks_of_keys_no_row_sees_are_never_read(kind):
    """A static cache of 300 positions, 40 filled: the mask hides the rest (False, or -inf
    added). K and V past the first block of 64 keys are NaN: any read of them would make the
    output NaN (NaN x 0 is NaN), so the values equal to SDPA's over the filled positions say
    the hidden blocks were skipped."""
    q, k, v = operands(1, 8, 2, 1, 300, 16)
    visible = torch.arange(300) < 40
    mask = visible.expand(1, 1, 1, 300) if kind == "bool" else \
        torch.zeros(300).masked_fill(~visible, float("-inf")).expand(1, 1, 1, 300)
    poisoned_k, poisoned_v = k.clone(), v.clone()
    poisoned_k[:, :, decode_attention.BLOCK_KEYS:] = float("nan")
    poisoned_v[:, :, decode_attention.BLOCK_KEYS:] = float("nan")
    got = decode_attention.gqa_attention(q, poisoned_k, poisoned_v, mask, None, 3)
    torch.testing.assert_close(got, sdpa_repeated(q, k, v, mask), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_mask_of_finfo_min_weighs_as_in_sdpa(dtype):
    """transformers' older masks add the dtype's least value, not -inf: a row so masked
    everywhere is V's mean in SDPA, and a row whose one key is at -2.5e38 among -3e38 is
    that key's V; finite scores, so no block is skipped and none overflows to -inf."""
    q, k, v = operands(2, 8, 2, 1, 130, 16)
    low = torch.finfo(dtype).min
    mask = torch.zeros(2, 1, 1, 130, dtype=dtype)
    mask[1] = low
    if dtype == torch.float32:
        mask[0, 0, 0] = -3e38
        mask[0, 0, 0, 7] = -2.5e38
    got = decode_attention.gqa_attention(q, k, v, mask, None, 2)
    torch.testing.assert_close(got, sdpa_repeated(q, k, v, mask), rtol=1e-5, atol=1e-5)


def test_the_splits_fill_the_device_and_none_is_empty():
    """Two programs per multiprocessor where the keys allow, a split no shorter than a block
    of keys, and the last split holding keys."""
    assert decode_attention.split_count(8, 1024, 132) == 16  # 1024 keys: 16 blocks at most
    assert decode_attention.split_count(8, 8192, 132) == 32  # 33 wanted: 32 chunks of 4 blocks
    assert decode_attention.split_count(512, 8192, 132) == 1  # programs enough already
    for programs, keys in [(8, 1000), (3, 130), (1, 65), (8, 8191)]:
        splits = decode_attention.split_count(programs, keys, 132)
        chunk = decode_attention._chunk(keys, splits)
        assert chunk % decode_attention.BLOCK_KEYS == 0 and (splits - 1) * chunk < keys <= splits * chunk


def test_what_the_kernel_serves():
    assert decode_attention.serves(4, 128, 128, 1024, torch.bfloat16)
    assert not decode_attention.serves(decode_attention.MAX_ROWS + 1, 128, 128, 1024, torch.bfloat16)
    assert not decode_attention.serves(4, 128, 64, 1024, torch.bfloat16)  # V's head size differs
    assert not decode_attention.serves(4, 96, 96, 1024, torch.bfloat16)  # not a power of two
    assert not decode_attention.serves(4, 128, 128, None, torch.bfloat16)  # a dynamic cache
    assert not decode_attention.serves(4, 128, 128, 1024, torch.float64)


# Compiles the two kernels for an H200 (sm_90) on meta tensors, through the compile pool's
# stand-in driver, then traces the op as AOT does on a GPU (fake CUDA tensors): no GPU, no
# interpreter (it must not be set before triton is imported).
SM90_COMPILE = """
import torch
from autotune_cli.hardware.device import DeviceInfo
from autotune_cli.routing import decode_attention as da
from autotune_cli.runner import offline_compile
assert offline_compile.install(DeviceInfo(device_type="cuda", name="H200", capability="9.0", sm_count=132,
                                          runtime="12.8")) is None
for dtype, rows, dim, mask_dtype in [(torch.bfloat16, 1, 128, torch.bool), (torch.float16, 16, 64, torch.float16),
                                     (torch.float32, 1, 256, None)]:
    q = torch.empty(2, rows, 32, dim, device="meta", dtype=dtype).transpose(1, 2)
    k = torch.empty(2, 8, 1024, dim, device="meta", dtype=dtype)
    mask = None if mask_dtype is None else torch.empty(2, 1, 1, 1024, device="meta", dtype=mask_dtype)
    _, launches = da._launches(q, k, k, mask, None, da.split_count(16, 1024, 132))
    for kernel, grid, args, options in launches:
        kernel.warmup(*args, grid=grid, **options)

# as Inductor compiles the op's launches on a GPU: a Python float typed fp64 (the kernels keep fp32)
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

_, launches = da._launches(q, k, k, mask, None, 16)
for kernel, grid, args, options in launches:
    sizes = {n: v for n, v in options.items() if n not in ("num_warps", "num_stages")}
    signature, constexprs = {}, {}
    for i, (name, arg) in enumerate(zip(kernel.arg_names, (*args, *[None] * len(sizes)))):
        if name in sizes:
            signature[name], constexprs[(i,)] = "constexpr", sizes[name]
        elif isinstance(arg, torch.Tensor):
            signature[name] = "*" + {torch.float32: "fp32", torch.bool: "i1"}.get(arg.dtype, "fp32")
        else:
            signature[name] = "i32" if isinstance(arg, int) else "fp64"
    triton.compile(ASTSource(kernel, signature, constexprs), target=GPUTarget("cuda", 90, 32),
                   options={"num_warps": options["num_warps"], "num_stages": options.get("num_stages", 2)})

# what AOT makes of the op on a GPU (a triton_op: traced into): the kernels' launches
from torch._functorch.aot_autograd import aot_function
from torch._subclasses.fake_tensor import FakeTensorMode

op = da.register_op()
graphs = []
traced = aot_function(lambda q, k, v, m: op(q, k, v, m, None, 16), fw_compiler=lambda gm, _: graphs.append(gm) or gm)
with FakeTensorMode():
    q = torch.empty(1, 1, 32, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    k = torch.empty(1, 8, 1024, 128, device="cuda", dtype=torch.bfloat16)
    traced(q, k, k, torch.empty(1, 1, 1, 1024, device="cuda", dtype=torch.bool))
print("LAUNCHES", [sorted(n.kwargs["tensors_to_clone"]) for n in graphs[0].graph.nodes
                   if n.target is torch.ops.higher_order.triton_kernel_wrapper_functional])
"""


def test_the_kernels_compile_for_an_h200_without_a_gpu(tmp_path):
    """The interpreter runs what a GPU's compiler may refuse: Triton's NVIDIA backend builds
    both kernels for sm_90 (bf16 under a bool mask, fp16 rows of a chunk under an additive
    mask, fp32 with no mask, and with their float arguments typed fp64, as Inductor types a
    Python float), one binary each; and AOT traces the op (the triton_op a GPU registers)
    into the two launches, each writing its own buffers."""
    import triton

    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists():
        pytest.skip("this Triton has no NVIDIA backend's ptxas")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent.parent), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", SM90_COMPILE], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    cubins = sorted(p.name.split(".")[0] for p in tmp_path.rglob("*.cubin"))
    assert cubins == ["merge_kernel"] * 4 + ["split_kernel"] * 4
    # the op traced into on a GPU: the split kernel writes the shares, the merge the output
    assert "LAUNCHES [['ACC', 'ML'], ['OUT']]" in done.stdout


def test_the_kernel_must_lead_by_the_margin():
    """The measured choice: the kernel runs where its time leads the other form's by more
    than the margin; a tie keeps torch's op."""
    assert split_choice.kernel_wins(90.0, 100.0, 0.03)
    assert not split_choice.kernel_wins(97.5, 100.0, 0.03)
    assert not split_choice.kernel_wins(110.0, 100.0, 0.03)


def test_the_choice_checks_the_kernels_values_first():
    """Before the kernel may be timed, its output must be within the verifier's tolerance of
    SDPA's in float32: the kernel's own passes, one off by a few per cent does not."""
    q, k, v = operands(1, 8, 2, 1, 100, 16, torch.bfloat16)
    mask = some_keys((1, 1, 1, 100))
    attention = split_choice.Attention(1, 8, 2, 1, 100, 16, 16, "bfloat16", "bool", False, None, False)
    got = decode_attention.gqa_attention(q, k, v, mask, None, 2)
    k_rep, v_rep = split_choice.repeated_kv(k, 4), split_choice.repeated_kv(v, 4)
    split_choice._check(got, q, k_rep, v_rep, mask, attention)
    with pytest.raises(ValueError, match="from SDPA's in float32"):
        split_choice._check(got * 1.05, q, k_rep, v_rep, mask, attention)


def test_a_timing_that_fails_keeps_torchs_op_and_says_so(monkeypatch):
    """The check or the timing raises: the choice is torch's op, with a warning."""
    from autotune_cli.api import AutotuneFallbackWarning

    def fails(attention, device_index, splits):
        raise RuntimeError("no graph today")

    monkeypatch.setattr(split_choice, "_time_both", fails)
    attention = split_choice.Attention(1, 8, 2, 1, 100, 16, 16, "float32", "bool", False, None, False)
    split_choice._timed_win.cache_clear()
    with pytest.warns(AutotuneFallbackWarning, match="no graph today"):
        assert split_choice.split_wins(attention, 0, 2) is False
    split_choice._timed_win.cache_clear()


def test_an_attention_too_big_to_time_beside_the_model_is_not_timed(monkeypatch):
    """Operands over a quarter of the GPU's free memory: no allocation, a MemoryError that
    says how much (the choice then keeps torch's op, as for any failure). The unfolded form
    counts its repeated copies of K and V."""
    attention = split_choice.Attention(1, 32, 8, 1, 1024, 128, 128, "bfloat16", "bool", False, None, False)
    folded = split_choice.Attention(1, 32, 8, 1, 1024, 128, 128, "bfloat16", "bool", False, None, True)
    repeats = 2 * 8 * 1024 * 128 * 4 * 2  # K and V, 4 copies, 2 bytes
    assert split_choice.operand_bytes(attention) - split_choice.operand_bytes(folded) == repeats
    free = int(split_choice.operand_bytes(attention) / split_choice.MEMORY_SHARE) - 1
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index: (free, 2 * free))
    with pytest.raises(MemoryError, match="GiB free on the GPU"):
        split_choice._time_both(attention, 0, 2)


@pytest.mark.usefixtures("fresh_compile")
def test_the_timed_attention_is_read_from_the_graph_as_plain_ints():
    """What split_choice times is read from the graph: a static batch gives every size as an
    int (the record is hashable: the choice is kept per attention); a symbolic batch gives
    none (its sizes at run time are unknown, so it is never timed)."""
    got: list = []

    def capture(gm, example_inputs):
        for fold in gqa.find_folds(gm.graph, True):
            got.append(gqa.attention_of(fold, plain=False))
        return gm.forward

    run = torch.compile(attend, backend=capture, fullgraph=True)
    for batch in (2, 3, 5):  # 2 as it is; then one graph of a symbolic batch
        q, k, v = operands(batch, 8, 2, 1, 100, 16)
        run(q, k, v, some_keys((batch, 1, 1, 100)))
    static, symbolic = got
    assert symbolic is None
    assert static == split_choice.Attention(2, 8, 2, 1, 100, 16, 16, "float32", "bool", False, None, False)
    assert all(type(getattr(static, f)) is int for f in ("batch", "heads", "heads_kv", "rows", "keys", "dim", "v_dim"))
    hash(static)


@pytest.mark.usefixtures("fresh_compile")
def test_under_autocast_the_attention_keeps_its_dtype():
    """Under autocast SDPA's output is bfloat16 for float32 operands; the kernel would return
    float32, so the attention keeps torch's op, and the compiled output the eager dtype."""
    q, k, v = operands(1, 8, 2, 1, 64, 16)
    mask = some_keys((1, 1, 1, 64))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = attend(q, k, v, mask)
        seen: list = []
        got = graph_targets(attend, seen, split_keys=True)(q, k, v, mask)
    assert decode_attention.register_op() not in seen[0]
    assert got.dtype == want.dtype == torch.bfloat16


def attend(q, k, v, mask):
    n = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, repeat_kv(k, n), repeat_kv(v, n), attn_mask=mask)


def graph_targets(fn, seen: list, **kwargs):
    """fn compiled by our backend, the targets of each graph it hands on recorded in `seen`."""
    def capture(gm, example_inputs):
        seen.append([n.target for n in gm.graph.nodes if n.op == "call_function"])
        return gm.forward

    return autotune_cli.compile(fn, backend=capture, fullgraph=True, tune=False, **kwargs)


@pytest.mark.usefixtures("fresh_compile")
@pytest.mark.parametrize("split_keys", [True, False, None])
def test_split_keys_runs_the_kernel_where_the_plain_fold_would_not(split_keys, capfd):
    """Batch 1 over 2 K/V heads (under gqa.MIN_HEADS): with split_keys the SDPA and both
    repeats give way to our op, with SDPA's values; without, the attention stays as written.
    None (the default) times the kernel on a GPU only: on the CPU it stays as written."""
    assert 1 * 2 < gqa.MIN_HEADS
    q, k, v = operands(1, 8, 2, 1, 100, 16)
    mask = some_keys((1, 1, 1, 100))
    seen: list = []
    got = graph_targets(attend, seen, split_keys=split_keys)(q, k, v, mask)
    op = decode_attention.register_op()
    sdpa = torch._C._nn.scaled_dot_product_attention
    assert len(seen) == 1
    assert (op in seen[0], sdpa in seen[0]) == ((True, False) if split_keys else (False, True))
    if split_keys:
        assert not any(t == "expand" or t is torch.reshape for t in seen[0])  # the repeats are gone
        assert "1 attention over K and V unrepeated (1 by the split-key kernel)" in capfd.readouterr().err
    torch.testing.assert_close(got, sdpa_repeated(q, k, v, mask), rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("fresh_compile")
def test_split_keys_under_a_dynamic_batch():
    """Batches 2, 3 and 5: torch compiles 2 as it is, then one graph of a symbolic batch for 3
    and 5; each graph runs the kernel, with SDPA's values at every size."""
    seen: list = []
    run = graph_targets(attend, seen, split_keys=True)
    for batch in (2, 3, 5):
        q, k, v = operands(batch, 8, 2, 1, 100, 16, seed=batch)
        mask = some_keys((batch, 1, 1, 100), seed=batch)
        torch.testing.assert_close(run(q, k, v, mask), sdpa_repeated(q, k, v, mask), rtol=1e-5, atol=1e-5)
    assert len(seen) == 2 and all(decode_attention.register_op() in targets for targets in seen)


@pytest.mark.usefixtures("fresh_compile")
def test_a_view_of_the_attentions_output_reads_sdpas_layout():
    """Three rows a head, the output viewed as [B, L, H * D] (a view, not a reshape: it needs
    SDPA's layout, [B, L, H, D] transposed), through the kernel."""
    def attend_viewed(q, k, v, mask):
        out = attend(q, k, v, mask)
        b, h, rows, d = out.shape
        return out.transpose(1, 2).view(b, rows, h * d)

    q, k, v = operands(1, 8, 2, 3, 100, 16)
    mask = some_keys((1, 1, 3, 100))
    seen: list = []
    got = graph_targets(attend_viewed, seen, split_keys=True)(q, k, v, mask)
    assert decode_attention.register_op() in seen[0]
    want = sdpa_repeated(q, k, v, mask).transpose(1, 2).reshape(1, 3, 8 * 16)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("fresh_compile")
def test_an_attention_that_needs_gradients_keeps_torchs_op():
    """q from a Linear, under grad mode: the kernel has no backward, so SDPA stays, and the
    compiled model trains."""
    proj = torch.nn.Linear(16, 16)

    def attend_projected(x, k, v, mask):
        q = proj(x).transpose(1, 2)  # [B, H, L, D]
        return attend(q, k, v, mask)

    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, 1, 8, 16, generator=g)
    _, k, v = operands(1, 8, 2, 1, 100, 16)
    mask = some_keys((1, 1, 1, 100))
    seen: list = []
    out = graph_targets(attend_projected, seen, split_keys=True)(x, k, v, mask)
    assert decode_attention.register_op() not in seen[0]
    out.sum().backward()
    assert proj.weight.grad is not None and torch.isfinite(proj.weight.grad).all()


@pytest.mark.usefixtures("fresh_compile")
def test_split_keys_leaves_a_prefill_to_the_plain_fold():
    """Rows past MAX_ROWS (a prompt's): the plain fold's SDPA, not the kernel."""
    rows = decode_attention.MAX_ROWS // 4 + 1
    q, k, v = operands(4, 16, 4, rows, 80, 16)
    mask = some_keys((4, 1, rows, 80))
    seen: list = []
    got = graph_targets(attend, seen, split_keys=True)(q, k, v, mask)
    assert decode_attention.register_op() not in seen[0]
    assert torch._C._nn.scaled_dot_product_attention in seen[0]
    torch.testing.assert_close(got, sdpa_repeated(q, k, v, mask), rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("fresh_compile")
def test_triton_in_another_mode_than_the_variable_says_leaves_the_kernel_out(monkeypatch):
    """Triton imported before TRITON_INTERPRET was set (kernel_files.interpreter_mismatch):
    the kernel would fail on its first call, so the plain fold's SDPA runs."""
    from autotune_cli.templates import kernel_files

    q, k, v = operands(1, 8, 2, 1, 100, 16)
    mask = some_keys((1, 1, 1, 100))
    seen: list = []
    graph_targets(attend, seen, split_keys=True)(q, k, v, mask)
    assert decode_attention.register_op() in seen[0]  # the kernel, where the modes agree
    monkeypatch.setattr(kernel_files, "interpreter_mismatch", lambda: "triton was imported before ...")
    torch._dynamo.reset()
    seen = []
    got = graph_targets(attend, seen, split_keys=True)(q, k, v, mask)
    assert decode_attention.register_op() not in seen[0]
    torch.testing.assert_close(got, sdpa_repeated(q, k, v, mask), rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("fresh_compile")
def test_inductor_compiles_a_graph_holding_the_kernel():
    """The real compile (Inductor on the CPU): the op runs inside its generated code, with
    SDPA's values, call after call."""
    q, k, v = operands(1, 8, 2, 1, 100, 16)
    mask = some_keys((1, 1, 1, 100))
    run = autotune_cli.compile(attend, fullgraph=True, tune=False, split_keys=True, mode="default")
    for _ in range(2):
        torch.testing.assert_close(run(q, k, v, mask), sdpa_repeated(q, k, v, mask), rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("fresh_compile")
def test_a_tiny_transformers_llama_decodes_the_same_with_split_keys():
    """A transformers Llama (4 query heads a K/V head, 2 K/V heads) with a static cache at
    batch 1: the prompt's forward and the decode step compiled with split_keys give eager's
    logits, the decode step through the kernel."""
    model, logits, layers = tiny_llama(heads=8, kv_heads=2, hidden=128, batch=1, cache_len=80)
    seen: list = []
    want = logits(model)
    got = logits(graph_targets(model, seen, split_keys=True))
    op = decode_attention.register_op()
    prompt, step = (targets.count(op) for targets in seen)
    # the prompt's attention takes a mask, or, in later transformers, is causal without one:
    # a causal attention is not folded (its mask is not the folded rows')
    assert step == layers and prompt in (0, layers)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.usefixtures("fresh_compile")
@pytest.mark.parametrize("batches", [(1,), (2, 3, 5)])
def test_gpu_split_keys_under_cuda_graphs_gives_torchs_values(cache_dir, capfd, batches):
    """On a GPU, by default (Inductor replaying CUDA graphs): decode steps of 32 query heads
    over 8 K/V heads of a 1024-position cache through the kernel (a triton_op), within bf16's
    tolerance of the step as written, over warm-up, record and replays; at batch 1, and at
    batches 2, 3 and 5 (the last two one graph of a symbolic batch: a grid of its size)."""
    run = autotune_cli.compile(attend, cache_dir=cache_dir, fullgraph=True, tune=False, split_keys=True)
    for batch in batches:
        q, k, v = (x.cuda() for x in operands(batch, 32, 8, 1, 1024, 128, torch.bfloat16, seed=batch))
        mask = (torch.arange(1024, device="cuda") < 700).expand(batch, 1, 1, 1024)
        want = attend(q, k, v, mask)
        for _ in range(3):
            torch.testing.assert_close(run(q, k, v, mask), want, rtol=2e-2, atol=2e-2)
    assert "1 attention over K and V unrepeated" in capfd.readouterr().err


@pytest.mark.gpu
@pytest.mark.usefixtures("fresh_compile")
def test_gpu_the_default_times_the_kernel_and_keeps_the_faster(cache_dir, capfd):
    """split_keys=None on a GPU: the kernel and the repeated form are checked and timed (both
    a positive time per call), with no warning; the compile runs the kernel exactly where that
    timing, kept for the process, says it won, and the values are torch's either way."""
    import warnings

    from autotune_cli.api import AutotuneFallbackWarning

    q, k, v = (x.cuda() for x in operands(1, 32, 8, 1, 1024, 128, torch.bfloat16))
    mask = (torch.arange(1024, device="cuda") < 700).expand(1, 1, 1, 1024)
    splits = decode_attention.split_count(8, 1024, torch.cuda.get_device_properties(0).multi_processor_count)
    attention = split_choice.Attention(1, 32, 8, 1, 1024, 128, 128, "bfloat16", "bool", False, None, False)
    kernel_us, other_us = split_choice._time_both(attention, 0, splits)
    assert 0 < kernel_us < 1e4 and 0 < other_us < 1e4
    split_choice._timed_win.cache_clear()
    run = autotune_cli.compile(attend, cache_dir=cache_dir, fullgraph=True, tune=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AutotuneFallbackWarning)
        torch.testing.assert_close(run(q, k, v, mask), attend(q, k, v, mask), rtol=2e-2, atol=2e-2)
    assert split_choice._timed_win.cache_info().currsize == 1  # timed once, by the compile
    kernel = "(1 by the split-key kernel)" in capfd.readouterr().err
    assert kernel == split_choice.split_wins(attention, 0, splits)
    assert split_choice._timed_win.cache_info().hits == 1  # the same record: the compile's answer
