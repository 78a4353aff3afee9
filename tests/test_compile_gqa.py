"""autotune_cli.compile's fold of grouped-query attention (routing/gqa.py) on the CPU: an SDPA
over K and V heads repeated for the query heads sharing them runs over the unrepeated heads,
the query heads folded into its rows, with torch's values; where a row would see another
mask or a causal flag, it is left as written."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import autotune_cli
from autotune_cli.routing import gqa
from helpers_llama import tiny_llama

pytestmark = pytest.mark.usefixtures("fresh_compile")

B, H, KV, S, D = 4, 16, 4, 24, 8  # B x KV: gqa.MIN_HEADS


def repeat_kv(x, n):
    """transformers' repeat_kv, as its Llama, Mistral and Qwen attentions call it."""
    b, kv, s, d = x.shape
    return x[:, :, None, :, :].expand(b, kv, n, s, d).reshape(b, kv * n, s, d)


def interleaved(x, n):
    return x.repeat_interleave(n, dim=1)


def unsqueezed(x, n):
    b, kv, s, d = x.shape
    return x.unsqueeze(2).expand(b, kv, n, s, d).reshape(b, kv * n, s, d)


def operands(rows: int = 1, mask_shape=(B, 1, 1, S), seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, rows, D, generator=g)
    k, v = torch.randn(B, KV, S, D, generator=g), torch.randn(B, KV, S, D, generator=g)
    mask = None if mask_shape is None else torch.rand(mask_shape, generator=g) > 0.3
    if mask is not None:
        mask[..., 0] = True  # every row sees one key at least
    return q, k, v, mask


def compiled(fn, folds: list, **kwargs):
    """fn compiled by our backend, each graph it hands on recorded in `folds` as the count of
    SDPA nodes over K and V unrepeated (their query folded by a torch.reshape); where all are,
    no repeat is left (the repeats' nodes are gone, not only unread)."""
    def capture(gm, example_inputs):
        sdpa = [n for n in gm.graph.nodes if n.target is torch._C._nn.scaled_dot_product_attention]
        folds.append(sum(gqa.repeated_heads(n.args[1]) is None and n.args[0].target is torch.reshape
                         for n in sdpa))
        if folds[-1] == len(sdpa):
            assert not any(gqa.repeated_heads(n) for n in gm.graph.nodes)
        return gm.forward

    return autotune_cli.compile(fn, backend=capture, fullgraph=True, tune=False, **kwargs)


@pytest.mark.parametrize("repeat", [repeat_kv, interleaved, unsqueezed])
@pytest.mark.parametrize("mask_shape", [(B, 1, 1, S), (1, 1, 1, S), (1, S), None])
def test_a_decode_steps_attention_reads_k_and_v_once_with_torchs_values(repeat, mask_shape, capfd):
    n = H // KV

    def attend(q, k, v, mask):
        return F.scaled_dot_product_attention(q, repeat(k, n), repeat(v, n), attn_mask=mask, dropout_p=0.0,
                                              scale=None, is_causal=False)

    q, k, v, mask = operands(mask_shape=mask_shape)
    want = attend(q, k, v, mask)
    folds: list = []
    got = compiled(attend, folds)(q, k, v, mask)
    assert folds == [1]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert got.shape == want.shape
    assert "1 attention over K and V unrepeated" in capfd.readouterr().err


@pytest.mark.parametrize("mask_shape", [(B, 1, 1, S), (B, 1, 4, S), (1, 1, 4, S)])
def test_several_rows_fold_under_a_mask_of_one_row_or_of_each(mask_shape):
    """Four query positions (a verify step of speculative decoding, a chunk against a static
    cache): row r * L + l of a group is head r's position l, under mask row l."""
    n = H // KV

    def attend(q, k, v, mask):
        return F.scaled_dot_product_attention(q, repeat_kv(k, n), repeat_kv(v, n), attn_mask=mask, scale=0.3)

    q, k, v, mask = operands(rows=4, mask_shape=mask_shape)
    folds: list = []
    got = compiled(attend, folds)(q, k, v, mask)
    assert folds == [1]
    torch.testing.assert_close(got, attend(q, k, v, mask), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["causal", "mask of 2 dims per row", "mask per head", "dropout", "fold off",
                                  "not a repeat", "k and v repeated apart", "k and v of one batch row"])
def test_an_attention_whose_rows_would_change_is_left_as_written(case):
    n = H // KV
    rows = 4 if case in ("causal", "mask of 2 dims per row") else 1
    mask_shape = {"mask of 2 dims per row": (rows, S), "mask per head": (B, H, 1, S), "causal": None}.get(
        case, (B, 1, 1, S))
    q, k, v, mask = operands(rows=rows, mask_shape=mask_shape)
    if case == "k and v of one batch row":  # broadcast over q's batch: SDPA's math kernel only
        k, v = k[:1], v[:1]

    def attend(q, k, v, mask):
        key = repeat_kv(k, n) if case != "not a repeat" else k.repeat(1, n, 1, 1)  # head h is k's h % KV
        value = repeat_kv(v, n) if case != "k and v repeated apart" else v.repeat(1, n, 1, 1)
        return F.scaled_dot_product_attention(q, key, value, attn_mask=mask, is_causal=case == "causal",
                                              dropout_p=0.5 if case == "dropout" else 0.0)

    folds: list = []
    fn = compiled(attend, folds, fold_gqa=case != "fold off")
    if case == "dropout":
        fn(q, k, v, mask)
    else:
        torch.testing.assert_close(fn(q, k, v, mask), attend(q, k, v, mask), rtol=1e-5, atol=1e-5)
    assert folds == [0]


@pytest.mark.parametrize("batch", [1, "dynamic"])
def test_a_batch_of_one_with_few_heads_keeps_its_copies_and_a_dynamic_batch_folds(batch):
    """Batch 1 with 4 K/V heads: under MIN_HEADS programs, left as written. A batch that torch
    makes symbolic (a second batch size; a call of batch 1 would get its own graph) is 2 or
    more, and with 8 K/V heads that is MIN_HEADS: folded, at every size."""
    n = H // KV
    kv = KV if batch == 1 else gqa.MIN_HEADS // 2

    def attend(q, k, v, mask):
        return F.scaled_dot_product_attention(q, repeat_kv(k, n), repeat_kv(v, n), attn_mask=mask)

    def operands_of(rows):
        g = torch.Generator().manual_seed(rows)
        q = torch.randn(rows, kv * n, 1, D, generator=g)
        k, v = torch.randn(rows, kv, S, D, generator=g), torch.randn(rows, kv, S, D, generator=g)
        mask = torch.rand(rows, 1, 1, S, generator=g) > 0.3
        mask[..., 0] = True
        return q, k, v, mask

    folds: list = []
    fn = compiled(attend, folds)
    for rows in [1] if batch == 1 else [2, 3, 5]:
        torch.testing.assert_close(fn(*operands_of(rows)), attend(*operands_of(rows)), rtol=1e-5, atol=1e-5)
    assert folds == ([0] if batch == 1 else [1, 1])  # sizes 3 and 5: one graph of a symbolic batch


def test_a_float_mask_and_a_wider_value_fold_and_a_matmul_after_the_attention_is_still_met(capfd):
    """An additive float mask and V's head dim 12 against K's 8: the same values folded. The
    nodes the fold adds carry their values, so a matmul that reads its output is still read
    as one (here with nothing cached: met, and said why it is not routed)."""
    n = H // KV
    weight = torch.randn(12, 6)

    def attend(q, k, v, mask):
        out = F.scaled_dot_product_attention(q, repeat_kv(k, n), repeat_kv(v, n), attn_mask=mask)
        return out @ weight

    q, k, _, mask = operands()
    v = torch.randn(B, KV, S, 12)
    additive = torch.where(mask, 0.0, -1e4)
    folds: list = []
    routes: list = []
    got = compiled(attend, folds, routes=routes)(q, k, v, additive)
    assert folds == [1]
    torch.testing.assert_close(got, attend(q, k, v, additive), rtol=1e-5, atol=1e-5)
    assert len(routes) == 1 and routes[0].fallback and routes[0].problem.k == 12


@pytest.mark.parametrize("case", ["v written after its repeat", "batch broadcast by the expand", "no rows"])
def test_a_write_after_the_repeat_a_broadcast_batch_or_no_rows_is_left_as_written(case):
    """The copy taken before an in-place write is what the attention must read; an expand that
    also broadcasts the batch makes a batch the source lacks; an empty query has nothing to fold."""
    n = H // KV
    q, k, v, mask = operands(rows=0 if case == "no rows" else 1)
    if case == "batch broadcast by the expand":
        k, v = k[:1], v[:1]

    def attend(q, k, v, mask):
        if case == "batch broadcast by the expand":
            key = k[:, :, None].expand(B, KV, n, S, D).reshape(B, KV * n, S, D)
            value = v[:, :, None].expand(B, KV, n, S, D).reshape(B, KV * n, S, D)
        else:
            key, value = repeat_kv(k, n), repeat_kv(v, n)
        if case == "v written after its repeat":
            v.mul_(2.0)
        return F.scaled_dot_product_attention(q, key, value, attn_mask=mask)

    folds: list = []
    want = attend(q, k.clone(), v.clone(), mask)
    got = compiled(attend, folds)(q, k.clone(), v.clone(), mask)
    assert folds == [0]
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_repeated_heads_reads_the_repeat_and_its_factor():
    """The rule on a traced graph: the source node and n of each form, None for a tile of the
    heads (head h is source head h % KV) and for a repeat along another dim."""
    n = H // KV

    def forms(k):
        return (repeat_kv(k, n), interleaved(k, n), unsqueezed(k, n), k.repeat(1, n, 1, 1),
                k.repeat_interleave(n, dim=2))

    seen: list = []

    def capture(gm, example_inputs):
        out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        seen.extend((r[0].op, r[1]) if r is not None else None for r in map(gqa.repeated_heads, out))
        return gm.forward

    torch.compile(forms, backend=capture, fullgraph=True)(torch.randn(B, KV, S, D))
    assert seen == [("placeholder", n)] * 3 + [None, None]


def test_a_tiny_transformers_llama_decodes_the_same_folded(tmp_path):
    """A transformers Llama (GQA: 4 query heads a K/V head, 8 K/V heads) with a static cache,
    batch 2: the prompt's forward and the decode step, compiled with the fold, give eager's
    logits."""
    model, logits, layers = tiny_llama(heads=32, kv_heads=8, hidden=64, batch=2, cache_len=16)
    folds: list = []
    want = logits(model)
    got = logits(compiled(model, folds))
    # the prompt's attention takes a mask, or, in later transformers, is causal without one:
    # a causal attention is not folded (its mask is not the folded rows')
    assert folds[1] == layers and folds[0] in (0, layers)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_gpu_a_decode_attention_folds_under_cuda_graphs_with_torchs_values(cache_dir, capfd):
    """On a GPU, by default (Inductor replaying CUDA graphs; its cuDNN attention): a batch-2
    decode step of 32 query heads over 8 K/V heads of a 1024-position cache, folded, within
    bf16's tolerance of the same step as written, over warm-up, record and replays."""
    n, kv, keys = 4, 8, 1024

    def attend(q, k, v, mask):
        return F.scaled_dot_product_attention(q, repeat_kv(k, n), repeat_kv(v, n), attn_mask=mask)

    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(2, kv * n, 1, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(2, kv, keys, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    mask = torch.arange(keys, device="cuda").expand(2, 1, 1, keys) < 700
    run = autotune_cli.compile(attend, cache_dir=cache_dir, fullgraph=True, tune=False)
    want = attend(q, k, v, mask)
    for _ in range(3):
        torch.testing.assert_close(run(q, k, v, mask), want, rtol=2e-2, atol=2e-2)
    assert "1 attention over K and V unrepeated" in capfd.readouterr().err
