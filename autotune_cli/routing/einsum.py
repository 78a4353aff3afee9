"""Einsums of two tensors that are one GEMM, rewritten into the matmul they are before
routing reads the graph, so that matmul_sites finds them as any mm, bmm or folded matmul.

Each label of the equation is, by where it appears: in both operands and the output, a
batch dim; in both and not in the output, summed (K); in one operand and the output, that
operand's rows (A: M) or columns (B: N). A is permuted to (batch, rows, summed) and B to
(batch, summed, columns), the summed dims (and the columns, and with a batch the rows)
flattened into one, one torch.matmul multiplies them, and its output is viewed back and
permuted into the output's order: the steps torch's einsum takes, with the product left
as a matmul (rows without a batch stay unflattened, so that a dynamic token count folds as
a linear's does). Any other einsum stays the compiler's, with the reason `lower_einsums`
gives: not two tensors, a diagonal (a label twice in one operand), a label summed within
one operand, a broadcast label (size 1 against another size), no summed label (an outer
product), or a size the view back needs that is dynamic.
"""

from __future__ import annotations

from typing import Any

from .sites import EINSUM, concrete, fill_example_values, node_value

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


def einsum_gemm(equation: str, a_shape: tuple, b_shape: tuple) -> tuple[list[int], ...] | str:
    """(A's labels, B's, the output's, batch, rows, summed, columns) of `equation` over
    operands of these shapes (sizes ints or symbols), or why it is not one GEMM."""
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
    summed = [s for s in a if s in b and s not in out]
    if not summed:
        return "no label summed (an outer product)"
    view_back = columns if len(columns) > 1 else []
    view_back += rows if batch and len(rows) > 1 else []
    if any(concrete(sizes[s]) is None for s in view_back):
        return "a dynamic size in the output's view"
    return a, b, out, batch, rows, summed, columns


def lower_einsums(graph) -> tuple[int, dict[Any, str]]:
    """Rewrite every einsum of `graph` that is one GEMM (see the module): how many were, and
    the einsums left, each with the reason routing reports for it."""
    import torch

    lowered, left = 0, {}
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not torch.einsum:
            continue
        equation, operands = (node.args[0], list(node.args[1:])) if node.args else (None, [])
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = list(operands[0])
        values = [node_value(x) for x in operands]
        if node.kwargs or not isinstance(equation, str) or len(values) != 2 \
                or not all(isinstance(v, torch.Tensor) for v in values):
            left[node] = f"{EINSUM}: not an equation over two tensors"
            continue
        plan = einsum_gemm(equation, tuple(values[0].shape), tuple(values[1].shape))
        if isinstance(plan, str):
            left[node] = f"{EINSUM}: {plan}"
            continue
        before = set(graph.nodes)
        with graph.inserting_before(node):
            out = _gemm_nodes(graph, operands, values, *plan)
        node.replace_all_uses_with(out)
        want = node_value(node)
        graph.erase_node(node)
        # grad mode as the einsum was traced under: routing reads whether the product records
        with torch.set_grad_enabled(bool(getattr(want, "requires_grad", False))):
            fill_example_values(graph, before)
        lowered += 1
    return lowered, left


def _gemm_nodes(graph, operands: list, values: list, a: list, b: list, out: list, batch: list,
                rows: list, summed: list, columns: list):
    """The nodes computing the einsum as one matmul (see the module); its last."""
    import torch

    sizes = {**dict(zip(b, values[1].shape)), **dict(zip(a, values[0].shape))}
    nb = len(batch)

    def permuted(node, labels, order):
        at = [labels.index(s) for s in order]
        return node if at == list(range(len(at))) else graph.call_method("permute", (node, *at))

    def one_dim(node, start: int, count: int):
        """`count` dims from `start` as one: flattened, or a new dim of size 1 for none."""
        if count == 0:
            return graph.call_method("unsqueeze", (node, start))
        return node if count == 1 else graph.call_function(torch.flatten, (node, start, start + count - 1))

    x = permuted(operands[0], a, batch + rows + summed)
    x = one_dim(x, nb + len(rows), len(summed))
    if batch or not rows:
        x = one_dim(x, nb, len(rows))
    y = permuted(operands[1], b, batch + summed + columns)
    y = one_dim(one_dim(y, nb, len(summed)), nb + 1, len(columns))
    got = graph.call_function(torch.matmul, (x, y))  # [*batch, M, N], or [*rows, N]
    row_dim = nb if batch or not rows else nb + len(rows) - 1  # the dim the rows end at
    col_dim = row_dim + 1
    if not columns:
        got = graph.call_method("squeeze", (got, col_dim))
    elif len(columns) > 1:
        got = graph.call_method("unflatten", (got, col_dim, tuple(concrete(sizes[s]) for s in columns)))
    if not rows:
        got = graph.call_method("squeeze", (got, row_dim))
    elif batch and len(rows) > 1:
        got = graph.call_method("unflatten", (got, row_dim, tuple(concrete(sizes[s]) for s in rows)))
    return permuted(got, batch + rows + columns, out)
