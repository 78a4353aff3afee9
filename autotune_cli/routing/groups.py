"""Linears that read one input, run as one GEMM: q, k and v of an attention, at decode.

Their weights are placed side by side in one buffer (each Parameter becomes a view of it, its
values unchanged), so one GEMM reads them all, [M, K] by the buffer's [K, sum of N], and the
output is sliced back into the linears' outputs: one launch and one tail instead of three, and
a problem wide enough to keep the memory system busy (bench/README.md, "A serving loop").

A group is made only where it wins: the one GEMM's tuned time leads the sum of its parts' by
the margin a kernel needs over cuBLAS in a tune (the times come from separate tunes; gate and
up of an MLP, each already wide, are faster apart). Its members
are linears of the same input node with static shapes, each weight a 2-D contiguous
Parameter (of a plain tensor) of the same dtype used by nothing else in the graph, all
with biases (placed side by side too) or none.

The weights move after the graph is compiled, before its first run: the compiler traced
them where they were, and nothing in the graph but the group's op reads them. The op checks
on each call that they are still side by side (a weight assigned anew is not) and computes
the linears one by one where they are not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .sites import Site

__all__ = ["Group", "find_groups", "place_side_by_side", "side_by_side", "worth_grouping"]

@dataclass
class Group:
    """Linears of one input (`sites`, in graph order) with their real weights and biases."""

    sites: list[Site]
    weights: list[Any]  # the Parameters, [n_i, k] each
    biases: list[Any]  # [n_i] each, or empty
    a: Any  # the shared input as a GEMM's A (fake)
    b: Any  # the weights side by side as a GEMM's B: [k, sum of n_i], fake
    bias: Any = None  # the biases side by side, [sum of n_i], fake; None without

    @property
    def widths(self) -> list[int]:
        return [int(w.shape[0]) for w in self.weights]


def worth_grouping(part_ms: list[float], group_ms: float) -> bool:
    """Whether one GEMM of `group_ms` beats its parts run one by one: by MeasurePolicy's
    vendor_margin, as times of separate measurements must (see the module)."""
    from ..settings import MeasurePolicy

    return len(part_ms) > 1 and group_ms <= (1 - MeasurePolicy.vendor_margin) * sum(part_ms)


def find_groups(sites: list[Site], real_of: Callable[[Any], Any]) -> list[Group]:
    """The groups `sites` hold (see the module); `real_of(node)` gives a weight node's real
    tensor (a graph input's or attribute's), or None."""
    by_input: dict[Any, list[Site]] = {}
    for site in sites:
        match = site.match
        if (site.skip or not site.static or site.scaled is not None or match is None or not match.transpose_b
                or match.batch is not None):
            continue
        by_input.setdefault(match.a, []).append(site)
    groups = []
    for members in by_input.values():
        if len(members) < 2:
            continue
        weights = [real_of(s.match.b) for s in members]
        biases = [real_of(s.match.bias) for s in members if s.match.bias is not None]
        if any(w is None for w in weights) or len(biases) not in (0, len(members)) or any(b is None for b in biases):
            continue
        tensors = weights + biases
        nodes = [s.match.b for s in members] + [s.match.bias for s in members if s.match.bias is not None]
        ours = {s.node for s in members}
        first = weights[0]
        if (len({id(t) for t in tensors}) != len(tensors)
                or not all(_plain_parameter(t) and t.is_contiguous() for t in tensors)
                or not all(w.dim() == 2 and w.shape[1] == first.shape[1] for w in weights)
                or not all(b.dim() == 1 and b.shape[0] == w.shape[0] for b, w in zip(biases, weights))
                or len({(t.dtype, t.device) for t in tensors}) != 1
                or any(set(node.users) - ours for node in nodes)):
            continue
        a = members[0].a
        n = sum(int(w.shape[0]) for w in weights)
        k = int(first.shape[1])
        b = members[0].b.new_empty_strided((k, n), (1, k))
        bias = members[0].bias.new_empty((n,)) if biases else None
        groups.append(Group(members, weights, biases, a, b, bias))
    return groups


def _plain_parameter(t) -> bool:
    """A Parameter holding a plain tensor: a tensor subclass (a sharded or quantized weight)
    keeps its storage its own way, and is left where it is."""
    import torch

    return type(t) is torch.nn.Parameter and type(t.data) is torch.Tensor


def side_by_side(tensors: list[Any]) -> Any:
    """The tensor `tensors` are consecutive rows of, in their order (one storage, each
    contiguous, each starting where the one before ends), or None. 2-D tensors give
    [sum of rows, k]; 1-D give [sum of sizes]."""
    if not tensors:
        return None
    first = tensors[0]
    storage = first.untyped_storage().data_ptr()
    offset = first.storage_offset()
    rows = 0
    for t in tensors:
        if (not t.is_contiguous() or t.untyped_storage().data_ptr() != storage or t.storage_offset() != offset
                or t.dim() != first.dim() or tuple(t.shape[1:]) != tuple(first.shape[1:])):
            return None
        offset += t.numel()
        rows += t.shape[0]
    shape = (rows, *first.shape[1:])
    return first.as_strided(shape, first.stride(), first.storage_offset())


def place_side_by_side(tensors: list[Any]) -> None:
    """Make `tensors` (Parameters) views of one new buffer, in order, their values copied;
    nothing where they already are."""
    import torch

    if not tensors or side_by_side(tensors) is not None:
        return
    with torch.no_grad():
        buffer = torch.cat([t.detach().reshape(t.shape[0], -1) for t in tensors])
        start = 0
        for t in tensors:
            rows = t.shape[0]
            t.data = buffer[start:start + rows].view(t.shape)
            start += rows
