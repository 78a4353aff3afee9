"""Matmuls under torch.autocast, given their operands in the dtype they run in.

Autocast casts a matmul's operands (input, weight and bias alike) to its dtype as the op
runs: the graph holds float32 operands and a bfloat16 product. Before routing reads the
graph, each such matmul that records no gradients gets that cast as nodes of its own (the
same `.to` autocast makes), so that routing meets the GEMM in the dtype it runs in, the
problem `record` and `autotune model` list for it, and routes it as any. One that records
gradients is left as written (routing leaves it to torch's op, which has a backward).
"""

from __future__ import annotations

__all__ = ["cast_autocast_operands", "casts_to"]


def casts_to(graph, operands: list, dtype) -> dict:
    """{operand node: its `.to(dtype)` node} for each distinct one of `operands` whose traced
    dtype is another (x @ x: one cast), made at the graph's insertion point: the cast
    autocast makes as the op runs."""
    from .sites import node_value

    return {operand: graph.call_method("to", (operand, dtype)) for operand in dict.fromkeys(operands)
            if node_value(operand).dtype != dtype}


def cast_autocast_operands(graph) -> int:
    """Give every matmul of `graph` that runs in another dtype than its operands (see the
    module) its operands cast; how many were."""
    import torch

    from .graph_edits import fill_example_values
    from .sites import match_matmul, node_value, records_gradients

    cast = 0
    for node in list(graph.nodes):
        match = match_matmul(node)
        want = node_value(node)
        if match is None or match.unrouted or not isinstance(want, torch.Tensor):
            continue
        operands = [n for n in (match.a, match.b, match.bias) if isinstance(node_value(n), torch.Tensor)]
        if all(node_value(n).dtype == want.dtype for n in operands):
            continue
        if records_gradients(node, *(node_value(n) for n in operands)):
            continue
        before = set(graph.nodes)
        with graph.inserting_before(node):
            for operand, cast_node in casts_to(graph, operands, want.dtype).items():
                node.replace_input_with(operand, cast_node)
        fill_example_values(graph, before)
        cast += 1
    return cast
