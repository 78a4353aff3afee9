"""Grouped-query attention that copies its K and V heads for SDPA, rewritten to read them once.

A model with fewer K/V heads than query heads (Llama, Mistral, Qwen: 8 against 32) repeats each
K and V head for the query heads that share it before calling scaled_dot_product_attention with
a mask (transformers' `repeat_kv`; SDPA's own `enable_gqa` falls back to its math kernel under
a mask). Each repeat is a copy of the whole cache, every step. Attention's two products read K
and V as the B operand of every query head of a group; the query heads of a group fold into
the rows (M) of one attention over the group's head instead, as a GEMM folds a batch into M:

    q [B, H, L, D] -> [B, KV, (H / KV) * L, D],  SDPA with K, V [B, KV, S, D],  back to [B, H, L, D]

Row r * L + l of a group is query head g * H / KV + r at position l: the head that repeat_kv gave
K/V head g, so each output is the same sum. Folded where that holds for every row: no causal
flag (its mask would follow the folded rows) and no dropout; a mask of one head, with one row
(it broadcasts over the folded rows, as a decode step's does) or [B, 1, L, S] (its rows
repeated for the folded ones: a few positions against a static cache); static head counts
and sizes but the batch; batch x K/V heads at least MIN_HEADS.
The copies go, and the attention reads K and V once (bench/README.md, "A serving loop").

A fold of few rows (decode) over a static cache may run our split-key kernel instead
(decode_attention.py, `autotune::gqa_attention`), at any batch x K/V heads: its programs split
the keys, so a few heads no longer leave the GPU idle. `split_keys`: None (the default) where
it beat the form the compile would run otherwise, timed on this GPU (split_choice.py); True
always; False never.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, replace
from typing import Any

from .graph_edits import fill_example_values, writes_between
from .sites import call_args, concrete, node_value, records_gradients

__all__ = ["MIN_HEADS", "Fold", "attention_of", "find_folds", "fold_attention", "repeated_heads"]

# The least batch x K/V heads folded: SDPA's kernel for a few rows runs one program per (batch,
# head) and does not split the keys, so with 8 (batch 1 of a Llama-3-8B) it took 1.16x the
# copies plus the repeated attention at 1024 keys and 1.66x at 4096; with 16, 0.93-0.95x
# (bench/README.md, "Grouped-query attention folded").
MIN_HEADS = 16

# scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
# scale=None, *, enable_gqa=False): its arguments in order, with their defaults
_SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_SDPA_DEFAULTS = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False}


@dataclass(frozen=True)
class Fold:
    """An SDPA node whose K and V are repeats of `key`'s and `value`'s heads, `n` times each."""

    node: Any
    query: Any
    key: Any  # the node of K before its repeat, [B, KV, S, D]
    value: Any
    mask: Any
    mask_rows: bool  # the mask has L rows ([., 1, L, S]): repeated for the folded rows
    scale: Any
    n: int  # query heads per K/V head
    repeats: tuple  # the repeat's nodes (erased once no other node reads them)
    splits: int | None = None  # run by decode_attention's kernel, the keys in this many splits


def _sizes(node) -> tuple | None:
    value = node_value(node)
    if value is None or not hasattr(value, "shape"):
        return None
    return tuple(concrete(s) for s in value.shape)


def _is_method_or(node, method: str, function) -> bool:
    return ((node.op == "call_method" and node.target == method)
            or (node.op == "call_function" and node.target is function))


def repeated_heads(node) -> tuple[Any, int, tuple] | None:
    """(source, n, nodes) where `node` is a [B, KV, S, D] tensor's heads each repeated n times
    in place (head h of the result is source head h // n), written as transformers' repeat_kv
    (`x[:, :, None].expand(B, KV, n, S, D).reshape(B, KV * n, S, D)`, or unsqueeze(2) for the
    index) or as `x.repeat_interleave(n, dim=1)`; `nodes` are the repeat's own nodes. Else None."""
    import torch

    if not hasattr(node, "op"):
        return None
    out = _sizes(node)
    if out is None or len(out) != 4 or None in out[1:]:
        return None
    if _is_method_or(node, "repeat_interleave", torch.repeat_interleave):
        args = call_args(node, ("input", "repeats", "dim", "output_size"))
        if args is None or args.get("dim") not in (1, -3):
            return None
        source, n = args.get("input"), args.get("repeats")
        src = _sizes(source) if hasattr(source, "op") else None
        if not isinstance(n, int) or n < 2 or src is None or len(src) != 4 or src[1] is None \
                or out[1] != src[1] * n or out[2:] != src[2:]:
            return None
        return source, n, (node,)
    if not (_is_method_or(node, "reshape", torch.reshape) or (node.op == "call_method" and node.target == "view")):
        return None
    expand = node.args[0] if node.args else None
    if not (hasattr(expand, "op") and expand.op == "call_method" and expand.target == "expand"):
        return None
    unsqueezed = expand.args[0] if expand.args else None
    source = _unsqueezed_at_2(unsqueezed)
    big, src = _sizes(expand), _sizes(source) if source is not None else None
    if big is None or src is None or len(big) != 5 or len(src) != 4 or None in big[1:] or src[1] is None:
        return None
    n = big[2]
    if n < 2 or big[1] != src[1] or big[3:] != src[2:] or out[1] != src[1] * n or out[2:] != src[2:]:
        return None
    return source, n, (node, expand, unsqueezed)


def _unsqueezed_at_2(node):
    """The node that `node` inserts a size-1 dim into at position 2 (`x[:, :, None]`,
    `x[:, :, None, :, :]`, `x.unsqueeze(2)`), or None."""
    import torch

    if not hasattr(node, "op"):
        return None
    if node.op == "call_function" and node.target is operator.getitem and len(node.args) == 2:
        source, index = node.args
        if not isinstance(index, tuple) or len(index) < 3:
            return None
        full = slice(None, None, None)
        head, rest = index[:3], index[3:]
        if head != (full, full, None) or any(i != full and i is not Ellipsis for i in rest):
            return None
        return source if hasattr(source, "op") else None
    if _is_method_or(node, "unsqueeze", torch.unsqueeze):
        args = call_args(node, ("input", "dim")) or {}
        source = args.get("input")
        src = _sizes(source) if hasattr(source, "op") else None
        if src is not None and len(src) == 4 and args.get("dim") in (2, -3):
            return source
    return None


def _sdpa_args(node) -> dict | None:
    import torch

    if node.op != "call_function" or node.target is not torch._C._nn.scaled_dot_product_attention:
        return None
    return call_args(node, _SDPA_ARGS, _SDPA_DEFAULTS)


def find_folds(graph, split_keys: bool | None = False) -> list[Fold]:
    """The SDPA nodes of `graph` that may run over K and V unrepeated (see the module); those
    decode_attention's kernel serves run by it (their `splits` set): all with `split_keys`
    True, none with False, and with None those where it beat the compile's other form,
    timed on this GPU (split_choice.py)."""
    folds = []
    for node in graph.nodes:
        args = _sdpa_args(node)
        if args is None or args["is_causal"] is not False or args["enable_gqa"] is not False \
                or args["dropout_p"] not in (0, 0.0):
            continue
        key, value = repeated_heads(args["key"]), repeated_heads(args["value"])
        q = _sizes(args["query"])
        if key is None or value is None or key[1] != value[1] or q is None or len(q) != 4 or None in q[1:]:
            continue
        n = key[1]
        k_src, v_src = _sizes(key[0]), _sizes(value[0])
        if q[1] != k_src[1] * n or k_src[1] != v_src[1] or k_src[3] != q[3]:
            continue
        # one batch: an expand that broadcasts it, or K and V broadcast over q's, would not fold
        if not _same_batch(args["query"], args["key"], args["value"], key[0], value[0]):
            continue
        if 0 in (*q[1:], *k_src[2:], *v_src[2:]) or writes_between(_first(graph, key[2] + value[2]), node):
            continue  # nothing to fold; or K or V written after their repeat copied them
        mask, mask_rows = args["attn_mask"], False
        if mask is not None:
            m = _sizes(mask)
            # one head: it broadcasts over the folded rows as over the heads; one row, or [., 1, L, S]
            if m is None or len(m) > 4 or (len(m) >= 3 and m[-3] != 1):
                continue
            if len(m) >= 2 and m[-2] != 1:
                if len(m) != 4 or m[-2] != q[2] or m[-1] is None:
                    continue
                mask_rows = True  # repeated n times along the rows: folded row r * L + l reads row l
        fold = Fold(node, args["query"], key[0], value[0], mask, mask_rows, args["scale"], n, key[2] + value[2])
        plain = (q[0] or 2) * k_src[1] >= MIN_HEADS  # a symbolic batch is 2 or more: torch specialises 1
        splits = _kernel_splits(fold) if split_keys is not False else None
        if splits is not None and split_keys is None and not _measured_win(fold, plain, splits):
            splits = None
        if splits is None and not plain:
            continue
        folds.append(replace(fold, splits=splits))
    return folds


def _measured_win(fold: Fold, plain: bool, splits: int) -> bool:
    """Whether the kernel beat, timed on this GPU, the form the compile would run without it
    (split_choice.py): never for a symbolic batch or off a GPU."""
    import torch

    from .split_choice import split_wins

    device = node_value(fold.query).device
    attention = attention_of(fold, plain)
    if attention is None or device.type != "cuda":
        return False
    return split_wins(attention, torch.cuda.current_device() if device.index is None else device.index, splits)


def attention_of(fold: Fold, plain: bool):
    """`fold`'s attention as split_choice times it (its sizes as ints), or None for a
    symbolic batch (its sizes at run time unknown)."""
    import torch

    from .split_choice import Attention

    batch, heads, rows, dim = _sizes(fold.query)
    _, heads_kv, keys, _ = _sizes(fold.key)
    v_dim = _sizes(fold.value)[3]
    if batch is None:
        return None
    mask = node_value(fold.mask) if fold.mask is not None else None
    kind = "none" if mask is None else "bool" if mask.dtype == torch.bool else "float"
    return Attention(batch, heads, heads_kv, rows, keys, dim, v_dim,
                     str(node_value(fold.query).dtype).removeprefix("torch."), kind, fold.mask_rows,
                     None if fold.scale is None else float(fold.scale), plain)


def _kernel_splits(fold: Fold) -> int | None:
    """The splits of the keys decode_attention's kernel would run `fold`'s SDPA with, or None
    where it does not serve it: too many rows, another head size, a dynamic cache, a scale
    that is not a number, a device where Triton does not run (or triton runs in another
    mode than TRITON_INTERPRET says: the kernel would fail on its first call), an output
    laid out otherwise than the op's, or a tensor that needs gradients (the kernel has no
    backward)."""
    import torch

    from ..templates.kernel_files import interpreter_mismatch
    from ..templates.triton_base import interpreting
    from . import decode_attention

    node, n = fold.node, fold.n
    q, k, v, want = (node_value(x) for x in (fold.query, fold.key, fold.value, node))
    mask = node_value(fold.mask) if fold.mask is not None else None
    batch, heads, rows, dim = _sizes(fold.query)
    _, heads_kv, keys, _ = _sizes(fold.key)
    v_dim = _sizes(fold.value)[3]
    if (q.device.type != "cuda" and not interpreting()) or interpreter_mismatch():
        return None
    if not (fold.scale is None or isinstance(fold.scale, (int, float))):
        return None
    # one dtype: under autocast SDPA's output may be another than q's, as the kernel's is not
    if not decode_attention.serves(n * rows, dim, v_dim, keys, q.dtype) \
            or not k.dtype == v.dtype == want.dtype == q.dtype:
        return None
    if records_gradients(node, q, k, v, mask):
        return None
    batch = batch or 2  # a symbolic batch: 2 or more (torch specialises 1)
    mine = torch.empty((batch, rows, heads, v_dim), device="meta").transpose(1, 2)
    if any(size > 1 and concrete(want.stride(i)) != mine.stride(i) for i, size in enumerate(mine.shape)
           if i > 0 or _sizes(node)[0] is not None):
        return None  # a view after the attention would read another layout
    units = 4  # under the interpreter: a few splits, so that each is exercised and the run stays quick
    if q.device.type == "cuda":
        units = torch.cuda.get_device_properties(q.device).multi_processor_count
    return decode_attention.split_count(batch * heads_kv, keys, units)


def _first(graph, nodes):
    """The earliest of `nodes` in `graph`."""
    wanted = set(nodes)
    return next(n for n in graph.nodes if n in wanted)


def _same_batch(*nodes) -> bool:
    """Whether the tensors of `nodes` have one batch size: equal ints, or one symbol."""
    sizes = [node_value(n).shape[0] for n in nodes]
    return len({str(s) for s in sizes}) == 1


def fold_attention(graph, split_keys: bool | None = False) -> list[Fold]:
    """Rewrite every SDPA of `graph` that find_folds finds; the folds made."""
    folds = find_folds(graph, split_keys)
    before = set(graph.nodes)
    erased: set = set()
    for fold in folds:
        with graph.inserting_before(fold.node):
            out = _run_plain(graph, fold) if fold.splits is None else _run_split(graph, fold)
        fold.node.replace_all_uses_with(out)
        graph.erase_node(fold.node)
        _erase_repeats(graph, fold, erased)
    fill_example_values(graph, before)  # the new nodes' values, which matmul_sites reads
    return folds


def _run_plain(graph, fold: Fold):
    """The node of SDPA over K and V as they are, q's query heads of a group folded into its
    rows (and the mask's rows repeated for them), reshaped back to [B, H, L, Dv]."""
    import torch

    batch, heads, rows, dim = _sizes(fold.query)
    batch = -1 if batch is None else batch  # -1: a symbolic batch, the other sizes known
    v_dim = _sizes(fold.value)[3]
    groups = heads // fold.n
    q = graph.call_function(torch.reshape, (fold.query, (batch, groups, fold.n * rows, dim)))
    mask = fold.mask
    if fold.mask_rows:
        keys = _sizes(mask)[3]
        mask = graph.call_function(torch.unsqueeze, (mask, 2))
        mask = graph.call_method("expand", (mask, -1, 1, fold.n, rows, keys))
        mask = graph.call_function(torch.reshape, (mask, (-1, 1, fold.n * rows, keys)))
    out = graph.call_function(torch._C._nn.scaled_dot_product_attention, (q, fold.key, fold.value),
                              {"attn_mask": mask, "dropout_p": 0.0, "is_causal": False, "scale": fold.scale})
    # SDPA's own value, reshaped: under autocast its dtype is the region's, which a value
    # made again outside the region (fill_example_values) would not be
    out.meta["example_value"] = node_value(fold.node).reshape(batch, groups, fold.n * rows, v_dim)
    return graph.call_function(torch.reshape, (out, (batch, heads, rows, v_dim)))


def _run_split(graph, fold: Fold):
    """The node of decode_attention's op over q, K and V as they are (the kernel stacks a
    group's query heads itself, and reads each mask row for them)."""
    from .decode_attention import register_op

    return graph.call_function(register_op(), (fold.query, fold.key, fold.value, fold.mask, fold.scale, fold.splits))


def _erase_repeats(graph, fold: Fold, erased: set) -> None:
    """Erase `fold`'s repeat nodes that nothing reads now (each repeat's last node first)."""
    for node in fold.repeats:
        if node not in erased and not node.users:
            graph.erase_node(node)
            erased.add(node)
