"""model/export_program.py: the matmuls of a torch.export program, from its serialized graph.

The program that torch.export.load would return is stored in the archive as JSON
(`models/model.json`), serialized as torch/_export/serde/schema.py describes (schema
version 8.20 in torch 2.13; another major version is refused). Each node names its target
("torch.ops.aten.mm.default") and its inputs by schema argument name; `graph.tensor_values`
gives every tensor's dtype, sizes and strides (read by export_expr.ExprReader);
`signature.input_specs` says which placeholders are user inputs; `range_constraints` maps
str(symbol) to {"min_val", "max_val"} (null for unbounded). `parse_exported_program` reads
those, and nothing else, into an `ExportGraph`: each matmul-like node classified, the user
inputs' sizes, the dynamic dims' ranges. What it does not understand is
`ArchiveUnreadable`, naming it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from .classify import MATMUL_OPS, MatmulCall, Operand, classify_call
from .export_expr import IDENT_RE, ArchiveUnreadable, ExprReader, expr_symbol_names, one_field


@dataclass
class ExportGraph:
    """What is read of an exported program."""

    raws: list[Any]  # classify_call's results for the graph's matmul-like nodes, in order
    inputs: list[tuple[str, tuple[Any, ...]]]  # user tensor inputs: placeholder name, sizes
    ranges: dict[str, Any]  # symbol name -> its range (.lower, .upper), as range_constraints
    untuned: dict[str, int] = dataclasses.field(default_factory=dict)  # UNTUNED_KINDS kind -> how many
    input_dtypes: dict[str, str] = dataclasses.field(default_factory=dict)  # user tensor input -> its dtype


# Ops that do much of a model's arithmetic but are no GEMM autotune tunes: the report names
# them, so that a Linear's share of the GEMMs is not read as its share of the model.
UNTUNED_KINDS = {
    "convolution": ("convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                    "conv_transpose2d", "conv_transpose3d", "cudnn_convolution", "mkldnn_convolution"),
    "attention op": ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
                     "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
                     "_scaled_dot_product_flash_attention_for_cpu", "_flash_attention_forward",
                     "_efficient_attention_forward"),
}
_UNTUNED_OPS = {op: kind for kind, ops in UNTUNED_KINDS.items() for op in ops}


_EXPORT_SCHEMA_MAJOR = 8

# The schema argument names, in order, of each overload of the ops in MATMUL_OPS (from
# `torch.ops.aten.<op>.<overload>._schema`). A node's operands are placed by these, as
# torch places an fx node's args and kwargs by its schema.
_EXPORT_ARG_NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    "mm": {
        "default": ("self", "mat2"),
        "out": ("self", "mat2", "out"),
        "dtype": ("self", "mat2", "out_dtype"),
        "dtype_out": ("self", "mat2", "out_dtype", "out"),
    },
    "addmm": {
        "default": ("self", "mat1", "mat2", "beta", "alpha"),
        "out": ("self", "mat1", "mat2", "beta", "alpha", "out"),
        "dtype": ("self", "mat1", "mat2", "out_dtype", "beta", "alpha"),
        "dtype_out": ("self", "mat1", "mat2", "out_dtype", "beta", "alpha", "out"),
    },
    "addmm_": {"default": ("self", "mat1", "mat2", "beta", "alpha")},
    "_addmm_activation": {
        "default": ("self", "mat1", "mat2", "beta", "alpha", "use_gelu"),
        "out": ("self", "mat1", "mat2", "beta", "alpha", "use_gelu", "out"),
    },
    "bmm": {
        "default": ("self", "mat2"),
        "out": ("self", "mat2", "out"),
        "dtype": ("self", "mat2", "out_dtype"),
        "dtype_out": ("self", "mat2", "out_dtype", "out"),
    },
    "baddbmm": {
        "default": ("self", "batch1", "batch2", "beta", "alpha"),
        "out": ("self", "batch1", "batch2", "beta", "alpha", "out"),
        "dtype": ("self", "batch1", "batch2", "out_dtype", "beta", "alpha"),
        "dtype_out": ("self", "batch1", "batch2", "out_dtype", "beta", "alpha", "out"),
    },
    "baddbmm_": {"default": ("self", "batch1", "batch2", "beta", "alpha")},
    "linear": {
        "default": ("input", "weight", "bias"),
        "out": ("input", "weight", "bias", "out"),
    },
    "matmul": {
        "default": ("self", "other"),
        "out": ("self", "other", "out"),
    },
    "_scaled_mm": {
        "default": ("self", "mat2", "scale_a", "scale_b", "bias", "scale_result", "out_dtype",
                    "use_fast_accum"),
        "out": ("self", "mat2", "scale_a", "scale_b", "bias", "scale_result", "out_dtype",
                "use_fast_accum", "out"),
    },
}

# Argument forms that are never a tensor: torch's path sees a non-tensor there too (None).
_EXPORT_NON_TENSOR_ARGS = frozenset({
    "as_none", "as_int", "as_ints", "as_float", "as_floats", "as_bool", "as_bools",
    "as_string", "as_strings", "as_scalar_type", "as_memory_format", "as_layout", "as_device",
    "as_sym_int", "as_sym_ints", "as_sym_float", "as_sym_floats", "as_sym_bool",
    "as_sym_bools", "as_complex",
})


@dataclass(frozen=True)
class _Range:
    """A symbol's range as `ep.range_constraints` has it: ints, or -inf/inf when unbounded."""

    lower: Any
    upper: Any


def _range_bound(value: Any, unbounded: float) -> Any:
    if value is None or (isinstance(value, float) and value == unbounded):
        return unbounded  # torch: -int_oo / int_oo
    if type(value) is not int:
        raise ArchiveUnreadable(f"range bound {value!r} not understood"[:200])
    if abs(value) >= 2 ** 63:  # a size; export_expr's bounds count on it
        raise ArchiveUnreadable("range bound out of range (2**63 or more)")
    return value


def _expr_strings(value: Any, out: list[str]) -> None:
    """Every expr_str anywhere in a serialized graph (nested graphs included)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "expr_str" and isinstance(item, str):
                out.append(item)
            else:
                _expr_strings(item, out)
    elif isinstance(value, list):
        for item in value:
            _expr_strings(item, out)


def _input_name(node: dict, argument: str) -> str | None:
    """The name of the tensor a node takes as `argument`."""
    for named in node["inputs"]:
        if named["name"] == argument:
            field, body = one_field(named["arg"])
            return body["name"] if field == "as_tensor" else None
    return None


def parse_exported_program(doc: Any) -> ExportGraph:
    """ExportGraph of a serialized ExportedProgram (models/model.json, parsed)."""
    version = doc["schema_version"]
    if version["major"] != _EXPORT_SCHEMA_MAJOR:
        raise ArchiveUnreadable(f"schema version {version['major']}.{version['minor']}")
    module = doc["graph_module"]
    graph = module["graph"]
    values = graph["tensor_values"]
    if not isinstance(values, dict):
        raise ArchiveUnreadable("tensor_values is not an object")
    reader = ExprReader()
    tensors: dict[str, Operand] = {}

    def tensor(name: Any) -> Operand:
        if name not in tensors:
            if not isinstance(name, str) or name not in values:
                raise ArchiveUnreadable(f"no tensor value {name!r}")
            tensors[name] = reader.tensor(values[name])
        return tensors[name]

    def operand(arg: Any) -> Operand | None:
        field, body = one_field(arg)
        if field == "as_tensor":
            return tensor(body["name"])
        if field in _EXPORT_NON_TENSOR_ARGS:
            return None
        raise ArchiveUnreadable(f"argument form {field!r} not handled")

    # the placeholders that are the module's Parameters: a linear of one of those alone may be
    # grouped by a compile (routing/groups.py moves Parameters; a buffer stays where it is)
    parameters = {body["arg"]["name"] for kind, body in map(one_field, module["signature"]["input_specs"])
                  if kind == "parameter" and isinstance(body.get("arg"), dict) and "name" in body["arg"]}
    raws: list[Any] = []
    untuned: dict[str, int] = {}
    for node in graph["nodes"]:
        target = node["target"]
        if not isinstance(target, str):
            raise ArchiveUnreadable(f"target {target!r}")
        if not target.startswith("torch.ops.aten."):
            continue  # other namespaces, operator.getitem, higher-order ops: not matmuls
        parts = target.split(".")
        if len(parts) != 5:
            raise ArchiveUnreadable(f"target {target!r} not understood")
        op, overload = parts[3], parts[4]
        name = f"aten::{op}"
        if op in _UNTUNED_OPS:
            untuned[_UNTUNED_OPS[op]] = untuned.get(_UNTUNED_OPS[op], 0) + 1
        if name not in MATMUL_OPS:
            continue
        arg_names = _EXPORT_ARG_NAMES.get(op, {}).get(overload)
        if arg_names is None:
            raise ArchiveUnreadable(f"unknown overload {target}")
        args: list[Any] = [None] * len(arg_names)
        for named in node["inputs"]:
            if named["name"] not in arg_names:
                raise ArchiveUnreadable(f"{target} has no argument {named['name']!r}")
            args[arg_names.index(named["name"])] = operand(named["arg"])
        out, fast = None, False
        if op == "_scaled_mm":  # its output dtype and accumulation are its own
            outputs = node.get("outputs") or [None]
            out = operand(outputs[0]) if isinstance(outputs[0], dict) else None
            fast = any(named["name"] == "use_fast_accum" and named["arg"] == {"as_bool": True}
                       for named in node["inputs"])
        raw = classify_call(name, args, out, fast)
        if op == "linear" and isinstance(raw, MatmulCall):
            weight = _input_name(node, "weight")
            raw = dataclasses.replace(raw, input=_input_name(node, "input"),
                                      weight=weight if weight in parameters else None)
        if raw is not None:
            raws.append(raw)

    # user inputs that are tensors, in placeholder order
    user: set[str] = set()
    for spec in module["signature"]["input_specs"]:
        kind, body = one_field(spec)
        if kind == "user_input":
            field, arg = one_field(body["arg"])
            if field == "as_tensor":
                user.add(arg["name"])
    inputs: list[tuple[str, tuple[Any, ...]]] = []
    input_dtypes: dict[str, str] = {}
    for arg in graph["inputs"]:
        field, body = one_field(arg)
        if field == "as_tensor" and body["name"] in user:
            inputs.append((body["name"], tensor(body["name"]).sizes))
            input_dtypes[body["name"]] = tensor(body["name"]).dtype

    # range_constraints, less the keys that occur in no expression of the graph (torch's
    # deserializer keeps those whose str() is that of a symbol or sub-expression it parsed)
    texts: list[str] = []
    _expr_strings(graph, texts)
    present: set[str] = set()
    for text in texts:
        present |= expr_symbol_names(text)
    if not all(IDENT_RE.fullmatch(k) for k in doc["range_constraints"]):
        import sympy  # a key such as "2*s0" (a derived Dim): parse every expression

        for text in texts:
            present.update(str(p) for p in sympy.preorder_traversal(reader.expr(text))
                           if not p.is_Integer)
    ranges: dict[str, Any] = {}
    for key, bounds in doc["range_constraints"].items():
        if key in present:
            ranges[key] = _Range(_range_bound(bounds["min_val"], -math.inf),
                                 _range_bound(bounds["max_val"], math.inf))
    return ExportGraph(raws, inputs, ranges, untuned, input_dtypes)
