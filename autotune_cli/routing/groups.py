"""Linears that read one input, run as one GEMM: q, k and v of an attention, at decode.

Their weights are placed side by side in one buffer (each Parameter becomes a view of it, its
values unchanged), so one GEMM reads them all, [M, K] by the buffer's [K, sum of N], and the
output is cut back into the linears' outputs (each a contiguous copy of its columns, as the
linear's own output was: code after it may view it any way): one launch and one tail instead
of three, and a problem wide enough to keep the memory system busy (bench/README.md, "A
serving loop").

A group is made only where it wins: the one GEMM's tuned time leads the sum of its parts' by
the margin a kernel needs over cuBLAS in a tune (the times come from separate tunes; gate and
up of an MLP, each already wide, are faster apart). Its members are linears of one input node
with static shapes and no in-place op between the first and the last of them (the one GEMM
runs where the first was); each weight (and bias: all or none) a contiguous Parameter of a
plain tensor, used by nothing else in the graph, that owns its storage alone (no other tensor
or module shares it, nor, on the CPU, another process: moving it would part them), unless the
weights already lie side by side.

The weights move after the graph is compiled, before its first run: the compiler traced them
where they were, and nothing in the graph but the group's op reads them. The op checks on
each call that they are still side by side. Where they are not (one compiled graph run with
another layer's weights, a conversion of the model, a weight assigned anew) it places them so
itself, once per route and weights, where they may move and the graph is not replayed as
CUDA graphs (their warm-up allocates from the graphs' pool, which later replays reuse); else
it computes the linears one by one, and says so once.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable

from ..api.problems import plain_parameter
from ..problem import one_gemm
from .graph_edits import writes_between
from .sites import Site

__all__ = ["Group", "find_groups", "movable", "place_side_by_side", "real_values", "rewrite_group", "side_by_side",
           "wholes", "worth_grouping"]


@dataclass(frozen=True)
class Group:
    """Linears of one input (`sites`, in graph order) with their real weights and biases."""

    sites: tuple[Site, ...]
    weights: tuple[Any, ...]  # the Parameters, [n_i, k] each
    biases: tuple[Any, ...]  # [n_i] each, or none
    a: Any  # the shared input as a GEMM's A (fake)
    b: Any  # the weights side by side as a GEMM's B: [k, sum of n_i], fake
    bias: Any = None  # the biases side by side, [sum of n_i], fake; None without
    problem: Any = None  # the one GEMM's (problem.one_gemm of the linears')

    @property
    def widths(self) -> list[int]:
        return [int(w.shape[0]) for w in self.weights]


def worth_grouping(part_ms: list[float], group_ms: float, margin: float) -> bool:
    """Whether one GEMM of `group_ms` leads its parts run one by one by `margin` (a share)."""
    return len(part_ms) > 1 and group_ms <= (1 - margin) * sum(part_ms)


def find_groups(sites: list[Site], real_of: Callable[[Any], Any], problem_of: Callable[[Site], Any]) -> list[Group]:
    """The groups `sites` hold (see the module); `real_of(node)` gives a weight node's real
    tensor (a graph input's or attribute's), or None; `problem_of(site)` a site's problem,
    whose one GEMM (problem.one_gemm, the rule `autotune model --groups` and `record` list
    by) the group's is."""
    by_input: dict[Any, list[Site]] = {}
    for site in sites:
        match = site.match
        if (site.skip or not site.static or site.scaled is not None or match is None or not match.transpose_b
                or match.batch is not None or match.bias_apart):
            continue
        by_input.setdefault(match.a, []).append(site)
    groups = []
    for members in by_input.values():
        if len(members) < 2 or writes_between(members[0].node, members[-1].node):
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
                or not all(w.dim() == 2 and w.shape[1] == first.shape[1] for w in weights)
                or not all(b.dim() == 1 and b.shape[0] == w.shape[0] for b, w in zip(biases, weights))
                or len({(t.dtype, t.device) for t in tensors}) != 1
                or any(set(node.users) - ours for node in nodes)
                or not movable(weights, biases)):
            continue
        problem = one_gemm([problem_of(s) for s in members])
        if problem is None:
            continue
        n = sum(int(w.shape[0]) for w in weights)
        k = int(first.shape[1])
        b = members[0].b.new_empty_strided((k, n), (1, k))
        bias = members[0].bias.new_empty((n,)) if biases else None
        groups.append(Group(tuple(members), tuple(weights), tuple(biases), members[0].a, b, bias, problem))
    return groups


def movable(*lists) -> bool:
    """Whether each of `lists` (a group's weights, its biases) may be placed side by side:
    contiguous Parameters of plain tensors, already side by side or each owning its storage
    alone."""
    return all(all(plain_parameter(t) and t.is_contiguous() for t in tensors) and (
        side_by_side(tensors) is not None or all(map(_owns_storage, tensors))) for tensors in lists)


def _owns_storage(t) -> bool:
    """Whether `t` alone holds its storage, all of it, in this process: moving it then parts
    it from nothing (a view of a larger buffer, another module's Parameter over the same
    storage, CPU shared memory would keep the old storage). A CUDA weight sent to another
    process (CUDA IPC) is not seen as shared."""
    import torch

    storage = t.untyped_storage()
    # is_shared() is True for every CUDA tensor (torch's own definition): it marks shared
    # memory on the CPU alone
    if (t.device.type == "cpu" and t.is_shared()) or storage.nbytes() != t.numel() * t.element_size():
        return False
    count = getattr(torch._C, "_storage_Use_Count", None)  # the tensor and `storage` itself: 2
    return count is None or count(storage._cdata) <= 2


def side_by_side(tensors) -> Any:
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


def wholes(weights, biases) -> tuple[Any, Any] | None:
    """(the weights side by side, the biases side by side or None without), or None where
    either list is apart."""
    b, bias = side_by_side(weights), side_by_side(biases)
    return None if b is None or (biases and bias is None) else (b, bias)


def place_side_by_side(*lists) -> None:
    """Make the tensors (Parameters) of each of `lists` views of one new buffer, in order,
    their values copied; nothing for a list that already is."""
    import torch

    for tensors in lists:
        if not tensors or side_by_side(tensors) is not None:
            continue
        with torch.no_grad():
            buffer = torch.cat([t.detach().reshape(t.shape[0], -1) for t in tensors])
            start = 0
            for t in tensors:
                rows = t.shape[0]
                t.data = buffer[start:start + rows].view(t.shape)
                start += rows


def real_values(gm, example_inputs) -> Callable:
    """node -> the real tensor a graph input (placeholder) or attribute node stands for, or
    None: what a group's weights are (the graph's own values are fake)."""
    index = {node: i for i, node in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}

    def real_of(node):
        if getattr(node, "op", None) == "placeholder" and index.get(node, len(example_inputs)) < len(example_inputs):
            return example_inputs[index[node]]
        if getattr(node, "op", None) == "get_attr":
            try:
                return operator.attrgetter(node.target)(gm)
            except AttributeError:
                return None
        return None

    return real_of


def rewrite_group(graph, group: Group, op, name: str) -> None:
    """Replace a group's linears by one call of `op` (autotune::gemm_group, route `name`) and
    a contiguous copy of its columns each, before the first of them (a weight read through an
    attribute node is moved there)."""
    import torch

    first = group.sites[0].node
    inputs = [site.match.b for site in group.sites] + [site.match.bias for site in group.sites
                                                        if site.match.bias is not None]
    for node in inputs:
        if node.op == "get_attr":
            first.prepend(node)
    match = group.sites[0].match
    with graph.inserting_before(first):
        a_node = match.a
        if match.fold is not None:
            a_node = graph.call_function(torch.reshape, (a_node, tuple(group.a.shape)))
        out = graph.call_function(op, (a_node, [s.match.b for s in group.sites],
                                       [s.match.bias for s in group.sites if s.match.bias is not None], name))
        start = 0
        for site, width in zip(group.sites, group.widths):
            part = graph.call_function(torch.narrow, (out, -1, start, width))
            part = graph.call_method("contiguous", (part,))
            start += width
            if match.fold is not None:
                part = graph.call_function(torch.reshape, (part, (*match.fold, width)))
            site.node.replace_all_uses_with(part)
    for site in group.sites:
        graph.erase_node(site.node)
