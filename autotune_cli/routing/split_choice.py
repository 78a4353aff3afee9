"""Whether the split-key kernel (decode_attention.py) runs an attention: timed on this GPU.

By default (`compile(..., split_keys=None)`) a decode attention the kernel serves runs it only
where it beat, on this GPU and at this attention's shapes, what the compile would run
otherwise: the plain fold (gqa.py) where batch x K/V heads reaches MIN_HEADS, else K and V
repeated for SDPA as written. Both are timed as CUDA graphs of `CALLS` calls on one set of
operands (random values; a mask that shows every key, so the kernel skips no block: its
gain past the tokens so far comes on top), the median of `REPLAYS` replays, once per shape
per process. The kernel's output is first checked against SDPA's in float32 (the verifier's
tolerance for a GEMM of its dtype), and it must lead by the margin a Triton GEMM needs over
cuBLAS (MeasurePolicy.vendor_margin): a tie keeps torch's op. A check or timing that fails
keeps it too, and says so once, as does an attention whose operands would take more than
MEMORY_SHARE of the GPU's free memory.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass

__all__ = ["CALLS", "MEMORY_SHARE", "REPLAYS", "Attention", "graph_us", "kernel_wins", "operand_bytes",
           "repeated_kv", "split_wins"]

CALLS = 20
REPLAYS = 5
MEMORY_SHARE = 0.25  # the most of the GPU's free memory a timing may take (else it is not timed)


@dataclass(frozen=True)
class Attention:
    """One decode attention's shapes: q [batch, heads, rows, dim], K and V [batch, heads_kv,
    keys, dim and v_dim]; the mask's kind ("bool", "float" or "none") and whether it has a
    row per query position (else one, broadcast)."""

    batch: int
    heads: int
    heads_kv: int
    rows: int
    keys: int
    dim: int
    v_dim: int
    dtype: str
    mask: str
    mask_rows: bool
    scale: float | None
    folded: bool  # the compile's other form: the plain fold (else K and V repeated)


def kernel_wins(kernel_us: float, other_us: float, margin: float) -> bool:
    """Whether the kernel's time leads the other form's by more than `margin` (a fraction)."""
    return kernel_us < other_us * (1 - margin)


def split_wins(attention: Attention, device_index: int, splits: int) -> bool:
    """Whether the kernel, with `splits`, beat the compile's other form on GPU `device_index`
    (see the module); False where the timing failed, and, without timing, where a CUDA graph
    is being captured (a model compiled inside the user's capture: a sync would break it).
    Once per attention per process."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return False
    return _timed_win(attention, device_index, splits)


@functools.lru_cache(maxsize=None)
def _timed_win(attention: Attention, device_index: int, splits: int) -> bool:
    import warnings

    from ..api import AutotuneFallbackWarning
    from ..settings import MeasurePolicy

    try:
        kernel_us, other_us = _time_both(attention, device_index, splits)
    except Exception as exc:  # noqa: BLE001 - an optimisation never fails a compile: torch's op stays
        warnings.warn(f"autotune: checking or timing the split-key attention kernel failed "
                      f"({type(exc).__name__}: {exc}); "
                      "the attention keeps torch's op", AutotuneFallbackWarning, stacklevel=2)
        return False
    return kernel_wins(kernel_us, other_us, MeasurePolicy().vendor_margin)


def _time_both(a: Attention, device_index: int, splits: int) -> tuple[float, float]:
    """(kernel us, other form us) per call."""
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    free, _ = torch.cuda.mem_get_info(device_index)
    if operand_bytes(a) > free * MEMORY_SHARE:
        raise MemoryError(f"its operands would take {operand_bytes(a) / 2**30:.1f} GiB of the "
                          f"{free / 2**30:.1f} GiB free on the GPU")
    # the compile's context is not the timing's: no fake tensors, no autograd, no autocast
    try:
        with unset_fake_temporarily(), torch.no_grad(), torch.autocast("cuda", enabled=False), \
                torch.cuda.device(device_index):
            return _time_real(a, torch.device("cuda", device_index), splits)
    finally:  # the operands' memory back to the GPU, not kept by torch's allocator for the model
        torch.cuda.empty_cache()


def operand_bytes(a: Attention) -> int:
    """What timing `a` allocates at most: q, K, V, the repeated K and V of the unfolded form, the
    output, and the check's float32 copies of one batch row."""
    import torch

    size = getattr(torch, a.dtype).itemsize
    q = a.batch * a.heads * a.rows * a.dim
    kv = a.batch * a.heads_kv * a.keys * (a.dim + a.v_dim)
    repeated = 0 if a.folded else kv * (a.heads // a.heads_kv)
    check = 4 * (a.heads * a.keys * (a.dim + a.v_dim) + a.heads * a.rows * (a.dim + a.v_dim))
    return (q + kv + repeated + a.batch * a.heads * a.rows * a.v_dim) * size + check


def _time_real(a: Attention, device, splits: int) -> tuple[float, float]:
    import torch
    import torch.nn.functional as F

    from .decode_attention import gqa_attention

    dtype = getattr(torch, a.dtype)
    n = a.heads // a.heads_kv
    g = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(a.batch, a.rows, a.heads, a.dim, device=device, dtype=dtype, generator=g).transpose(1, 2)
    k = torch.randn(a.batch, a.heads_kv, a.keys, a.dim, device=device, dtype=dtype, generator=g)
    v = torch.randn(a.batch, a.heads_kv, a.keys, a.v_dim, device=device, dtype=dtype, generator=g)
    shape = (a.batch, 1, a.rows if a.mask_rows else 1, a.keys)
    mask = {"none": None, "bool": torch.ones(shape, device=device, dtype=torch.bool),
            "float": torch.zeros(shape, device=device, dtype=dtype)}[a.mask]

    def kernel():
        return gqa_attention(q, k, v, mask, a.scale, splits)

    def folded():
        rows = n * a.rows
        wide = mask
        if mask is not None and a.mask_rows:
            wide = mask.unsqueeze(2).expand(-1, 1, n, a.rows, a.keys).reshape(-1, 1, rows, a.keys)
        out = F.scaled_dot_product_attention(q.reshape(a.batch, a.heads_kv, rows, a.dim), k, v, attn_mask=wide,
                                             scale=a.scale)
        return out.reshape(a.batch, a.heads, a.rows, a.v_dim)

    def repeated():
        return F.scaled_dot_product_attention(q, repeated_kv(k, n), repeated_kv(v, n), attn_mask=mask, scale=a.scale)

    one = slice(0, 1)  # the check on the first batch row: float32 copies of every row could be GiBs
    _check(kernel()[one], q[one], repeated_kv(k[one], n), repeated_kv(v[one], n),
           None if mask is None else mask[one], a)
    return graph_us(kernel), graph_us(folded if a.folded else repeated)


def repeated_kv(x, n: int):
    """x [B, KV, S, D] with each head repeated n times in place (transformers' repeat_kv)."""
    b, kv, s, d = x.shape
    return x[:, :, None].expand(b, kv, n, s, d).reshape(b, kv * n, s, d)


def _check(got, q, k, v, mask, a: Attention) -> None:
    """Raise where the kernel's output is further from SDPA's in float32 over the repeated
    heads than the verifier lets a GEMM of this dtype be (relative Frobenius error)."""
    import torch.nn.functional as F

    from ..runner.verify import NORM_TOLERANCE

    if mask is not None and mask.is_floating_point():
        mask = mask.float()
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, scale=a.scale)
    error = float((got.float() - want).norm() / want.norm())
    if not error <= NORM_TOLERANCE[a.dtype]:
        raise ValueError(f"its output is {error:.1e} from SDPA's in float32 (relative), over "
                         f"{NORM_TOLERANCE[a.dtype]:.0e}")


def graph_us(fn, calls: int = CALLS, replays: int = REPLAYS) -> float:
    """Per call, us: the median of `replays` replays of a CUDA graph of `calls` calls of fn()
    (runner/timing.capture_graph, other threads' CUDA work legal while it captures)."""
    import torch

    from ..runner.timing import capture_graph

    def every_call() -> None:
        for _ in range(calls):
            fn()

    graph = capture_graph(every_call, thread_local=True)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / calls)
    return statistics.median(times)
