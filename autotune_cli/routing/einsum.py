"""Einsums of two tensors that are one GEMM, rewritten before routing reads the graph into
the bmm torch's einsum runs for them, so that routing meets the problem `autotune model`
lists and `record` writes for them.

Each label of the equation is, by where it appears: in both operands and the output, a
batch dim; in both and not in the output, summed (K); in one operand and the output, that
operand's rows (A: M) or columns (B: N). As torch does, A is permuted to (batch, rows,
summed) and B to (batch, summed, columns), each part flattened into one dim (a dim of
size 1 where there is none), the two multiplied by one bmm (swapped where B's dims all
lead A's in the output), and the product viewed back and permuted into the output's
order. Without a batch, rows of a dynamic size stay unflattened: [*rows, K] @ [K, N], a
matmul of a dynamic M, as a linear's. Any other einsum stays the compiler's, with the
reason `lower_einsums` gives: not two tensors, a diagonal (a label twice in one operand),
a label summed within one operand, a broadcast label (size 1 against another size), no
summed label (an outer product), or a dynamic size the view back needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .autocast import casts_to
from .graph_edits import fill_example_values
from .sites import EINSUM, concrete, einsum_targets, node_value

__all__ = ["einsum_gemm", "lower_einsums"]

_FIRST_ELLIPSIS = 1000  # labels for the dims "..." stands for, past any letter's code


def _labels(term: str, dims: int, ellipsis_dims: int) -> list[int]:
    """One term's labels (a letter's code; "..." as the last `ellipsis_dims` of the labels
    _FIRST_ELLIPSIS on, right-aligned as broadcasting aligns them), for a tensor of `dims`."""
    term = term.replace(" ", "")
    head, dots, tail = term.partition("...")
    if not all(c.isascii() and c.isalpha() for c in head + tail):
        raise ValueError(f"subscripts {term!r} not understood")
    if not dots:
        if len(term) != dims:
            raise ValueError("the equation's dims are not the operand's")
        return [ord(c) for c in term]
    mine = dims - len(head) - len(tail)
    if mine < 0 or mine > ellipsis_dims:
        raise ValueError("the equation's dims are not the operand's")
    dotted = [_FIRST_ELLIPSIS + ellipsis_dims - mine + j for j in range(mine)]
    return [ord(c) for c in head] + dotted + [ord(c) for c in tail]


@dataclass(frozen=True)
class EinsumGemm:
    """An einsum as one GEMM: each operand's labels (A the product's left: the einsum's right
    operand where torch swaps them), the output's, and the labels of each part."""

    a: list[int]
    b: list[int]
    out: list[int]
    batch: list[int]
    rows: list[int]  # A's alone: M
    summed: list[int]  # K
    columns: list[int]  # B's alone: N
    fold: bool  # no batch and a dynamic row: a matmul of [*rows, K] by [K, N], rows unflattened
    swapped: bool  # A is the einsum's right operand
    sizes: dict  # each label's size


def einsum_gemm(equation: str, a_shape: tuple, b_shape: tuple) -> EinsumGemm | str:
    """`equation` over operands of these shapes (sizes ints or symbols) as one GEMM, or why
    it is not one."""
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != 2:
        return "not two operands"
    named = [len(t.replace("...", "")) for t in terms]
    ellipsis_dims = max((len(shape) - n for t, n, shape in zip(terms, named, (a_shape, b_shape))
                         if "..." in t), default=0)
    try:
        a, b = (_labels(t, len(shape), ellipsis_dims) for t, shape in zip(terms, (a_shape, b_shape)))
        dotted = [_FIRST_ELLIPSIS + j for j in range(ellipsis_dims)]
        if arrow:
            head, dots, tail = rhs.partition("...")
            out = [ord(c) for c in head] + (dotted if dots else []) + [ord(c) for c in tail]
            if not all(c.isascii() and c.isalpha() for c in head + tail):
                raise ValueError("output subscripts not understood")
        else:  # implicit: "..." first, then the letters met once, in code order
            once = [s for s in sorted(set(a + b)) if s < _FIRST_ELLIPSIS and (a + b).count(s) == 1]
            out = [s for s in dotted if s in a or s in b] + once
    except ValueError as e:
        return str(e)
    if len(set(a)) < len(a) or len(set(b)) < len(b):
        return "a label repeated in one operand (a diagonal)"
    if len(set(out)) < len(out) or not set(out) <= set(a) | set(b):
        return "an output label repeated or not in the operands"
    sizes = {**dict(zip(b, b_shape)), **dict(zip(a, a_shape))}
    for s in set(a) & set(b):
        x, y = a_shape[a.index(s)], b_shape[b.index(s)]
        if str(x) != str(y):
            return "a label broadcast (size 1 against another)"
    if (set(a) ^ set(b)) - set(out):
        return "a label summed within one operand"
    batch = [s for s in out if s in a and s in b]
    rows = [s for s in out if s in a and s not in b]
    columns = [s for s in out if s in b and s not in a]
    summed = sorted(s for s in a if s in b and s not in out)  # torch aligns them in code order
    if not summed:
        return "no label summed (an outer product)"
    fold = not batch and any(concrete(sizes[s]) is None for s in rows)
    swapped = False
    if not fold:  # torch's swap: the right's dims (of a size other than 1) all lead the left's
        wide = [[out.index(s) for s in labels if concrete(sizes[s]) != 1] for labels in (rows, columns)]
        if wide[0] and wide[1] and wide[1][-1] < wide[0][0]:
            a, b, rows, columns, swapped = b, a, columns, rows, True
    view_back = [part for part in ([columns] if fold else [columns, rows, batch]) if len(part) > 1]
    if any(concrete(sizes[s]) is None for part in view_back for s in part):
        return "a dynamic size in the output's view"
    return EinsumGemm(a, b, out, batch, rows, summed, columns, fold, swapped, sizes)


def lower_einsums(graph) -> tuple[int, dict[Any, str]]:
    """Rewrite every einsum of `graph` that is one GEMM (see the module): how many were, and
    the einsums left, each with the reason routing reports for it."""
    import torch

    lowered, left = 0, {}
    targets = einsum_targets()
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in targets:
            continue
        equation, operands = (node.args[0], list(node.args[1:])) if node.args else (None, [])
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = list(operands[0])  # einsum(eq, [a, b]), as aten.einsum takes them
        values = [node_value(x) for x in operands]
        if any(v is not None for v in node.kwargs.values()) or not isinstance(equation, str) or len(values) != 2 \
                or not all(isinstance(v, torch.Tensor) for v in values):
            left[node] = f"{EINSUM}: not an equation over two tensors"
            continue
        plan = einsum_gemm(equation, tuple(values[0].shape), tuple(values[1].shape))
        if isinstance(plan, str):
            left[node] = f"{EINSUM}: {plan}"
            continue
        before = set(graph.nodes)
        want = node_value(node)
        with graph.inserting_before(node):
            # under torch.autocast, the cast autocast makes inside the einsum, a node of its own
            # (the rewrite's values are computed with autocast off, and the routed op does not cast)
            casts = casts_to(graph, operands, want.dtype) if isinstance(want, torch.Tensor) else {}
            operands = [casts.get(operand, operand) for operand in operands]
            out = _gemm_nodes(graph, *(operands[::-1] if plan.swapped else operands), plan)
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        # grad mode as the einsum was traced under: routing reads whether the product records
        with torch.set_grad_enabled(bool(getattr(want, "requires_grad", False))):
            fill_example_values(graph, before)
        lowered += 1
    return lowered, left


def _gemm_nodes(graph, left, right, plan: EinsumGemm):
    """The nodes computing the einsum as one bmm (a matmul of folded rows where `plan.fold`),
    `left` and `right` the nodes of the plan's A and B; its last."""
    import torch

    batch, rows, summed, columns = plan.batch, plan.rows, plan.summed, plan.columns
    nb, nr, ns, nc = len(batch), len(rows), len(summed), len(columns)

    def permuted(node, labels, order):
        at = [labels.index(s) for s in order]
        return node if at == list(range(len(at))) else graph.call_method("permute", (node, *at))

    def one_dim(node, start: int, count: int):
        """`count` dims from `start` as one: flattened, or a new dim of size 1 for none."""
        if count == 0:
            return graph.call_method("unsqueeze", (node, start))
        return node if count == 1 else graph.call_function(torch.flatten, (node, start, start + count - 1))

    def view_back(node, dim: int, labels: list):
        """Dim `dim` of `node` as the dims of `labels` (dropped for none)."""
        if not labels:
            return graph.call_method("squeeze", (node, dim))
        sizes = tuple(concrete(plan.sizes[s]) for s in labels)
        return node if len(labels) == 1 else graph.call_method("unflatten", (node, dim, sizes))

    x = one_dim(permuted(left, plan.a, batch + rows + summed), nb + nr, ns)
    y = one_dim(one_dim(permuted(right, plan.b, batch + summed + columns), nb + ns, nc), nb, ns)
    if plan.fold:  # [*rows, K] @ [K, N]: a matmul of a dynamic M, as a linear's
        got = view_back(graph.call_function(torch.matmul, (x, y)), nr, columns)
    else:  # [B, M, K] @ [B, K, N], as torch's einsum runs it
        x, y = one_dim(one_dim(x, nb, nr), 0, nb), one_dim(y, 0, nb)
        got = graph.call_function(torch.bmm, (x, y))
        got = view_back(view_back(view_back(got, 2, columns), 1, rows), 0, batch)
    return permuted(got, batch + rows + columns, plan.out)
