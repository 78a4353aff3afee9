"""model/export_program.py: the matmuls of a torch.export program, from its serialized graph.

The program that torch.export.load would return is stored in the archive as JSON
(`models/model.json`), serialized as torch/_export/serde/schema.py describes (schema
version 8.20 in torch 2.13; another major version is refused). Each node names its target
("torch.ops.aten.mm.default") and its inputs by schema argument name; `graph.tensor_values`
gives every tensor's dtype, sizes and strides (read by export_expr.ExprReader);
`signature.input_specs` says which placeholders are user inputs; `range_constraints` maps
str(symbol) to {"min_val", "max_val"} (null for unbounded). `parse_exported_program` reads
those, and nothing else, into an `ExportGraph`: each matmul-like node classified, in the
graph and in the graphs its nodes run (export_graph.py), the user inputs' sizes, the
dynamic dims' ranges. What it does not understand is `ArchiveUnreadable`, naming it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from .classify import Operand
from .export_expr import IDENT_RE, ArchiveUnreadable, ExprReader, expr_symbol_names, one_field
from .export_graph import GraphReader, Scope


@dataclass
class ExportGraph:
    """What is read of an exported program."""

    raws: list[Any]  # classify_call's results for the graph's matmul-like nodes, in order
    inputs: list[tuple[str, tuple[Any, ...]]]  # user tensor inputs: placeholder name, sizes
    ranges: dict[str, Any]  # symbol name -> its range (.lower, .upper), as range_constraints
    untuned: dict[str, int] = dataclasses.field(default_factory=dict)  # classify.UNTUNED_KINDS kind -> how many
    input_dtypes: dict[str, str] = dataclasses.field(default_factory=dict)  # user tensor input -> its dtype
    notes: list[str] = dataclasses.field(default_factory=list)  # where the counts are not exact
    autocast: dict[str, str] = dataclasses.field(default_factory=dict)  # autocast device type -> its matmuls' dtype


_EXPORT_SCHEMA_MAJOR = 8


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

    def tensor(name: Any) -> Operand:
        if not isinstance(name, str) or name not in values:
            raise ArchiveUnreadable(f"no tensor value {name!r}")
        return reader.tensor(values[name])

    # the placeholders that are the module's Parameters: a linear of one of those alone may be
    # grouped by a compile (routing/groups.py moves Parameters; a buffer stays where it is).
    # A Parameter requires grad as saved; every other placeholder as its tensor_value says.
    parameters = {body["arg"]["name"] for kind, body in map(one_field, module["signature"]["input_specs"])
                  if kind == "parameter" and isinstance(body.get("arg"), dict) and "name" in body["arg"]}
    grads = {}
    for arg in graph["inputs"]:
        field, body = one_field(arg)
        if field == "as_tensor" and body["name"] in values:
            flag = values[body["name"]].get("requires_grad") is True
            grads[body["name"]] = (flag, flag)
    walker = GraphReader(reader, parameters)
    walker.read(graph, Scope(), {}, grads)

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
    return ExportGraph(walker.raws, inputs, ranges, walker.untuned, input_dtypes, walker.notes(),
                       walker.autocast)
