"""A routed winner whose output rows are padded (`pitch`: aten::mm_aligned, triton::mm_padded)
gives a tensor torch's matmul never would: rows apart in memory. torch's ops read any
strides, so the graph's own ops take it as it is (Inductor fuses a pointwise consumer's read
of it); a user that needs the rows whole gets one contiguous copy, made once: a view that
merges the last dim (`y.view(-1)` fails on padded rows), an op that is not torch's (a custom
op may assume contiguity), and the graph's output (the caller's code may view it, as it may
under torch.compile alone). Where the product is written in place, or a view of it (a slice,
a transpose, an in-place op's result) reaches such a user, every user reads the copy: the
copy is then the product, each write and view made on it as on torch's output (a copy for
the strict users alone missed the writes, and views of views kept the padded rows).
"""

from __future__ import annotations

from typing import Any

__all__ = ["rows_whole_for_strict_users"]

_VIEWS = frozenset({"view", "view_as", "as_strided", "set_", "data_ptr", "untyped_storage"})


def needs_rows_whole(user: Any) -> bool:
    """Whether graph node `user` may not read a tensor whose rows are padded (see the module)."""
    import torch

    if user.op == "output":
        return True
    if user.op == "call_method":
        return user.target in _VIEWS
    if user.op != "call_function":
        return True
    target = user.target
    if target in (torch.Tensor.view, torch.Tensor.view_as, torch.as_strided):
        return True
    aten = torch.ops.aten
    if getattr(target, "overloadpacket", target) in (aten.view, aten._unsafe_view, aten.view_as, aten.as_strided):
        return True  # an exported program's views
    namespace = getattr(target, "namespace", None)  # an OpOverload(Packet): torch.ops.<namespace>
    return namespace is not None and namespace not in ("aten", "prims", "autotune")


def _aliases(graph, node, value) -> set:
    """The nodes after `node` whose traced value (a tensor, or tensors in a tuple or list)
    shares the storage of `value`, the product as traced: its views and in-place results."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef

    def storages(v) -> list:
        if isinstance(v, torch.Tensor):
            try:
                return [StorageWeakRef(v.untyped_storage())]
            except (NotImplementedError, RuntimeError):  # a tensor without a storage (sparse, ...)
                return []
        if isinstance(v, (tuple, list)):
            return [s for x in v for s in storages(x)]
        return []

    mine = storages(value)
    if not mine:
        return set()
    found, at = set(), node.next
    while at.op != "output":
        if any(s in mine for s in storages(at.meta.get("example_value"))):
            found.add(at)
        at = at.next
    return found


def rows_whole_for_strict_users(graph, node, value) -> None:
    """Point the users of `node` (a padded route's output; `value` the product's traced value)
    that need its rows whole at one contiguous copy of it, the others reading it as it is; or
    every user, where the product is written in place or a view of it that keeps its padded
    rows needs them whole (see the module)."""
    from .graph_edits import writes

    aliases = _aliases(graph, node, value)
    strict = [user for user in node.users if needs_rows_whole(user)]
    written = any(writes(n) and any(a in aliases or a is node for a in n.all_input_nodes) for n in graph.nodes)
    # the views that read the padded rows: those not made from a strict user's copy
    padded, todo = set(), [user for user in node.users if user in aliases and user not in strict]
    while todo:
        view = todo.pop()
        if view not in padded:
            padded.add(view)
            todo += [user for user in view.users if user in aliases]
    if written or any(needs_rows_whole(user) for view in padded for user in view.users):
        strict = list(node.users)
    if not strict:
        return
    with graph.inserting_after(node):
        whole = graph.call_method("contiguous", (node,))
    for user in strict:
        user.replace_input_with(node, whole)
