"""model/torchscript.py: the matmuls of a TorchScript model (`torch.jit.save`), by running it.

A TorchScript file is code: loading it and running its forward runs what its author wrote,
so it is read only when the caller says the file is trusted (`trust_torchscript`, the
CLI's --trust-torchscript; find.check_model refuses it otherwise, before this module is
reached). Sizes are not stored, so the module is run once on example inputs built from
`input_shapes` under `torch.profiler` with `record_shapes`, which records every aten op
with its operands' sizes, strides and dtype, nested as they were called, with the graph
executor's optimizations off so that the ops are the saved ones (the optimizing executor
rewrites e.g. addmm into mm + add; the torch.autocast regions it would apply are applied
by torchscript_autocast.py). The run is first tried on the meta device (no
arithmetic, no memory for activations); if the module cannot run there it is run on the
CPU with random inputs (integer and bool inputs are zeros, so that they are valid
indices); so is a model whose meta run multiplied operands of two dtypes (a meta kernel may
let through what torch refuses: an input of another dtype than the weights). Only the
outermost matmul-like op of each call counts, save that aten::linear, aten::matmul (but
for a 1-D operand, a matrix-vector product) and aten::einsum count the mm, addmm or bmm
calls they ran, under the run's no_grad: those depend on the operands' requires_grad,
which the profiler does not record. Attention ops and convolutions are counted, not looked into. Fused ops
whose matmuls run inside them (nn.TransformerEncoderLayer's fast path,
`aten::_transformer_encoder_layer_fwd`) are not looked into either; they are named,
so that find_gemms can say so.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..text import article
from .classify import EINSUM_NO_MATMUL, MATMUL_OPS, UNTUNED_OPS, MatmulCall, Operand, classify_call, sym, sym_eq
from .text import one_line
from .torchscript_autocast import autocast_forward

# Fused kernels that may call matmuls inside (math fallbacks); never looked into.
_OPAQUE_PREFIXES = (
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product",
    "aten::_flash_attention",
    "aten::_efficient_attention",
)

# Composite ops whose matmuls are read from the calls they run (at::linear's and
# at::matmul's dispatch depends on whether an operand requires grad; at::einsum runs bmm),
# by the source they show.
_COMPOSITE_MATMULS = {"aten::linear": "aten.linear", "aten::matmul": "aten.matmul", "aten::einsum": "aten.einsum"}

# Fused kernels with matmuls inside that the profiler does not see (nn.Transformer layers'
# fast path in eval mode); named when they hide every matmul of a TorchScript model.
_FUSED_MATMUL_OPS = (
    "aten::_transformer_encoder_layer_fwd",
    "aten::_transformer_decoder_only_layer_fwd",
    "aten::_native_multi_head_attention",
    "aten::_native_decoder_only_multi_head_attention",
)


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


@contextlib.contextmanager
def _quiet_stderr():
    """Silence fd 2 (kineto prints a line when the profiler starts and stops)."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _script_tensor_args(module: Any) -> tuple[list[str], int]:
    """Names of forward's tensor arguments and how many of them are required."""
    import torch

    names: list[str] = []
    required = 0
    for arg in module.forward.schema.arguments[1:]:  # [0] is self
        typ = arg.type
        is_tensor = isinstance(typ, torch._C.TensorType) or (
            isinstance(typ, torch._C.OptionalType)
            and isinstance(typ.getElementType(), torch._C.TensorType))
        has_default = arg.has_default_value()
        if not is_tensor:
            if has_default:
                continue
            raise UserError(f"forward argument {arg.name!r} is {article(str(typ))}, not a tensor; "
                            "only models whose inputs are tensors can be read")
        names.append(arg.name)
        if not has_default:
            required += 1
    return names, required


def _is_meta(module: Any) -> bool:
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        return tensor.device.type == "meta"
    return True  # no weights: meta inputs decide


def _make_inputs(input_shapes, device: str, random: bool) -> list[Any]:
    import torch

    out = []
    for shape, dtype_name in input_shapes:
        dtype = getattr(torch, dtype_name or "float32")
        if not random:
            out.append(torch.empty(shape, dtype=dtype, device=device))
        elif dtype.is_floating_point:
            out.append(torch.randn(shape, dtype=dtype, device=device))
        else:
            out.append(torch.zeros(shape, dtype=dtype, device=device))
    return out


def _profile_run(module: Any, inputs: list[Any], forward: Any = None) -> tuple[list[Any], list[str], dict[str, int]]:
    """Run once under the profiler (`forward`, where given, in place of the module's): the
    outermost matmul-like calls (for a composite one, the calls it ran), the names of the
    fused ops (_FUSED_MATMUL_OPS) that ran, and the counts of the ops of
    classify.UNTUNED_KINDS."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True)
    with _quiet_stderr():
        prof.__enter__()
    try:
        # optimized_execution(False): run the graph as saved; the optimizing executor
        # rewrites ops on the first run (e.g. addmm into mm + add).
        with torch.no_grad(), torch.jit.optimized_execution(False):
            (forward or module)(*inputs)
    finally:
        with _quiet_stderr():
            prof.__exit__(None, None, None)
    roots = prof.profiler.kineto_results.experimental_event_tree()

    found: list[Any] = []
    fused: list[str] = []
    untuned: dict[str, int] = {}

    def convert(value: Any) -> Operand | None:
        sizes = getattr(value, "sizes", None)
        strides = getattr(value, "strides", None)
        dtype = getattr(value, "dtype", None)
        if sizes is None or strides is None or dtype is None or len(strides) != len(sizes):
            return None
        return Operand(tuple(sym(s) for s in sizes), tuple(sym(s) for s in strides),
                       _dtype_name(dtype))

    def events_sorted(events):
        return sorted(events, key=lambda e: e.start_time_ns)

    def count(kind: str) -> None:
        untuned[kind] = untuned.get(kind, 0) + 1

    def matmul(event: Any, source: str | None, out: list[Any]) -> None:
        """One matmul-like call: classified, or, for a composite op (matmul, einsum), the
        calls it ran (torch's dispatch decides them: what a model runs, recorded)."""
        name = event.name
        raw = None
        if name in MATMUL_OPS:
            operands = _operand_window(name, [convert(v) for v in getattr(event.extra_fields, "inputs", None) or []])
            dtypes = {op.dtype for op in operands if isinstance(op, Operand)}
            if MATMUL_OPS[name][0] != "scaled_mm" and len(dtypes) > 1:  # torch refuses it; a meta kernel may not
                raise TypeError(f"{name} on operands of {' and '.join(sorted(dtypes))}")
            raw = classify_call(name, operands)
            if source is not None and isinstance(raw, MatmulCall):
                raw = replace(raw, source=source)
            if name not in _COMPOSITE_MATMULS or not isinstance(raw, MatmulCall):
                if raw is not None:
                    out.append(raw)
                return
        inner: list[Any] = []
        stack = list(reversed(events_sorted(event.children)))
        while stack:
            child = stack.pop()
            if child.name in _COMPOSITE_MATMULS or child.name in MATMUL_OPS:
                matmul(child, source or _COMPOSITE_MATMULS.get(name), inner)
            else:
                stack.extend(reversed(events_sorted(child.children)))
        if any(isinstance(r, MatmulCall) for r in inner):
            out.extend(inner)
        elif raw is not None:
            out.append(raw)
        elif name == "aten::einsum" and len([v for v in _event_inputs(event) if convert(v)]) > 1:
            count(EINSUM_NO_MATMUL)  # a product of two operands with no matmul in it

    stack = list(reversed(events_sorted(roots)))
    while stack:
        event = stack.pop()
        name = event.name
        if name in MATMUL_OPS or name in _COMPOSITE_MATMULS:
            matmul(event, None, found)
            continue
        if name.startswith(_OPAQUE_PREFIXES):
            count("attention op")
            continue
        if name.removeprefix("aten::") in UNTUNED_OPS:
            count(UNTUNED_OPS[name.removeprefix("aten::")])
            continue
        if name in _FUSED_MATMUL_OPS and name not in fused:
            fused.append(name)
        stack.extend(reversed(events_sorted(event.children)))
    return found, fused, untuned


def _event_inputs(event: Any) -> list[Any]:
    """The recorded inputs of an event, a list of tensors flattened (an einsum's operands)."""
    out: list[Any] = []
    for value in getattr(event.extra_fields, "inputs", None) or []:
        out.extend(value if isinstance(value, list) else [value])
    return out


def _operand_window(name: str, operands: list[Any]) -> list[Any]:
    """The op's own arguments among the recorded inputs.

    With the graph executor's optimizations off, TorchScript's interpreter records extra
    values from its stack in front of an op's arguments (seen in torch 2.13), so when there
    are more inputs than arguments the last ones are taken, unless only the first ones fit
    together (an out= overload records its output last).
    """
    arity = MATMUL_OPS[name][1]
    if len(operands) <= arity:
        return operands
    tail, head = operands[-arity:], operands[:arity]
    if _operands_fit(name, tail) or not _operands_fit(name, head):
        return tail
    return head


def _operands_fit(name: str, args: list[Any]) -> bool:
    kind = MATMUL_OPS[name][0]
    first = 1 if kind in ("addmm", "baddbmm") else 0
    a, b = (args + [None, None, None])[first:first + 2]
    if not isinstance(a, Operand) or not isinstance(b, Operand):
        return False
    if len(a.sizes) < 1 or len(b.sizes) < 1:
        return False
    if kind == "linear":
        return sym_eq(a.sizes[-1], b.sizes[-1])
    return sym_eq(a.sizes[-1], b.sizes[0 if len(b.sizes) == 1 else -2])


def read_torchscript(path: Path, input_shapes) -> tuple[list[Any], list[str], dict[str, int], dict[str, str]]:
    """The matmul-like calls of one run (and the fused ops that ran, the counts of the ops
    that are no GEMM, and the autocast regions' device type -> dtype); the caller has checked
    that the file is trusted (check_model). A model with autocast regions runs on the CPU:
    autocast casts no meta tensor (torchscript_autocast.py)."""
    import torch

    if not input_shapes:
        raise UserError(
            f"{path} is TorchScript, which does not store sizes: give the example inputs' "
            "shapes with --input-shape (e.g. 8x128x768:float16), one per model input")
    # First on the meta device (no arithmetic); some models cannot load or run there
    # (ops without meta kernels, data-dependent control flow): then on the CPU.
    try:
        module = torch.jit.load(str(path), map_location="meta")
    except Exception:  # noqa: BLE001
        module = None
    if module is None:
        try:
            module = torch.jit.load(str(path), map_location="cpu")
        except Exception as exc:  # noqa: BLE001
            raise UserError(f"cannot load TorchScript model {path}: {one_line(exc)}") from None
    names, required = _script_tensor_args(module)
    if not required <= len(input_shapes) <= len(names):
        want = str(len(names)) if required == len(names) else f"{required} to {len(names)}"
        raise UserError(f"the model takes {want} tensor input(s) ({', '.join(names) or 'none'}); "
                        f"got {len(input_shapes)} --input-shape")
    if _is_meta(module):
        try:
            if autocast_forward(module)[0] is None:
                return (*_profile_run(module.eval(), _make_inputs(input_shapes, "meta", random=False)), {})
        except Exception:  # noqa: BLE001 - run it for real below
            pass
    try:
        module = torch.jit.load(str(path), map_location="cpu").eval()
        forward, regions = autocast_forward(module)
        return (*_profile_run(module, _make_inputs(input_shapes, "cpu", random=True), forward), regions)
    except Exception as exc:  # noqa: BLE001
        raise UserError(f"running {path.name} on inputs "
                        f"{', '.join('x'.join(map(str, s)) + ':' + (d or 'float32') for s, d in input_shapes)} "
                        f"failed (check --input-shape): {one_line(exc)}") from None
