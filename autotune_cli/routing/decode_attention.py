"""Grouped-query attention at decode as one split-key kernel: `autotune::gqa_attention`.

At decode a query head has a few rows and the keys are many. SDPA's kernels run one program
per (batch, head) over all the keys, so with few K/V heads (batch 1 of a Llama-3-8B: 8) most
of the GPU idles, and a fold of the query heads into the rows (gqa.py) leaves them idle still.
This kernel reads each K/V head once for the query heads sharing it (their rows stacked, as
the fold stacks them) and splits the keys among programs: (batch x K/V heads) x `splits`
programs each keep a running max, sum and weighted sum of V over their share (an online
softmax), and a second kernel weighs the shares together. The same sums as SDPA over the
repeated heads; no copy of the cache. A block of keys the mask hides from every row is not
read at all: a static cache's positions past the tokens so far cost nothing.

    gqa_attention(q [B, H, L, D], k [B, KV, S, D], v [B, KV, S, Dv], mask, scale, splits)
        -> [B, H, L, Dv]

`mask` (or None) broadcasts to [B, 1, L, S]: a bool mask keeps the keys it marks True, a
float one is added to the scores, as SDPA takes them; a row that sees no key is zeros. The
output is laid out as SDPA's ([B, L, H, Dv] transposed). A GPU launches the kernels from a
triton_op (the compiler traces into it and captures them in its CUDA graphs); under Triton's
interpreter an opaque custom op runs them.
"""

import functools
import threading  # no `from __future__ import annotations`: torch.library reads the ops' annotations

__all__ = ["BLOCK_KEYS", "MAX_ROWS", "gqa_attention", "register_op", "serves", "split_count"]

BLOCK_KEYS = 64  # keys per step of a program's loop
MAX_ROWS = 64  # the most stacked query rows (query heads per K/V head x L) one program holds
_LOG2E = 1.4426950408889634
_LOCK = threading.Lock()
_OP: dict = {}


def serves(rows: int, dim: int, v_dim: int, keys, dtype) -> bool:
    """Whether the kernel takes an attention of `rows` stacked query rows per K/V head, head
    sizes `dim` (q, k) and `v_dim`, `keys` keys (an int: a static cache) and `dtype`. A head
    of at most 512 bytes: the split kernel's shared memory then stays within 64 KB on sm_90
    (tests/test_decode_attention.py compiles it), under every CUDA GPU's limit."""
    import torch

    return (isinstance(keys, int) and keys > 0 and 0 < rows <= MAX_ROWS and dim == v_dim
            and 16 <= dim and dim & (dim - 1) == 0 and dtype in (torch.float16, torch.bfloat16, torch.float32)
            and dim * dtype.itemsize <= 512)


def split_count(programs: int, keys: int, units: int) -> int:
    """Splits of the keys for `programs` (batch x K/V heads) on a device of `units`
    multiprocessors: enough for two programs per unit, none shorter than BLOCK_KEYS keys,
    none empty."""
    want = max(1, min(_cdiv(keys, BLOCK_KEYS), _cdiv(2 * units, max(programs, 1))))
    return _cdiv(keys, _chunk(keys, want))


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _chunk(keys: int, splits: int) -> int:
    """The keys of one split: a whole number of BLOCK_KEYS."""
    return _cdiv(_cdiv(keys, splits), BLOCK_KEYS) * BLOCK_KEYS


@functools.lru_cache(maxsize=None)
def _kernels():
    """The two Triton kernels, defined once (after TRITON_INTERPRET is read at import)."""
    import triton
    import triton.language as tl

    @triton.jit
    def split_kernel(Q, K, V, MASK, ACC, ML,
                     sqb, sqh, sql, sqd, skb, skh, sks, skd, svb, svh, svs, svd, smb, sml, sms,
                     heads_kv, rows, rows_l, keys, chunk, steps, scale, log2e,
                     N_REP: tl.constexpr, MASK_KIND: tl.constexpr, SPLITS: tl.constexpr,
                     BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                     UPCAST: tl.constexpr, IEEE: tl.constexpr):
        # fp32 whatever the launcher typed them: Inductor passes a Python float as fp64, which
        # would carry the running maximum and the weights into fp64
        scale = tl.cast(scale, tl.float32)
        log2e = tl.cast(log2e, tl.float32)
        bg = tl.program_id(0)
        split = tl.program_id(1)
        b = (bg // heads_kv).to(tl.int64)  # int64: a large cache's offsets pass 2**31
        g = (bg % heads_kv).to(tl.int64)
        r = tl.arange(0, BLOCK_R)
        d = tl.arange(0, BLOCK_D)
        n = tl.arange(0, BLOCK_N)
        row_ok = r < rows
        head = g * N_REP + r // rows_l  # stacked row r: query head g * N_REP + r // L, at r % L
        pos = r % rows_l
        q = tl.load(Q + b * sqb + head[:, None] * sqh + pos[:, None] * sql + d[None, :] * sqd,
                    mask=row_ok[:, None], other=0.0)
        if UPCAST:
            q = q.to(tl.float32)
        m_i = tl.full([BLOCK_R], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_R], tl.float32)
        acc = tl.zeros([BLOCK_R, BLOCK_D], tl.float32)
        start = split * chunk
        end = tl.minimum(start + chunk, keys)
        for step in range(0, steps):
            key = start + step * BLOCK_N + n
            key_ok = key < end
            # what the mask adds to each score: -inf hides the key
            seen = row_ok[:, None] & key_ok[None, :]
            if MASK_KIND == 1:
                keep = tl.load(MASK + b * smb + pos[:, None] * sml + key[None, :] * sms, mask=seen, other=0)
                bias = tl.where(seen & (keep != 0), 0.0, float("-inf"))
            elif MASK_KIND == 2:
                add = tl.load(MASK + b * smb + pos[:, None] * sml + key[None, :] * sms, mask=seen, other=0.0)
                bias = tl.where(seen, add.to(tl.float32), float("-inf"))
            else:
                bias = tl.where(seen, 0.0, float("-inf"))
            # a block no row sees is not read: a static cache's positions past the tokens so far
            if tl.max(tl.max(bias, 1), 0) > float("-inf"):
                k = tl.load(K + b * skb + g * skh + key[:, None] * sks + d[None, :] * skd,
                            mask=key_ok[:, None], other=0.0)
                if UPCAST:
                    k = k.to(tl.float32)
                if IEEE:  # float32 operands: not rounded to tf32
                    s = tl.dot(q, tl.trans(k), input_precision="ieee")
                else:
                    s = tl.dot(q, tl.trans(k))
                # scores in natural units (a mask's finfo.min stays finite), exponents in base 2
                s = s * scale + bias
                m_new = tl.maximum(m_i, tl.max(s, 1))
                m_base = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet
                alpha = tl.math.exp2((m_i - m_base) * log2e)
                p = tl.math.exp2((s - m_base[:, None]) * log2e)
                l_i = l_i * alpha + tl.sum(p, 1)
                v = tl.load(V + b * svb + g * svh + key[:, None] * svs + d[None, :] * svd,
                            mask=key_ok[:, None], other=0.0)
                if UPCAST:
                    acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32))
                elif IEEE:
                    acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
                else:
                    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
                m_i = m_new
        part = bg * SPLITS + split
        # the stacked rows only (a decode step's 4 of a 16-row tile): the merge reads no other
        tl.store(ACC + (part * BLOCK_R + r[:, None]) * BLOCK_D + d[None, :], acc, mask=row_ok[:, None])
        tl.store(ML + (part * 2) * BLOCK_R + r, m_i, mask=row_ok)
        tl.store(ML + (part * 2 + 1) * BLOCK_R + r, l_i, mask=row_ok)

    @triton.jit
    def merge_kernel(ACC, ML, OUT, sob, soh, sol, sod, heads_kv, rows_l, log2e,
                     N_REP: tl.constexpr, SPLITS: tl.constexpr, SPLITS_P2: tl.constexpr,
                     BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
        log2e = tl.cast(log2e, tl.float32)  # as in split_kernel
        bg = tl.program_id(0)
        r = tl.program_id(1)
        b = (bg // heads_kv).to(tl.int64)  # int64, as in split_kernel
        g = bg % heads_kv
        sp = tl.arange(0, SPLITS_P2)
        d = tl.arange(0, BLOCK_D)
        ok = sp < SPLITS
        part = bg * SPLITS + sp
        m = tl.load(ML + (part * 2) * BLOCK_R + r, mask=ok, other=float("-inf"))
        l_s = tl.load(ML + (part * 2 + 1) * BLOCK_R + r, mask=ok, other=0.0)
        top = tl.max(m, 0)
        top = tl.where(top == float("-inf"), 0.0, top)
        w = tl.math.exp2((m - top) * log2e)
        acc = tl.load(ACC + (part[:, None] * BLOCK_R + r) * BLOCK_D + d[None, :], mask=ok[:, None], other=0.0)
        total = tl.sum(l_s * w, 0)  # 0: the row sees no key; zeros, as torch's SDPA gives
        out = tl.sum(acc * w[:, None], 0) / tl.where(total > 0, total, 1.0)
        head = g * N_REP + r // rows_l
        tl.store(OUT + b * sob + head * soh + (r % rows_l) * sol + d * sod, out.to(OUT.dtype.element_ty))

    return split_kernel, merge_kernel


def _output(q, v):
    """The output, [B, H, L, Dv] laid out as [B, L, H, Dv] (SDPA's layout, which the code after
    an attention may view as [B, L, H * Dv])."""
    import torch

    batch, heads, rows_l, _ = q.shape
    return torch.empty((batch, rows_l, heads, v.shape[3]), dtype=q.dtype, device=q.device).transpose(1, 2)


def _launches(q, k, v, mask, scale: float | None, splits: int):
    """(output, and the two launches as (kernel, grid, args, constexprs)) for the attention."""
    import math

    import torch
    from triton import next_power_of_2

    from ..templates.triton_base import interpreting

    batch, heads, rows_l, dim = q.shape
    heads_kv, keys = k.shape[1], k.shape[2]
    n_rep = heads // heads_kv
    rows = n_rep * rows_l
    block_r, block_d = max(16, next_power_of_2(rows)), dim
    chunk = _chunk(keys, splits)
    out = _output(q, v)
    acc = torch.empty((batch * heads_kv * splits * block_r * block_d,), dtype=torch.float32, device=q.device)
    ml = torch.empty((batch * heads_kv * splits * 2 * block_r,), dtype=torch.float32, device=q.device)
    if mask is None:
        kind, mask, mask_strides = 0, q, (0, 0, 0)
    else:
        kind = 1 if mask.dtype == torch.bool else 2
        wide = mask.expand(batch, 1, rows_l, keys) if mask.dim() == 4 else \
            mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape)).expand(batch, 1, rows_l, keys)
        mask_strides = (wide.stride(0), wide.stride(2), wide.stride(3))
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    split_kernel, merge_kernel = _kernels()
    first = (split_kernel, (batch * heads_kv, splits),
             (q, k, v, mask, acc, ml, *q.stride(), *k.stride(), *v.stride(), *mask_strides,
              heads_kv, rows, rows_l, keys, chunk, chunk // BLOCK_KEYS, scale, _LOG2E),
             dict(N_REP=n_rep, MASK_KIND=kind, SPLITS=splits, BLOCK_R=block_r, BLOCK_N=BLOCK_KEYS,
                  BLOCK_D=block_d, UPCAST=interpreting(), IEEE=q.dtype == torch.float32,
                  num_warps=4 if block_r * block_d <= 4096 else 8, num_stages=2))
    second = (merge_kernel, (batch * heads_kv, rows),
              (acc, ml, out, *out.stride(), heads_kv, rows_l, _LOG2E),
              dict(N_REP=n_rep, SPLITS=splits, SPLITS_P2=max(2, next_power_of_2(splits)), BLOCK_R=block_r,
                   BLOCK_D=block_d, num_warps=4))
    return out, (first, second)


def gqa_attention(q, k, v, mask=None, scale: float | None = None, splits: int = 1):
    """The attention, its kernels launched directly (the op's body; see the module)."""
    out, launches = _launches(q, k, v, mask, scale, splits)
    for kernel, grid, args, options in launches:
        kernel[grid](*args, **options)
    return out


def register_op():
    """`autotune::gqa_attention`, defined once per process: a triton_op where Triton compiles
    for a GPU, an opaque custom op under the interpreter."""
    with _LOCK:
        if _OP:
            return _OP["op"]
        import torch

        from ..templates.triton_base import interpreting

        def fake(q, k, v, mask, scale, splits):
            return _output(q, v)

        if interpreting():
            from torch.library import custom_op

            @custom_op("autotune::gqa_attention", mutates_args=())
            def opaque(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                       scale: float | None, splits: int) -> torch.Tensor:
                return gqa_attention(q, k, v, mask, scale, splits)

            opaque.register_fake(fake)
        else:
            from torch.library import triton_op, wrap_triton

            @triton_op("autotune::gqa_attention", mutates_args={})
            def traced(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                       scale: float | None, splits: int) -> torch.Tensor:
                out, launches = _launches(q, k, v, mask, scale, splits)
                for kernel, grid, args, options in launches:
                    wrap_triton(kernel)[grid](*args, **options)
                return out

        _OP["op"] = torch.ops.autotune.gqa_attention.default
        return _OP["op"]
