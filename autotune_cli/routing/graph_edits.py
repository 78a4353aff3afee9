"""What a rewrite of a Dynamo graph needs to know of it: whether a node writes a tensor in
place (`writes`, `writes_between`: a rewrite that moves a read past a write would see it),
and the traced values of the nodes it adds (`fill_example_values`: AOTAutograd's cache reads
them). Reads node metadata only; imports torch when called."""

from __future__ import annotations

import operator

__all__ = ["fill_example_values", "writes", "writes_between"]

_IN_PLACE_OPERATORS = {operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv,
                       operator.imod, operator.ipow, operator.iand, operator.ior, operator.ixor,
                       operator.ilshift, operator.irshift, operator.imatmul, operator.setitem}


def writes(node) -> bool:
    """Whether graph node `node` may write a tensor in place: an op whose schema says it
    mutates (an exported program's aten.add_.Tensor), a method or function named with a
    trailing _, an augmented assignment, an item set, an out=."""
    if node.op not in ("call_method", "call_function"):
        return False
    schema = getattr(node.target, "_schema", None)  # an OpOverload: its name carries the overload
    if schema is not None:
        return bool(schema.is_mutable)
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    return (name.endswith("_") and not name.startswith("__")) or node.target in _IN_PLACE_OPERATORS \
        or "out" in node.kwargs


def writes_between(first, last) -> bool:
    """Whether a node after `first` and before `last` may write a tensor in place (`writes`):
    a rewrite that reads, at `last`, what was read at `first` would see the write."""
    node = first.next
    while node is not last:
        if writes(node):
            return True
        node = node.next
    return False


_SIZE_OPERATORS = {operator.getitem, operator.add}  # on sizes and tuples: what a rewrite adds outside a fake mode


def fill_example_values(graph, before: set) -> None:
    """Give each call node added since `before` (the graph's nodes then) without an
    "example_value" the value Dynamo records for its own: its target run on its inputs'
    values, fake tensors in their own mode, autocast off (of the ops a rewrite adds, only SDPA
    would change under it, and the fold gives its node SDPA's own value). AOTAutograd's cache
    reads these: a method called on a node without one makes the graph uncacheable, and every
    later compile of it traces it anew. A node whose inputs have no value, or whose target
    fails on them, keeps none (the graph is compiled all the same)."""
    import contextlib

    import torch
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.fx.node import map_arg

    for node in graph.nodes:
        if node in before or node.op not in ("call_function", "call_method") or "example_value" in node.meta:
            continue
        if any("example_value" not in n.meta for n in node.all_input_nodes):
            continue
        # the values' own mode: the tracing context's, when the backend runs, is another
        modes = [v.fake_mode for v in (n.meta["example_value"] for n in node.all_input_nodes)
                 if isinstance(v, FakeTensor)]
        if not modes and node.target not in _SIZE_OPERATORS:
            continue  # nothing is run for real
        args, kwargs = map_arg((node.args, node.kwargs), lambda n: n.meta["example_value"])
        try:
            with modes[0] if modes else contextlib.nullcontext(), \
                    torch.autocast("cpu", enabled=False), torch.autocast("cuda", enabled=False):
                value = (node.target(*args, **kwargs) if node.op == "call_function"
                         else getattr(args[0], node.target)(*args[1:], **kwargs))
        except Exception:  # noqa: BLE001 - only the cache's reading of the graph is lost
            continue
        node.meta["example_value"] = value
