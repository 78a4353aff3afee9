"""Matmuls under torch.autocast, given their operands in the dtype they run in.

Autocast casts a matmul's operands (input, weight and bias alike) to its dtype as the op
runs: the graph holds float32 operands and a bfloat16 product. Before routing reads the
graph, each such matmul that records no gradients gets that cast as nodes of its own (the
same `.to` autocast makes), so that routing meets the GEMM in the dtype it runs in, the
problem `record` and `autotune model` list for it, and routes it as any. One that records
gradients is left as written (routing leaves it to torch's op, which has a backward).
"""

from __future__ import annotations

__all__ = ["autocast_dtype", "cast_autocast_operands", "casts_to"]


def casts_to(graph, operands: list, dtype) -> dict:
    """{operand node: its `.to(dtype)` node} for each distinct one of `operands` whose traced
    dtype is another (x @ x: one cast), made at the graph's insertion point: the cast
    autocast makes as the op runs."""
    from .sites import node_value

    return {operand: graph.call_method("to", (operand, dtype)) for operand in dict.fromkeys(operands)
            if node_value(operand).dtype != dtype}


def autocast_dtype(stack: list, device_type: str):
    """The dtype autocast runs a matmul on `device_type` in, or None where it is off: the
    innermost region the graph enters for that device (`stack`: (device type, dtype,
    enabled) of each region entered and not left), else the state the graph is compiled
    under (one called under torch.autocast: Dynamo guards on it, the graph holds no region)."""
    import torch

    try:
        for device, dtype, enabled in reversed(stack):
            if device == device_type:  # torch.autocast("cuda") names no dtype: the device's
                return (dtype or torch.get_autocast_dtype(device_type)) if enabled else None
        if torch.is_autocast_enabled(device_type):
            return torch.get_autocast_dtype(device_type)
    except (RuntimeError, TypeError, ValueError):  # a device type autocast does not know
        return None
    return None


def cast_autocast_operands(graph) -> int:
    """Give every matmul of `graph` that autocast runs in another dtype than its operands
    (see the module) its operands cast; how many were. Operands of two dtypes outside
    autocast are left as they are: torch's op refuses them, and so does the compiled graph."""
    import torch
    from torch.amp.autocast_mode import _enter_autocast, _exit_autocast

    from .graph_edits import fill_example_values
    from .sites import MIXED_DTYPES_MARK, match_matmul, node_value, records_gradients

    cast = 0
    regions: dict = {}  # each _enter_autocast node not left yet -> (device type, dtype, enabled)
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is _enter_autocast:
            regions[node] = tuple((list(node.args) + [None, None, True])[:3])
            continue
        if node.op == "call_function" and node.target is _exit_autocast:
            regions.pop(node.args[0] if node.args else None, None)
            continue
        match = match_matmul(node)
        want = node_value(node)
        if match is None or match.unrouted or not isinstance(want, torch.Tensor):
            continue
        operands = [n for n in (match.a, match.b, match.bias) if isinstance(node_value(n), torch.Tensor)]
        if all(node_value(n).dtype == want.dtype for n in operands):
            continue
        if autocast_dtype(list(regions.values()), want.device.type) != want.dtype:
            node.meta[MIXED_DTYPES_MARK] = True  # not autocast's doing: two dtypes torch's op refuses
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
