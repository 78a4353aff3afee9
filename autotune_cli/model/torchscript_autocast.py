"""model/torchscript_autocast.py: a scripted model's forward with its torch.autocast regions applied.

TorchScript runs `with torch.autocast(...)` as a pass of its optimizing executor, which puts
an aten::_autocast_to_reduced_precision cast before each op the region covers; the reader
runs the saved graph with that executor off (torchscript.py), and such a cast applies only
to tensors of the region's device. So the pass is applied here to an inlined copy of
forward, each cast made to apply on the CPU the reader runs on, in the region's dtype: the
matmuls are listed in the dtype they run in where the region applies, as a torch.export
program's regions are read (export_graph.py).
"""

from __future__ import annotations

from typing import Any, Callable

# c10 ScalarType codes of the dtypes a region may cast to
_SCALAR_TYPES = {5: "float16", 6: "float32", 15: "bfloat16"}

_REDUCED = "aten::_autocast_to_reduced_precision"  # (x, cuda_enabled, cpu_enabled, cuda_dtype, cpu_dtype)
_FULL = "aten::_autocast_to_full_precision"  # (x, cuda_enabled, cpu_enabled)


def autocast_forward(module: Any) -> tuple[Callable[..., Any] | None, dict[str, str]]:
    """forward with its autocast casts applying on the CPU, called with the inputs, and the
    regions' device type -> dtype; (None, {}) for a module that has no autocast region."""
    import torch

    graph = module.forward.graph.copy()
    torch._C._jit_pass_inline(graph)
    torch._C._jit_pass_autocast(graph)
    regions: dict[str, str] = {}
    for node in _nodes(graph):
        if node.kind() not in (_REDUCED, _FULL):
            continue
        args = [value.toIValue() for value in list(node.inputs())[1:]]
        if None in args:
            continue  # not constants: left as the pass wrote it
        cuda, cpu = args[0], args[1]
        if node.kind() == _REDUCED:
            if cuda:
                regions["cuda"] = _SCALAR_TYPES.get(args[2], str(args[2]))
            if cpu:
                regions["cpu"] = _SCALAR_TYPES.get(args[3], str(args[3]))
            if cuda and not cpu:  # a CUDA region: cast on the CPU as it casts there
                _set_constant(graph, node, 4, args[2])
        if cuda and not cpu:
            _set_constant(graph, node, 2, True)
    if not regions:
        return None, {}
    function = torch._C._create_function_from_graph("forward", graph)
    return (lambda *inputs: function(module._c, *inputs)), regions


def _nodes(graph: Any) -> list[Any]:
    """Every node of the graph, those inside blocks (if, loop) included."""
    out, stack = [], list(graph.nodes())
    while stack:
        node = stack.pop()
        out.append(node)
        for block in node.blocks():
            stack.extend(block.nodes())
    return out


def _set_constant(graph: Any, node: Any, index: int, value: Any) -> None:
    with graph.insert_point_guard(node):
        node.replaceInput(index, graph.insertConstant(value))
