"""torch.inner, torch.tensordot, torch.linalg.multi_dot and torch.chain_matmul rewritten,
before routing reads the graph, into the mm calls torch runs for them (model/products.py
lists the same problems for `autotune model`, and `record` writes them), so that routing
meets those products as any mm:

  tensordot(a, b, dims)  a permuted to (its free dims, the summed ones) and reshaped to
                         [M, K], b to (the summed dims, its free ones) and [K, N], one
                         torch.mm, reshaped to the output (a reshape copies where torch's
                         would); inner(a, b) is tensordot over the last dim of each.
  multi_dot(ts)          torch.mm in the order torch picks (model/products.multiply_chain), a
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


def _tensordot_dims(node, kind: str, shapes) -> tuple[list[int], ...] | None:
    """(A's free dims, A's summed, B's summed, B's free) of an inner or tensordot with sizes
    that agree (model/products.tensordot_split), or None where nothing is kept on either side
    (a dot) or the dims are not read."""
    from ..model.products import tensordot_split

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
            dims_a, dims_b = list(dims[0]), list(dims[1])
        else:
            return None
    split = tensordot_split(len(a), len(b), dims_a, dims_b)
    if split is None or len(split[1]) != len(split[2]) or any(a[i] != b[j] for i, j in zip(split[1], split[2])):
        return None
    return split


def _tensordot_nodes(graph, operands, shapes, dims):
    import torch

    (a, b), (sa, sb), (free_a, dims_a, dims_b, free_b) = operands, shapes, dims
    left = _as_matrix(graph, a, free_a + dims_a, prod(sa[d] for d in free_a), prod(sa[d] for d in dims_a))
    right = _as_matrix(graph, b, dims_b + free_b, prod(sb[d] for d in dims_b), prod(sb[d] for d in free_b))
    return graph.call_function(torch.mm, (left, right))


def _as_matrix(graph, node, order: list[int], rows: int, cols: int):
    if order != list(range(len(order))):
        node = graph.call_method("permute", (node, *order))
    return graph.call_method("reshape", (node, rows, cols))


def _chain_nodes(graph, operands, shapes):
    import torch

    from ..model.products import multiply_chain

    nodes = list(operands)
    if len(shapes[0]) == 1:  # a row vector
        nodes[0] = graph.call_method("unsqueeze", (nodes[0], 0))
        shapes = [(1, shapes[0][0]), *shapes[1:]]
    if len(shapes[-1]) == 1:  # a column vector
        nodes[-1] = graph.call_method("unsqueeze", (nodes[-1], 1))
        shapes = [*shapes[:-1], (shapes[-1][0], 1)]
    return multiply_chain(nodes, [s[0] for s in shapes] + [shapes[-1][1]],
                          lambda left, right: graph.call_function(torch.mm, (left, right)))
