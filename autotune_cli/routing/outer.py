"""A matmul with K = 1 rewritten as the broadcast multiply it is (sites.OUTER)."""

from __future__ import annotations

import operator

from .sites import Site, node_value

__all__ = ["rewrite_outer"]


def rewrite_outer(graph, site: Site) -> None:
    """A matmul with K = 1 as `a * b` broadcast (plus its bias): each output is the one product
    the GEMM would make, and the compiler fuses it with its neighbours, where the GEMM is a
    launch of its own (Inductor's default mode sends a float32 bmm to cuBLAS)."""

    import torch

    match = site.match
    want = node_value(site.node)
    dtype = want.dtype if want is not None else None

    def as_output(n):  # an autocast region casts a matmul's operands, not a multiply's
        value = node_value(n)
        return n if dtype is None or value is None or value.dtype == dtype else graph.call_method("to", (n, dtype))

    with graph.inserting_before(site.node):
        a_node, b_node = as_output(match.a), as_output(match.b)
        b_node = graph.call_function(torch.t, (b_node,)) if match.transpose_b else b_node
        out = graph.call_function(operator.mul, (a_node, b_node))
        if match.bias is not None:
            out = graph.call_function(operator.add, (as_output(match.bias), out))
        out = graph.call_method("contiguous", (out,))  # as the matmul's output is
    site.node.replace_all_uses_with(out)
    graph.erase_node(site.node)
