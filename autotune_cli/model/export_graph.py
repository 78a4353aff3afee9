"""model/export_graph.py: the matmul-like calls of a serialized graph and of the graphs in it.

torch.export keeps the code that runs under a context or a control-flow op in a graph of
its own, serialized inside the node that runs it (an argument {"as_graph": {"name",
"graph"}}, the graph with its own inputs, nodes and tensor_values); the node's operands
after its last graph are that graph's inputs, in order. `GraphReader` reads a graph's
nodes in order, and each inner graph where its node runs:

  wrap_with_set_grad_enabled(flag, graph, *args)  grad mode set inside (see below)
  wrap_with_autocast(device, dtype, enabled, cache, graph, *args)
                                                  matmuls inside run in `dtype` (autocast
                                                  casts their float operands, not float64;
                                                  a cast copy requires grad as computed, a
                                                  weight's cached copy as the weight)
  cond(pred, true_graph, false_graph, operands)   both branches read, each matmul counted
                                                  once (a note: a call runs one branch)
  while_loop(cond_graph, body_graph, carried, additional)
                                                  each matmul counted once (a note: it runs
                                                  once per iteration)
  map_impl(body, xs, args), scan(combine, init, xs, additional)
                                                  each matmul counted xs.size(0) times
  flex_attention                                  an attention op (not looked into)
  any other higher-order op                       its graphs read, each matmul counted once
                                                  (a note names the op)

A program exported under an outer torch.autocast keeps none of its casts: its metadata gives
a matmul outside any autocast region an output in autocast's dtype from float32 operands
(and what follows inherits it), while the loaded program runs the operands' dtype. Such a
matmul's output, and each result that takes its dtype from one (an op with no dtype
argument), is followed in the dtype it runs in (`runs_in`), so that every matmul is listed
in the dtype the loaded program runs, and a note says so.

Whether a matmul's 2-D operand requires grad decides the problem torch runs (classify.py),
so each tensor's requires_grad is followed as a pair (with grad enabled, without; None
where unknown): a Parameter's is (True, True) and so is a view's of it; what an op computes
from one requires grad only in grad mode; detach's and a non-float result's never. Calls
are read as torch runs them without grad, as a TorchScript run is recorded; where grad mode
would change the problem, a note counts them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..text import plural
from .classify import (EINSUM_NO_MATMUL, EINSUM_UNREAD, MATMUL_OPS, UNTUNED_OPS, MatmulCall, Operand,
                       classify_call, sym)
from .einsum import NotRead, einsum_bmms
from .products import PRODUCT_OPS, product_calls
from .export_expr import EXPORT_DTYPES, ArchiveUnreadable, ExprReader, one_field
from .export_ops import AUTOCAST_OPS, EXPORT_ARG_NAMES, NON_TENSOR_ARGS, VIEW_OPS

_AUTOCAST_CASTS = frozenset({"float32", "float16", "bfloat16"})  # float64 is left as it is
_AUTOCAST_DEFAULT = {"cpu": "bfloat16", "xpu": "bfloat16", "hpu": "bfloat16"}  # else float16

# ScalarType codes of results that may require grad
_FLOAT_CODES = frozenset(code for code, name in EXPORT_DTYPES.items()
                         if name.startswith(("float", "bfloat", "complex")))

Grad = tuple[Any, Any]  # requires_grad with grad enabled, without: True, False or None
_NO_GRAD: Grad = (False, False)
_UNKNOWN: Grad = (None, None)


def _computed(ins: list[Grad], mode: bool | None) -> Grad:
    """The requires_grad of what an op computes from `ins` where grad mode is `mode`."""
    if mode is False:
        return _NO_GRAD
    on, off = _any([g[0] for g in ins]), _any([g[1] for g in ins])
    return (on, off if mode else False)


def _any(values: list[Any]) -> Any:
    """Or over requires_grad values where some may be unknown (None)."""
    if True in values:
        return True
    return None if None in values else False


@dataclass(frozen=True)
class Scope:
    """Where a graph runs: the grad mode a region set (None: the caller's), the dtype
    autocast runs its matmuls in, how many times per call it runs, whether it runs once per
    call in order (its linears may be grouped), and the op whose count is not exact."""

    mode: bool | None = None
    autocast: tuple[str, str, bool] | None = None  # (device type, dtype, cache_enabled)
    times: Any = 1
    straight: bool = True
    inexact: str | None = None


def _tensor_names(arg: Any) -> list[str | None]:
    """The tensors an argument holds, one entry per position (None: not a tensor)."""
    field, body = one_field(arg)
    if field == "as_tensor":
        return [body["name"]]
    if field == "as_tensors":
        return [item["name"] for item in body]
    if field == "as_optional_tensors":
        return [item["as_tensor"]["name"] if "as_tensor" in item else None for item in body]
    if field in ("as_ints", "as_sym_ints", "as_floats", "as_bools", "as_sym_bools", "as_sym_floats"):
        return [None] * len(body)
    return [None]


class GraphReader:
    """Reads a program's graphs (see the module). `parameters`: the placeholders that are
    the module's Parameters (a linear of one alone may be grouped)."""

    def __init__(self, reader: ExprReader, parameters: set[str]) -> None:
        self.reader = reader
        self.parameters = parameters
        self.raws: list[Any] = []
        self.untuned: dict[str, int] = {}
        self.autocast: dict[str, str] = {}  # device type -> dtype its matmuls were cast to
        self.inexact: dict[str, int] = {}  # higher-order op -> matmuls counted once inside it
        self.grad_differs = 0  # matmuls grad mode would make another problem
        self.graphs = 0
        # tensors (by outermost name) that run in another dtype than their metadata says:
        # downstream of a matmul exported under an outer autocast (see the module)
        self.runs_in: dict[str, str] = {}
        self.outer_autocast: dict[tuple[str, str], int] = {}  # (operands', output's dtype) -> matmuls

    def read(self, graph: Any, scope: Scope, names: dict[str, str], grads: dict[str, Grad],
             prefix: str = "") -> list[Grad]:
        """Read one graph's nodes; `names` maps its inputs to the outer tensors they are (a
        linear's input and weight by the outermost name; its own tensors are named with
        `prefix`, unique to the graph), `grads` their requires_grad. Returns the
        requires_grad of its outputs."""
        values = graph["tensor_values"]
        if not isinstance(values, dict):
            raise ArchiveUnreadable("tensor_values is not an object")
        tensors: dict[str, Operand] = {}

        def tensor(name: Any) -> Operand:
            if name not in tensors:
                if not isinstance(name, str) or name not in values:
                    raise ArchiveUnreadable(f"no tensor value {name!r}")
                tensors[name] = self.reader.tensor(values[name])
            return tensors[name]

        for node in graph["nodes"]:
            target = node["target"]
            if not isinstance(target, str):
                raise ArchiveUnreadable(f"target {target!r}")
            op = None
            if target.startswith("torch.ops.higher_order."):
                outs = self._higher_order(node, target.removeprefix("torch.ops.higher_order."),
                                          scope, names, grads, tensor, prefix)
                if outs is not None:
                    self._set(node, outs, grads)
                    continue
            elif target.startswith("torch.ops.aten."):
                parts = target.split(".")
                if len(parts) != 5:
                    raise ArchiveUnreadable(f"target {target!r} not understood")
                op = parts[3]
                self._aten(node, op, parts[4], scope, lambda n: names.get(n, prefix + n), grads, tensor)
                self._follow_dtype(node, op, scope, lambda n: names.get(n, prefix + n), tensor)
            self._follow(node, op, scope, grads, values)
        return [grads.get(n, _UNKNOWN) if n else _NO_GRAD
                for arg in graph["outputs"] for n in _tensor_names(arg)]

    # -- requires_grad ------------------------------------------------------------------

    def _follow(self, node: Any, op: str | None, scope: Scope, grads: dict[str, Grad], values: Any) -> None:
        ins = [grads.get(n, _UNKNOWN) for named in node["inputs"] for n in _tensor_names(named["arg"]) if n]
        if op == "detach" or not ins:
            state = _NO_GRAD
        elif op in VIEW_OPS:
            state = ins[0]
        else:
            state = _computed(ins, scope.mode)
        for arg in node["outputs"]:
            for name in _tensor_names(arg):
                if name:
                    floating = values.get(name, {}).get("dtype") in _FLOAT_CODES
                    grads[name] = state if floating else _NO_GRAD

    @staticmethod
    def _set(node: Any, outs: list[Grad], grads: dict[str, Grad]) -> None:
        names = [n for arg in node["outputs"] for n in _tensor_names(arg)]
        for name, state in zip(names, outs):
            if name:
                grads[name] = state

    # -- the dtype a tensor runs in --------------------------------------------------------

    def _running(self, t: Operand, outer_name: str) -> Operand:
        """`t` in the dtype the loaded program runs it in (`runs_in`, else its metadata's)."""
        dtype = self.runs_in.get(outer_name)
        return dataclasses.replace(t, dtype=dtype) if dtype and dtype != t.dtype else t

    def _follow_dtype(self, node: Any, op: str, scope: Scope, outer, tensor) -> None:
        """Record in `runs_in` the outputs of one aten node that run in another dtype than
        their metadata: a matmul outside autocast whose float operands share a dtype its
        output's metadata does not (the program was exported under an outer autocast); any
        other op with no dtype argument, for each output whose metadata dtype is that of an
        input already recorded (it took that input's dtype)."""
        ins = [n for named in node["inputs"] for n in _tensor_names(named["arg"]) if n]
        outs = [n for arg in node.get("outputs") or [] for n in _tensor_names(arg) if n]
        if op in AUTOCAST_OPS and node["target"].endswith((".default", ".out")):
            if scope.autocast:  # a region the program keeps: its casts run
                return
            running = {self._running(tensor(n), outer(n)).dtype for n in ins}
            if len(running) == 1 and running <= _AUTOCAST_CASTS:
                (dtype,) = running
                for name in outs:
                    said = tensor(name).dtype
                    if said != dtype and said in _AUTOCAST_CASTS:
                        self.runs_in[outer(name)] = dtype
                        key = (dtype, said)
                        self.outer_autocast[key] = self.outer_autocast.get(key, 0) + 1
            return
        if any(named["name"] == "dtype" and one_field(named["arg"])[0] == "as_scalar_type"
               for named in node["inputs"]):
            return  # a cast the program keeps: its output's dtype is its own
        taken = {tensor(n).dtype: self.runs_in[outer(n)] for n in ins if outer(n) in self.runs_in}
        for name in outs:
            dtype = taken.get(tensor(name).dtype)
            if dtype:
                self.runs_in[outer(name)] = dtype

    # -- aten ops -------------------------------------------------------------------------

    def _aten(self, node: Any, op: str, overload: str, scope: Scope, outer,
              grads: dict[str, Grad], tensor) -> None:
        """One aten node: counted if UNTUNED_OPS holds it, classified if a matmul (`outer`
        names a tensor as the outermost graph knows it)."""
        if op in UNTUNED_OPS:
            self.untuned[UNTUNED_OPS[op]] = self.untuned.get(UNTUNED_OPS[op], 0) + 1
        if op == "einsum":
            self._einsum(node, scope, lambda n: self._running(tensor(n), outer(n)))
            return
        if op in PRODUCT_OPS:
            self._product(node, op, scope, lambda n: self._running(tensor(n), outer(n)))
            return
        name = f"aten::{op}"
        if name not in MATMUL_OPS:
            return
        arg_names = EXPORT_ARG_NAMES.get(op, {}).get(overload)
        if arg_names is None:
            raise ArchiveUnreadable(f"unknown overload torch.ops.aten.{op}.{overload}")
        cast = scope.autocast[1] if scope.autocast and op in AUTOCAST_OPS else None
        args: list[Any] = [None] * len(arg_names)
        states: list[Grad] = [_NO_GRAD] * len(arg_names)
        for named in node["inputs"]:
            if named["name"] not in arg_names:
                raise ArchiveUnreadable(f"torch.ops.aten.{op}.{overload} has no argument {named['name']!r}")
            field, body = one_field(named["arg"])
            if field == "as_tensor":
                i = arg_names.index(named["name"])
                given = self._running(tensor(body["name"]), outer(body["name"]))
                args[i] = self._cast(given, cast)
                states[i] = grads.get(body["name"], _UNKNOWN)
                if args[i].dtype != given.dtype and not (
                        scope.autocast[2] and outer(body["name"]) in self.parameters
                        and given.dtype == "float32"):
                    states[i] = _computed([states[i]], scope.mode)  # a cast copy; autocast caches a weight's
            elif field not in NON_TENSOR_ARGS:
                raise ArchiveUnreadable(f"argument form {field!r} not handled")
        if cast:
            self.autocast[scope.autocast[0]] = cast
        out, fast = None, False
        if op == "_scaled_mm":  # its output dtype and accumulation are its own
            outputs = node.get("outputs") or [None]
            out = tensor(outputs[0]["as_tensor"]["name"]) if isinstance(outputs[0], dict) \
                and "as_tensor" in outputs[0] else None
            fast = any(named["name"] == "use_fast_accum" and named["arg"] == {"as_bool": True}
                       for named in node["inputs"])

        def with_grad(mode: int) -> list[Any]:
            return [dataclasses.replace(a, requires_grad=s[mode]) if isinstance(a, Operand) else a
                    for a, s in zip(args, states)]

        raw = classify_call(name, with_grad(1), out, fast)
        if any(s[0] != s[1] for s in states) and classify_call(name, with_grad(0), out, fast) != raw:
            self.grad_differs += 1
        if op == "linear" and isinstance(raw, MatmulCall):
            weight = self._global(node, "weight", outer)
            raw = dataclasses.replace(raw, input=self._global(node, "input", outer) if scope.straight else None,
                                      weight=weight if weight in self.parameters else None)
        self._add(raw, scope)

    def _einsum(self, node: Any, scope: Scope, tensor) -> None:
        equation, operands, path = None, [], None
        for named in node["inputs"]:
            field, body = one_field(named["arg"])
            if named["name"] == "equation" and field == "as_string":
                equation = body
            elif named["name"] == "tensors" and field == "as_tensors":
                operands = [tensor(item["name"]) for item in body]
            elif named["name"] == "path" and field == "as_ints":
                path = body
        if equation is None or len(operands) < 2:
            return  # one operand: a permute, sum or diagonal, no product
        cast = scope.autocast[1] if scope.autocast else None
        if cast:
            self.autocast[scope.autocast[0]] = cast
        try:
            pairs = einsum_bmms(equation, [self._cast(t, cast) for t in operands], path)
        except NotRead:
            self.untuned[EINSUM_UNREAD] = self.untuned.get(EINSUM_UNREAD, 0) + 1
            return
        if not pairs:
            self.untuned[EINSUM_NO_MATMUL] = self.untuned.get(EINSUM_NO_MATMUL, 0) + 1
        for left, right in pairs:
            raw = classify_call("aten::bmm", [left, right])
            if isinstance(raw, MatmulCall):
                raw = dataclasses.replace(raw, source="aten.einsum")
            self._add(raw, scope)

    def _product(self, node: Any, op: str, scope: Scope, tensor) -> None:
        """A composite product (inner, tensordot, multi_dot): the mm calls torch runs for it
        (products.py), in the dtype autocast runs them in, where a region casts."""
        cast = scope.autocast[1] if scope.autocast else None
        args: dict[str, Any] = {}
        for named in node["inputs"]:
            field, body = one_field(named["arg"])
            if field == "as_tensor":
                args[named["name"]] = self._cast(tensor(body["name"]), cast)
            elif field == "as_tensors":
                args[named["name"]] = [self._cast(tensor(item["name"]), cast) for item in body]
            elif field == "as_ints":
                args[named["name"]] = list(body)
        if cast:
            self.autocast[scope.autocast[0]] = cast
        for raw in product_calls(op, args):
            self._add(raw, scope)

    def _add(self, raw: Any, scope: Scope) -> None:
        if raw is None:
            return
        if isinstance(raw, MatmulCall):
            if scope.times != 1:
                raw = dataclasses.replace(raw, times=scope.times)
            if scope.inexact:
                self.inexact[scope.inexact] = self.inexact.get(scope.inexact, 0) + 1
        self.raws.append(raw)

    @staticmethod
    def _cast(t: Operand, dtype: str | None) -> Operand:
        """An operand as autocast hands it to the op: float operands in `dtype` (the cast
        keeps the strides' order, and so the layout)."""
        if dtype is None or t.dtype not in _AUTOCAST_CASTS:
            return t
        return dataclasses.replace(t, dtype=dtype)

    @staticmethod
    def _global(node: Any, argument: str, outer) -> str | None:
        """The outermost name of the tensor a node takes as `argument`."""
        for named in node["inputs"]:
            if named["name"] == argument:
                field, body = one_field(named["arg"])
                return outer(body["name"]) if field == "as_tensor" else None
        return None

    # -- higher-order ops -----------------------------------------------------------------

    def _higher_order(self, node: Any, hop: str, scope: Scope, names: dict[str, str],
                      grads: dict[str, Grad], tensor, prefix: str) -> list[Grad] | None:
        """Read the graphs a higher-order op runs (see the module); the requires_grad of its
        outputs, or None to leave them to the general rule."""
        args = [one_field(named["arg"]) for named in node["inputs"]]
        graphs = [i for i, (field, _) in enumerate(args) if field == "as_graph"]
        if hop.startswith("flex_attention"):
            self.untuned["attention op"] = self.untuned.get("attention op", 0) + 1
            return None
        if not graphs:
            return None
        after = [{field: body} for field, body in args[graphs[-1] + 1:]]
        operands = [n for arg in after for n in _tensor_names(arg)]
        # cond, while_loop and any op not known here: each matmul inside counted once
        inner = dataclasses.replace(scope, straight=False, inexact=scope.inexact or hop)
        if hop == "invoke_subgraph":  # a region compiled once, run once where it stands
            inner = scope
        elif hop == "wrap_with_set_grad_enabled" and args[0][0] == "as_bool":
            inner = dataclasses.replace(scope, mode=args[0][1])
        elif hop == "wrap_with_autocast" and len(args) > 2 and args[2][0] == "as_bool":
            device = args[0][1] if args[0][0] == "as_string" else "cuda"
            dtype = (self.reader.scalar_type(args[1][1]) if args[1][0] == "as_scalar_type"
                     else _AUTOCAST_DEFAULT.get(device, "float16"))
            cache = args[3][1] is not False if len(args) > 3 and args[3][0] == "as_bool" else True
            inner = dataclasses.replace(scope, autocast=(device, dtype, cache) if args[2][1] else None)
        elif hop in ("map_impl", "scan"):  # the body runs once per slice of xs along dim 0
            xs = _tensor_names(after[0 if hop == "map_impl" else 1]) if len(after) > 1 else []
            if xs and xs[0]:
                inner = dataclasses.replace(scope, straight=False,
                                            times=sym(scope.times) * tensor(xs[0]).sizes[0])
        outs: list[list[Grad]] = []
        for i in graphs:
            body = args[i][1]["graph"]
            self.graphs += 1
            inputs = [n for arg in body["inputs"] for n in _tensor_names(arg)]
            # the graph's inputs are the last operands (an op's own arguments come first)
            given = operands[len(operands) - len(inputs):] if len(operands) >= len(inputs) else []
            local_prefix = f"#{self.graphs}/"
            local_names: dict[str, str] = {}
            local_grads: dict[str, Grad] = {}
            for local, outer in zip(inputs, given or [None] * len(inputs)):
                if local:
                    local_names[local] = names.get(outer, prefix + outer) if outer else local_prefix + local
                    local_grads[local] = grads.get(outer, _UNKNOWN) if outer else _UNKNOWN
            outs.append(self.read(body, inner, local_names, local_grads, local_prefix))
        width = len([n for arg in node["outputs"] for n in _tensor_names(arg)])
        if any(len(o) != width for o in outs):
            return None
        return [(_any([o[k][0] for o in outs]), _any([o[k][1] for o in outs])) for k in range(width)]

    def notes(self) -> list[str]:
        """What the counts leave out: matmuls counted once inside ops that run them a number
        of times the program does not give, and matmuls grad mode would change."""
        out = []
        for hop, n in self.inexact.items():
            counted = f"{plural(n, 'matmul')} {{}} {'is' if n == 1 else 'are each'} counted once"
            if hop == "cond":
                out.append(counted.format("in torch.cond branches") + ", though a call runs one branch only")
            elif hop == "while_loop":
                out.append(counted.format("in a torch.while_loop body") + ", though the loop runs "
                           "it once per iteration (a number the program does not give)")
            else:
                out.append(counted.format(f"inside torch.ops.higher_order.{hop}") + "; how many times "
                           "a call runs it is not known")
        for (dtype, said), n in self.outer_autocast.items():
            out.append(f"{plural(n, 'matmul')} of {dtype} operands outside any autocast region "
                       f"{'is' if n == 1 else 'are'} saved with {said} outputs: the program was exported under "
                       f"torch.autocast, whose casts it does not keep; listed in {dtype}, as the loaded program "
                       f"runs {'it' if n == 1 else 'them'} (called under torch.autocast, in {said})")
        if self.grad_differs:
            n = self.grad_differs
            out.append(f"{plural(n, 'matmul')} listed as torch runs {'it' if n == 1 else 'them'} without "
                       "grad (torch.no_grad, inference): with grad enabled, a 2-D operand computed from a "
                       "Parameter requires grad, and torch folds the product into one mm instead")
        return out

