"""A routed winner whose output rows are padded (`pitch`: aten::mm_aligned, triton::mm_padded)
gives a tensor torch's matmul never would: rows apart in memory. torch's ops read any
strides, so the graph's own ops take it as it is (Inductor fuses a pointwise consumer's read
of it); a user that needs the rows whole gets one contiguous copy, made once: a view that
merges the last dim (`y.view(-1)` fails on padded rows), an op that is not torch's (a custom
op may assume contiguity), and the graph's output (the caller's code may view it, as it may
under torch.compile alone).
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
    namespace = getattr(target, "namespace", None)  # an OpOverload(Packet): torch.ops.<namespace>
    return namespace is not None and namespace not in ("aten", "prims", "autotune")


def rows_whole_for_strict_users(graph, node) -> None:
    """Point the users of `node` (a padded route's output) that need its rows whole at one
    contiguous copy of it; the others keep reading it as it is."""
    strict = [user for user in node.users if needs_rows_whole(user)]
    if not strict:
        return
    with graph.inserting_after(node):
        whole = graph.call_method("contiguous", (node,))
    for user in strict:
        user.replace_input_with(node, whole)
