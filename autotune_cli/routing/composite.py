"""torch.inner, torch.tensordot, torch.linalg.multi_dot and torch.chain_matmul rewritten,
before routing reads the graph, into the mm calls torch runs for them (model/products.py
lists the same problems for `autotune model`, and `record` writes them), so that routing
meets those products as any mm:

  tensordot(a, b, dims)  a permuted to (its free dims, the summed ones) and reshaped to
                         [M, K], b to (the summed dims, its free ones) and [K, N], one
                         torch.mm, reshaped to the output (a reshape copies where torch's
                         would); inner(a, b) is tensordot over the last dim of each.
  multi_dot(ts)          torch.mm in the order torch picks (model/products.chain_order), a
                         1-D first operand a row and a 1-D last one a column, the product
                         reshaped to the output.

The aten ops an exported program's module calls in their place are rewritten alike. Only
static sizes, two or more dims kept in all (no free dim on either side is a dot), and no
`out=`: any other call stays the compiler's, said as before (sites.OTHER_KIND).
"""

from __future__ import annotations

from math import prod

from .autocast import casts_to
from .graph_edits import fill_example_values
from .sites import concrete, node_value

__all__ = ["lower_products"]


def lower_products(graph) -> int:
    """Rewrite every inner, tensordot and multi_dot of `graph` that has static sizes (see the
    module); how many were."""
    import torch

    aten = torch.ops.aten
    # torch's functions as Dynamo records them, and the aten ops an exported program's module
    # calls in their place (tensordot's dims as two lists, chain_matmul's matrices as one)
    functions = {torch.inner: "inner", torch.tensordot: "tensordot", torch.linalg.multi_dot: "multi_dot",
                 torch.chain_matmul: "chain_matmul", aten.inner.default: "inner",
                 aten.tensordot.default: "tensordot", aten.linalg_multi_dot.default: "multi_dot",
                 aten.chain_matmul.default: "multi_dot"}
    lowered = 0
    for node in list(graph.nodes):
        kind = _kind(node, functions)
        if kind is None or any(v is not None for k, v in node.kwargs.items() if k not in ("dims",)):
            continue
        want = node_value(node)
        operands = _operands(node, kind)
        values = [node_value(x) for x in operands or ()]
        if not operands or not isinstance(want, torch.Tensor) or not all(
                isinstance(v, torch.Tensor) and v.dtype.is_floating_point and v.dim() >= 1
                and all(concrete(s) is not None for s in v.shape) for v in values):
            continue
        shapes = [tuple(concrete(s) for s in v.shape) for v in values]
        dims = None
        if kind in ("inner", "tensordot"):
            dims = _tensordot_dims(node, kind, shapes)
            if dims is None:
                continue
        elif len(shapes) < 2 or any(len(s) != 2 for s in shapes[1:-1]) or any(len(s) > 2 for s in shapes):
            continue  # torch's own error, or a form not read
        before = set(graph.nodes)
        with graph.inserting_before(node):
            # under torch.autocast, the cast autocast makes inside the product, a node of its own
            casts = casts_to(graph, operands, want.dtype)
            operands = [casts.get(operand, operand) for operand in operands]
            if dims is not None:
                out = _tensordot_nodes(graph, operands, shapes, dims)
            else:
                out = _chain_nodes(graph, operands, shapes)
            out = graph.call_method("reshape", (out, tuple(int(d) for d in want.shape)))  # () for a scalar
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        with torch.set_grad_enabled(bool(getattr(want, "requires_grad", False))):
            fill_example_values(graph, before)
        lowered += 1
    return lowered


def _kind(node, functions: dict) -> str | None:
    if node.op == "call_function":
        try:
            return functions.get(node.target)
        except TypeError:  # an unhashable target
            return None
    if node.op == "call_method" and node.target == "inner":
        return "inner"
    return None


def _operands(node, kind: str) -> list | None:
    """The operand nodes of the call, in order (multi_dot's list flattened)."""
    args = list(node.args)
    if kind == "multi_dot":
        return list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else None
    if kind == "chain_matmul":
        return args if len(args) >= 2 else None
    return args[:2] if len(args) >= 2 else None


def _tensordot_dims(node, kind: str, shapes) -> tuple[list[int], list[int]] | None:
    """(A's summed dims, B's) of an inner or tensordot with sizes that agree, or None where
    nothing is kept on either side (a dot) or the dims are not read."""
    a, b = shapes
    if kind == "inner":
        dims_a, dims_b = [len(a) - 1], [len(b) - 1]
    else:
        dims = node.kwargs.get("dims", node.args[2] if len(node.args) > 2 else 2)
        if len(node.args) == 4:  # aten.tensordot(self, other, dims_self, dims_other)
            dims = (node.args[2], node.args[3])
        if isinstance(dims, int):
            dims_a, dims_b = list(range(len(a) - dims, len(a))), list(range(dims))
        elif isinstance(dims, (list, tuple)) and len(dims) == 2 and all(isinstance(d, (list, tuple)) for d in dims) \
                and all(isinstance(i, int) for d in dims for i in d):
            dims_a, dims_b = [d % len(a) for d in dims[0]], [d % len(b) for d in dims[1]]
        else:
            return None
    if len(dims_a) != len(dims_b) or any(a[i] != b[j] for i, j in zip(dims_a, dims_b)):
        return None
    if len(dims_a) == len(a) and len(dims_b) == len(b):
        return None  # every dim summed: a dot
    return dims_a, dims_b


def _tensordot_nodes(graph, operands, shapes, dims):
    import torch

    (a, b), (sa, sb), (dims_a, dims_b) = operands, shapes, dims
    free_a = [d for d in range(len(sa)) if d not in dims_a]
    free_b = [d for d in range(len(sb)) if d not in dims_b]
    left = _as_matrix(graph, a, free_a + dims_a, prod(sa[d] for d in free_a), prod(sa[d] for d in dims_a))
    right = _as_matrix(graph, b, dims_b + free_b, prod(sb[d] for d in dims_b), prod(sb[d] for d in free_b))
    return graph.call_function(torch.mm, (left, right))


def _as_matrix(graph, node, order: list[int], rows: int, cols: int):
    if order != list(range(len(order))):
        node = graph.call_method("permute", (node, *order))
    return graph.call_method("reshape", (node, rows, cols))


def _chain_nodes(graph, operands, shapes):
    import torch

    from ..model.products import chain_order, three_right_first

    nodes = list(operands)
    if len(shapes[0]) == 1:  # a row vector
        nodes[0] = graph.call_method("unsqueeze", (nodes[0], 0))
        shapes = [(1, shapes[0][0]), *shapes[1:]]
    if len(shapes[-1]) == 1:  # a column vector
        nodes[-1] = graph.call_method("unsqueeze", (nodes[-1], 1))
        shapes = [*shapes[:-1], (shapes[-1][0], 1)]
    p = [s[0] for s in shapes] + [shapes[-1][1]]

    def mm(left, right):
        return graph.call_function(torch.mm, (left, right))

    n = len(nodes)
    if n == 2:
        return mm(nodes[0], nodes[1])
    if n == 3:
        if three_right_first(p):
            return mm(nodes[0], mm(nodes[1], nodes[2]))
        return mm(mm(nodes[0], nodes[1]), nodes[2])
    split = chain_order(p)

    def run(i: int, j: int):
        if i == j:
            return nodes[i]
        k = split[i][j]
        left = run(i, k)
        return mm(left, run(k + 1, j))

    return run(0, n - 1)
