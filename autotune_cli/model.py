"""model.py: the matrix multiplies in a saved model, as GemmProblems with counts.

Two formats are read:

* a torch.export program (`torch.export.save`, usually `.pt2`): the graph is walked and
  each matmul-like node's operands are read from `node.meta["val"]` (fake tensors that
  carry shape, strides and dtype). Sizes may be symbolic (`torch.export.Dim`); see
  "Dynamic dimensions" below.
* TorchScript (`torch.jit.save`): sizes are not stored, so the module is run once on
  example inputs built from `input_shapes` under `torch.profiler` with `record_shapes`,
  which records every aten op with its operands' sizes, strides and dtype, nested as they
  were called, with the graph executor's optimizations off so that the ops are the saved
  ones (the optimizing executor rewrites e.g. addmm into mm + add). The run is first tried on the meta device (no arithmetic, no memory for
  activations); if the module cannot run there it is run on the CPU with random inputs
  (integer and bool inputs are zeros, so that they are valid indices).

What counts, and how it maps (the same rules for both formats, so a model gives the same
list whichever way it was saved). Only the outermost matmul-like op of each call counts
(`aten.linear` calls `aten.addmm` or `aten.matmul` internally; only the linear counts).
Attention ops (`scaled_dot_product_attention` and its kernels) are fused kernels, not
GEMMs, and are not looked into.

  mm(A, B)                  mm
  addmm(bias, A, B)         addmm; bias "n" if it broadcasts as a row ([n] or [1, n]),
                            else "mn" (also used for the rarer [m, 1] column bias)
  bmm(A, B)                 bmm
  baddbmm(bias, A, B)       bmm (the bias add is left out; `sources` says baddbmm)
  linear(x, W[, bias])      x [..., K] flattened to [M, K] with M the product of the
                            leading dims; B = W.T, so a row-major W gives layout "?t";
                            with a bias: addmm, bias "n"; without: mm
  matmul(x, y)              as aten dispatches it (at::matmul, no-grad):
                            2-D @ 2-D -> mm;
                            N-D @ 2-D -> mm with M = prod(leading dims) (aten folds
                            whenever the 2-D operand requires grad, as a saved model's
                            weights do; x is copied first if its rows don't fold);
                            2-D @ N-D and N-D @ N-D -> bmm with b = the product of the
                            broadcast batch dims (for 2-D @ N-D with a weight requiring
                            grad aten instead runs the transposed problem as one mm);
                            any 1-D operand -> skipped (aten runs dot/mv, not a GEMM).

Layout: an operand is "n" if its last-dim stride is 1, "t" if its dim -2 stride is 1 (it
is the transpose of a contiguous matrix), else "n" (aten copies it first). Where aten
must copy an operand to flatten or merge batch dims (a reshape that is not a view), the
copy is contiguous and the operand counts as "n".

dtype: float16, bfloat16 and float32 matmuls are kept; matmuls in other dtypes (integers,
float64) are skipped, and if that leaves none it is a UserError.

Dynamic dimensions (torch.export only): a size may be a sympy expression of symbols such
as `s0` (the names torch chose at export). Each symbol can also be named
`<input>.<dim>` (e.g. `x.0` for the first dim of input `x`) where it is the whole size of
a user input's dim. Values per symbol come from `hints`; a symbol without a hint takes its
default values: {max(lower, 1), the power of two nearest the geometric mean of that and
the capped upper bound, min(upper, 4096)} from `ep.range_constraints`, deduplicated. The
value lists of all symbols are combined position by position when they are all the same
length, else as their cartesian product; each combination gives concrete problems, and
each FoundGemm records the values of the symbols it depends on in `hint`. Values outside
the exported range are accepted (tuning batch 1 of a program exported for batch >= 2 is
still useful). `input_shapes` given for an exported program instead bind the symbols to
the sizes given (one combination) and are checked against the static sizes.

Within one combination of values, identical problems (same GemmProblem, same hint) are
merged with their counts summed; a problem already listed for an earlier combination
(e.g. a static one, hint None) is not listed again. Order: combination by combination,
then first appearance in the forward pass. `hint` keys are torch's symbol names.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import re
import sys
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from .errors import UserError
from .problem import GemmProblem

__all__ = [
    "FoundGemm",
    "parse_input_shape",
    "parse_hints",
    "find_gemms",
    "plan_flops_share",
]

DEFAULT_HINT_CAP = 4096

# aten op name (schema name) -> how to read its operands, and its number of arguments
_MATMUL_OPS = {
    "aten::mm": ("mm", 2),
    "aten::addmm": ("addmm", 5),
    "aten::addmm_": ("addmm", 5),
    "aten::_addmm_activation": ("addmm", 6),
    "aten::bmm": ("bmm", 2),
    "aten::baddbmm": ("baddbmm", 5),
    "aten::baddbmm_": ("baddbmm", 5),
    "aten::linear": ("linear", 3),
    "aten::matmul": ("matmul", 2),
}
# Fused kernels that may call matmuls inside (math fallbacks); never looked into.
_OPAQUE_PREFIXES = (
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product",
    "aten::_flash_attention",
    "aten::_efficient_attention",
)

_GEMM_DTYPES = {"float16": "float16", "bfloat16": "bfloat16", "float32": "float32"}

_INPUT_DTYPES = {
    "float16": "float16", "fp16": "float16", "half": "float16", "f16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float32": "float32", "fp32": "float32", "float": "float32", "f32": "float32",
    "float64": "float64", "fp64": "float64", "double": "float64", "f64": "float64",
    "int64": "int64", "long": "int64", "i64": "int64",
    "int32": "int32", "int": "int32", "i32": "int32",
    "int16": "int16", "short": "int16",
    "int8": "int8", "uint8": "uint8", "bool": "bool",
}


@dataclass(frozen=True)
class FoundGemm:
    problem: GemmProblem
    count: int  # how many times it occurs per forward pass
    sources: tuple[str, ...]  # aten op names that produced it, e.g. ("aten.linear",)
    hint: dict[str, int] | None  # dynamic dims: the symbol values it was taken at, else None

    def __hash__(self) -> int:  # a dict field would make the generated hash fail
        return hash((self.problem, self.count, self.sources,
                     tuple(sorted(self.hint.items())) if self.hint else None))


# ---------------------------------------------------------------------------------------
# Parsing CLI text
# ---------------------------------------------------------------------------------------

_DIMS_RE = re.compile(r"^\d+(?:[x,]\d+)*$")


def parse_input_shape(text: str) -> tuple[tuple[int, ...], str]:
    """Parse "8x128x768:float16" into ((8, 128, 768), "float16").

    Dims are separated by `x` or `,`; the dtype after `:` defaults to float32 and may be
    any of float16/bfloat16/float32/float64/int64/int32/int16/int8/uint8/bool (or the
    usual short names). "scalar:int64" is a 0-d tensor.
    """
    raw = str(text).strip()
    shape_text, sep, dtype_text = raw.partition(":")
    shape_text = shape_text.strip().lower().replace(" ", "")
    dtype_key = dtype_text.strip().lower().removeprefix("torch.") if sep else "float32"
    if dtype_key not in _INPUT_DTYPES:
        raise UserError(
            f"cannot parse input shape {text!r}: unknown dtype {dtype_text.strip()!r} "
            f"(use e.g. 8x128x768:float16)")
    if shape_text in ("scalar", "()"):
        return (), _INPUT_DTYPES[dtype_key]
    if not _DIMS_RE.match(shape_text):
        raise UserError(f"cannot parse input shape {text!r}: expected dims like 8x128x768[:dtype]")
    dims = tuple(int(d) for d in re.split(r"[x,]", shape_text))
    if any(d < 1 for d in dims):
        raise UserError(f"cannot parse input shape {text!r}: every dim must be at least 1")
    return dims, _INPUT_DTYPES[dtype_key]


_HINT_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*(.+?)\s*$")


def parse_hints(texts: Iterable[str]) -> dict[str, list[int]]:
    """Parse ["s0=1,16,128", "s1=64"] into {"s0": [1, 16, 128], "s1": [64]}.

    Values are positive integers; repeated values are dropped, order is kept.
    """
    out: dict[str, list[int]] = {}
    for text in texts:
        match = _HINT_RE.match(str(text))
        if not match:
            raise UserError(f"cannot parse hint {text!r}: expected NAME=V1,V2,... e.g. s0=1,16,128")
        name, values_text = match.groups()
        if name in out:
            raise UserError(f"hint {name!r} is given more than once")
        values: list[int] = []
        for part in values_text.split(","):
            part = part.strip()
            if not part.isdigit() or int(part) < 1:
                raise UserError(f"cannot parse hint {text!r}: {part!r} is not a positive integer")
            if int(part) not in values:
                values.append(int(part))
        out[name] = values
    return out


def plan_flops_share(found: Sequence[FoundGemm]) -> list[float]:
    """Each entry's share of sum(flops * count) over the list (sums to 1; [] for [])."""
    weights = [f.problem.flops * f.count for f in found]
    total = sum(weights)
    if total <= 0:
        return [0.0 for _ in weights]
    return [w / total for w in weights]


# ---------------------------------------------------------------------------------------
# Operand descriptions shared by both formats
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Tensor:
    """What we know of one operand: sizes and strides (sympy expressions) and dtype name."""

    sizes: tuple[Any, ...]
    strides: tuple[Any, ...]
    dtype: str  # torch dtype name without the "torch." prefix


@dataclass(frozen=True)
class _Raw:
    """One matmul call, dims still possibly symbolic."""

    op: str
    m: Any
    n: Any
    k: Any
    b: Any
    dtype: str
    layout: str
    bias: str | None
    source: str


def _sym(value: Any) -> Any:
    import sympy

    if isinstance(value, bool):
        return sympy.Integer(int(value))
    if isinstance(value, int):
        return sympy.Integer(value)
    node = getattr(value, "node", None)  # torch.SymInt
    if node is not None and hasattr(node, "expr"):
        return sympy.sympify(node.expr)
    return sympy.sympify(value)


def _eq(a: Any, b: Any) -> bool:
    import sympy

    try:
        return bool(sympy.expand(a - b) == 0)
    except TypeError:
        return False


def _prod(values: Iterable[Any]) -> Any:
    import sympy

    out = sympy.Integer(1)
    for v in values:
        out = out * v
    return out


def _mat_layout(t: _Tensor) -> str:
    """'n' if the last-dim stride is 1, 't' if dim -2's is (a transposed contiguous
    matrix), else 'n' (aten copies such an operand to a contiguous one)."""
    if _eq(t.strides[-1], 1):
        return "n"
    if _eq(t.strides[-2], 1):
        return "t"
    return "n"


def _rows_foldable(t: _Tensor) -> bool:
    """Whether t[..., K] views as [prod(leading), K] without a copy (at::matmul's test)."""
    return all(_eq(t.strides[i], t.strides[i + 1] * t.sizes[i + 1]) for i in range(len(t.sizes) - 2))


def _flat_layout(t: _Tensor) -> str:
    """Layout of t[..., K] once flattened to [M, K]; a copy (contiguous) if it can't view."""
    if len(t.sizes) == 2 or _rows_foldable(t):
        return _mat_layout(t)
    return "n"


def _broadcast(a: Sequence[Any], b: Sequence[Any]) -> tuple[Any, ...]:
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)
    b = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        out.append(y if _eq(x, 1) else x)
    return tuple(out)


def _batched_layout(t: _Tensor, batch: Sequence[Any]) -> str:
    """Layout of t once expanded to batch + [r, c] and reshaped to [prod(batch), r, c]."""
    own = len(t.sizes) - 2
    pad = len(batch) - own
    sizes: list[Any] = []
    strides: list[Any] = []
    for i, full in enumerate(batch):
        j = i - pad
        if j < 0 or (_eq(t.sizes[j], 1) and not _eq(full, 1)):
            sizes.append(full)
            strides.append(0)  # expanded
        else:
            sizes.append(t.sizes[j])
            strides.append(t.strides[j])
    kept = [(s, st) for s, st in zip(sizes, strides) if not _eq(s, 1)]
    for (_, st0), (s1, st1) in zip(kept, kept[1:]):
        if not _eq(st0, st1 * s1):
            return "n"  # the reshape copies
    return _mat_layout(t)


def _bias_kind(bias: _Tensor | None) -> str:
    if bias is None or len(bias.sizes) < 2 or _eq(bias.sizes[-2], 1):
        return "n"
    return "mn"


def _classify(name: str, args: Sequence[Any]) -> _Raw | None | str:
    """Map one matmul-like call to a _Raw. Returns None to skip (1-D matmul), or the
    dtype name (str) when the dtype is not one we tune."""
    kind = _MATMUL_OPS[name][0]
    source = name.replace("::", ".")

    def arg(i: int) -> _Tensor | None:
        value = args[i] if i < len(args) else None
        return value if isinstance(value, _Tensor) else None

    if kind in ("mm", "bmm"):
        a, b, bias = arg(0), arg(1), None
    elif kind in ("addmm", "baddbmm"):
        bias, a, b = arg(0), arg(1), arg(2)
    else:  # linear, matmul
        a, b, bias = arg(0), arg(1), (arg(2) if kind == "linear" else None)
    if a is None or b is None:
        return None
    if a.dtype not in _GEMM_DTYPES:
        return a.dtype
    dtype = _GEMM_DTYPES[a.dtype]
    one = _sym(1)

    if kind == "mm":
        if len(a.sizes) != 2 or len(b.sizes) != 2:
            return None
        return _Raw("mm", a.sizes[0], b.sizes[1], a.sizes[1], one, dtype,
                    _mat_layout(a) + _mat_layout(b), None, source)
    if kind == "addmm":
        if len(a.sizes) != 2 or len(b.sizes) != 2:
            return None
        return _Raw("addmm", a.sizes[0], b.sizes[1], a.sizes[1], one, dtype,
                    _mat_layout(a) + _mat_layout(b), _bias_kind(bias), source)
    if kind in ("bmm", "baddbmm"):
        if len(a.sizes) != 3 or len(b.sizes) != 3:
            return None
        return _Raw("bmm", a.sizes[1], b.sizes[2], a.sizes[2], a.sizes[0], dtype,
                    _mat_layout(a) + _mat_layout(b), None, source)
    if kind == "linear":
        if len(a.sizes) < 2 or len(b.sizes) != 2:
            return None  # a 1-D input is a matrix-vector product
        w_t = _Tensor(b.sizes[::-1], b.strides[::-1], b.dtype)  # B = W.T
        layout = _flat_layout(a) + _mat_layout(w_t)
        m = _prod(a.sizes[:-1])
        if bias is not None:
            return _Raw("addmm", m, b.sizes[0], a.sizes[-1], one, dtype, layout, "n", source)
        return _Raw("mm", m, b.sizes[0], a.sizes[-1], one, dtype, layout, None, source)

    # matmul, following at::matmul's dispatch (no-grad)
    da, db = len(a.sizes), len(b.sizes)
    if da < 2 or db < 2:
        return None  # dot / mv / vector-matrix: not a GEMM
    if da == 2 and db == 2:
        return _Raw("mm", a.sizes[0], b.sizes[1], a.sizes[1], one, dtype,
                    _mat_layout(a) + _mat_layout(b), None, source)
    if da >= 3 and db == 2:
        return _Raw("mm", _prod(a.sizes[:-1]), b.sizes[1], a.sizes[-1], one, dtype,
                    _flat_layout(a) + _mat_layout(b), None, source)
    batch = _broadcast(a.sizes[:-2], b.sizes[:-2])
    layout = _batched_layout(a, batch) + _batched_layout(b, batch)
    return _Raw("bmm", a.sizes[-2], b.sizes[-1], a.sizes[-1], _prod(batch), dtype,
                layout, None, source)


# ---------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------

def _detect_format(path: Path) -> str:
    if not path.exists():
        raise UserError(f"model file not found: {path}")
    if not path.is_file():
        raise UserError(f"not a model file: {path} is a directory")
    if not zipfile.is_zipfile(path):
        raise UserError(
            f"{path} is not a saved model: expected a torch.export program (.pt2) or TorchScript (.pt)")
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise UserError(f"cannot read {path}: {exc}") from None
    if any(n == "archive_format" or n.endswith("/archive_format") for n in names):
        return "export"
    if any("/code/" in n or n.startswith("code/") for n in names) and any(
        n.endswith("constants.pkl") for n in names
    ):
        return "torchscript"
    if any(n.endswith("data.pkl") for n in names):
        raise UserError(
            f"{path} is a torch.save checkpoint, not a program: save the model with "
            "torch.export.save or torch.jit.save")
    raise UserError(
        f"{path} is not a saved model: expected a torch.export program (.pt2) or TorchScript (.pt)")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def find_gemms(
    path: str | Path,
    *,
    input_shapes: list[tuple[tuple[int, ...], str]] | None = None,
    hints: dict[str, list[int]] | None = None,
    device: str = "cuda",
    allow_tf32: bool = False,
) -> list[FoundGemm]:
    """Every GEMM in one forward pass of the saved model at `path`, merged, with counts.

    See the module docstring for the formats, the mapping rules and dynamic dims.
    """
    path = Path(path)
    fmt = _detect_format(path)
    if fmt == "export":
        raws, scenarios = _from_export(path, input_shapes, hints)
    else:
        if hints:
            raise UserError("--hint applies to exported programs with dynamic dims; "
                            "a TorchScript model takes its sizes from --input-shape")
        raws, scenarios = _from_torchscript(path, input_shapes), [{}]

    kept = [r for r in raws if isinstance(r, _Raw)]
    if not kept:
        other = sorted({r for r in raws if isinstance(r, str)})
        extra = f" (only matmuls in {', '.join(other)}, which are not tuned)" if other else ""
        raise UserError(f"no matmuls found in {path}{extra}")
    return _concretize(kept, scenarios, device=device, allow_tf32=allow_tf32)


# ---------------------------------------------------------------------------------------
# torch.export
# ---------------------------------------------------------------------------------------

def _fake_to_tensor(value: Any) -> _Tensor | None:
    import torch

    if not isinstance(value, torch.Tensor):
        return None
    return _Tensor(tuple(_sym(s) for s in value.shape), tuple(_sym(s) for s in value.stride()),
                   _dtype_name(value.dtype))


def _node_args(node: Any) -> list[Any]:
    """Positional operands of a call node, kwargs placed by the op's schema."""
    import torch

    schema = node.target._schema
    values: list[Any] = list(node.args)
    names = [a.name for a in schema.arguments]
    for key, value in node.kwargs.items():
        if key in names:
            i = names.index(key)
            values.extend([None] * (i + 1 - len(values)))
            values[i] = value
    out = []
    for v in values:
        if isinstance(v, torch.fx.Node):
            out.append(_fake_to_tensor(v.meta.get("val")))
        else:
            out.append(None)
    return out


def _from_export(path: Path, input_shapes, hints) -> tuple[list[Any], list[dict[str, int]]]:
    import torch

    try:
        ep = torch.export.load(str(path))
    except Exception as exc:  # noqa: BLE001 - any load failure is a bad file to the user
        raise UserError(f"cannot load exported program {path}: {_one_line(exc)}") from None

    raws: list[Any] = []
    for node in ep.graph.nodes:
        if node.op != "call_function" or not hasattr(node.target, "_schema"):
            continue
        name = node.target._schema.name
        if name in _MATMUL_OPS:
            raw = _classify(name, _node_args(node))
            if raw is not None:
                raws.append(raw)

    # user inputs, their fake values, and aliases "<input>.<dim>" for plain symbols
    user_names = set(ep.graph_signature.user_inputs)
    inputs: list[tuple[str, Any]] = []
    for node in ep.graph.nodes:
        if node.op == "placeholder" and node.name in user_names:
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor):
                inputs.append((node.name, val))
    aliases: dict[str, str] = {}
    for name, val in inputs:
        for i, size in enumerate(val.shape):
            expr = _sym(size)
            if expr.is_Symbol:
                aliases.setdefault(f"{name}.{i}", expr.name)

    ranges = {str(sym): vr for sym, vr in ep.range_constraints.items()}
    used: list[str] = []
    for raw in raws:
        if isinstance(raw, _Raw):
            for e in (raw.b, raw.m, raw.n, raw.k):
                for s in sorted(e.free_symbols, key=str):
                    if s.name not in used:
                        used.append(s.name)

    if input_shapes is not None:
        if hints:
            raise UserError("give either --input-shape or --hint for an exported program, not both")
        binding = _bind_input_shapes(inputs, input_shapes)
        missing = [s for s in used if s not in binding]
        if missing:
            extra = {s: _default_values(ranges.get(s)) for s in missing}
            return raws, [{**binding, **c} for c in _combine(extra)]
        return raws, [binding]

    known = list(dict.fromkeys(list(ranges) + used))
    given: dict[str, list[int]] = {}
    for key, values in (hints or {}).items():
        sym = aliases.get(key, key)
        if sym not in known:
            if known:
                listing = ", ".join(_with_aliases(s, aliases) for s in known)
                raise UserError(f"unknown dynamic dim {key!r} in --hint; known: {listing}")
            raise UserError(f"--hint {key!r}: the exported program has no dynamic dims")
        if sym in given:
            raise UserError(f"dynamic dim {sym} is hinted twice (as {key!r} too)")
        given[sym] = list(values)
    per_symbol = {s: given.get(s) or _default_values(ranges.get(s)) for s in used}
    return raws, _combine(per_symbol)


def _with_aliases(symbol: str, aliases: dict[str, str]) -> str:
    names = [a for a, target in aliases.items() if target == symbol]
    return f"{symbol} ({', '.join(names)})" if names else symbol


def _bind_input_shapes(inputs, input_shapes) -> dict[str, int]:
    if len(input_shapes) != len(inputs):
        names = ", ".join(n for n, _ in inputs) or "none"
        raise UserError(
            f"the exported program takes {len(inputs)} tensor input(s) ({names}); "
            f"got {len(input_shapes)} --input-shape")
    binding: dict[str, int] = {}
    checks: list[tuple[str, int, Any, int]] = []
    for (name, val), (shape, _dtype) in zip(inputs, input_shapes):
        if len(shape) != val.dim():
            raise UserError(f"input {name} has {val.dim()} dims; --input-shape gives {len(shape)}")
        for i, (size, want) in enumerate(zip(val.shape, shape)):
            expr = _sym(size)
            if expr.is_Symbol:
                if binding.setdefault(expr.name, want) != want:
                    raise UserError(f"input {name} dim {i} is {expr.name}, already set to "
                                    f"{binding[expr.name]}; got {want}")
            else:
                checks.append((name, i, expr, want))
    for name, i, expr, want in checks:
        value = _evaluate(expr, binding)
        if value is not None and value != want:
            raise UserError(f"input {name} dim {i} must be {value} (= {expr}); got {want}")
    return binding


def _default_values(vr: Any) -> list[int]:
    """{max(lower, 1), a middle power of two, min(upper, 4096)}, deduplicated, ascending."""
    lo, hi = 1, DEFAULT_HINT_CAP
    if vr is not None:
        if not bool(vr.lower <= 1):
            lo = int(vr.lower)
        if not bool(vr.upper >= DEFAULT_HINT_CAP):
            hi = int(vr.upper)
    hi = max(hi, lo)
    mid = 2 ** int(math.floor(math.log2(lo * hi) / 2 + 0.5))
    mid = min(max(mid, lo), hi)
    return sorted({lo, mid, hi})


def _combine(per_symbol: dict[str, list[int]]) -> list[dict[str, int]]:
    """Zip value lists of equal length, else take their cartesian product."""
    if not per_symbol:
        return [{}]
    names = list(per_symbol)
    lists = [per_symbol[n] for n in names]
    if len({len(v) for v in lists}) == 1:
        rows = list(zip(*lists))
    else:
        rows = list(itertools.product(*lists))
    return [dict(zip(names, row)) for row in rows]


def _evaluate(expr: Any, binding: dict[str, int]) -> int | None:
    import sympy

    subs = {s: sympy.Integer(binding[s.name]) for s in expr.free_symbols if s.name in binding}
    value = expr.xreplace(subs) if subs else expr
    if value.free_symbols:
        value = value.subs(subs)
    if value.free_symbols or not value.is_number:
        return None
    return int(value)


# ---------------------------------------------------------------------------------------
# TorchScript
# ---------------------------------------------------------------------------------------

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
            raise UserError(f"forward argument {arg.name!r} is a {typ}, not a tensor; "
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
        dtype = getattr(torch, dtype_name)
        if not random:
            out.append(torch.empty(shape, dtype=dtype, device=device))
        elif dtype.is_floating_point:
            out.append(torch.randn(shape, dtype=dtype, device=device))
        else:
            out.append(torch.zeros(shape, dtype=dtype, device=device))
    return out


def _profile_run(module: Any, inputs: list[Any]) -> list[Any]:
    """Run once under the profiler and return the outermost matmul-like calls."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True)
    with _quiet_stderr():
        prof.__enter__()
    try:
        # optimized_execution(False): run the graph as saved; the optimizing executor
        # rewrites ops on the first run (e.g. addmm into mm + add).
        with torch.no_grad(), torch.jit.optimized_execution(False):
            module(*inputs)
    finally:
        with _quiet_stderr():
            prof.__exit__(None, None, None)
    roots = prof.profiler.kineto_results.experimental_event_tree()

    found: list[Any] = []

    def convert(value: Any) -> _Tensor | None:
        sizes = getattr(value, "sizes", None)
        strides = getattr(value, "strides", None)
        dtype = getattr(value, "dtype", None)
        if sizes is None or strides is None or dtype is None or len(strides) != len(sizes):
            return None
        return _Tensor(tuple(_sym(s) for s in sizes), tuple(_sym(s) for s in strides),
                       _dtype_name(dtype))

    def events_sorted(events):
        return sorted(events, key=lambda e: e.start_time_ns)

    stack = list(reversed(events_sorted(roots)))
    while stack:
        event = stack.pop()
        name = event.name
        if name in _MATMUL_OPS:
            operands = [convert(v) for v in getattr(event.extra_fields, "inputs", None) or []]
            raw = _classify(name, _operand_window(name, operands))
            if raw is not None:
                found.append(raw)
            continue
        if name.startswith(_OPAQUE_PREFIXES):
            continue
        stack.extend(reversed(events_sorted(event.children)))
    return found


def _operand_window(name: str, operands: list[Any]) -> list[Any]:
    """The op's own arguments among the recorded inputs.

    With the graph executor's optimizations off, TorchScript's interpreter records extra
    values from its stack in front of an op's arguments (seen in torch 2.13), so when there
    are more inputs than arguments the last ones are taken, unless only the first ones fit
    together (an out= overload records its output last).
    """
    arity = _MATMUL_OPS[name][1]
    if len(operands) <= arity:
        return operands
    tail, head = operands[-arity:], operands[:arity]
    if _operands_fit(name, tail) or not _operands_fit(name, head):
        return tail
    return head


def _operands_fit(name: str, args: list[Any]) -> bool:
    kind = _MATMUL_OPS[name][0]
    first = 1 if kind in ("addmm", "baddbmm") else 0
    a, b = (args + [None, None, None])[first:first + 2]
    if not isinstance(a, _Tensor) or not isinstance(b, _Tensor):
        return False
    if len(a.sizes) < 1 or len(b.sizes) < 1:
        return False
    if kind == "linear":
        return _eq(a.sizes[-1], b.sizes[-1])
    return _eq(a.sizes[-1], b.sizes[0 if len(b.sizes) == 1 else -2])


def _from_torchscript(path: Path, input_shapes) -> list[Any]:
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
            raise UserError(f"cannot load TorchScript model {path}: {_one_line(exc)}") from None
    names, required = _script_tensor_args(module)
    if not required <= len(input_shapes) <= len(names):
        want = str(len(names)) if required == len(names) else f"{required} to {len(names)}"
        raise UserError(f"the model takes {want} tensor input(s) ({', '.join(names) or 'none'}); "
                        f"got {len(input_shapes)} --input-shape")
    if _is_meta(module):
        try:
            return _profile_run(module.eval(), _make_inputs(input_shapes, "meta", random=False))
        except Exception:  # noqa: BLE001 - run it for real below
            pass
    try:
        module = torch.jit.load(str(path), map_location="cpu").eval()
        return _profile_run(module, _make_inputs(input_shapes, "cpu", random=True))
    except Exception as exc:  # noqa: BLE001
        raise UserError(f"running {path.name} on inputs "
                        f"{', '.join('x'.join(map(str, s)) + ':' + d for s, d in input_shapes)} "
                        f"failed (check --input-shape): {_one_line(exc)}") from None


# ---------------------------------------------------------------------------------------
# Concrete problems
# ---------------------------------------------------------------------------------------

def _concretize(raws: list[_Raw], scenarios: list[dict[str, int]], *, device: str,
                allow_tf32: bool) -> list[FoundGemm]:
    out: list[FoundGemm] = []
    index: dict[tuple, int] = {}
    for binding in scenarios:
        local: dict[tuple, FoundGemm] = {}
        order: list[tuple] = []
        for raw in raws:
            dims = {}
            symbols: set[str] = set()
            for field in ("m", "n", "k", "b"):
                expr = getattr(raw, field)
                symbols |= {s.name for s in expr.free_symbols}
                value = _evaluate(expr, binding)
                if value is None:
                    raise UserError(f"matmul size {field}={expr} depends on a symbol with no value")
                if value < 1:
                    shown = ", ".join(f"{s}={binding[s]}" for s in sorted(symbols))
                    raise UserError(f"at {shown} a {raw.op} size {field}={expr} is {value}; "
                                    "choose larger hint values")
                dims[field] = value
            problem = GemmProblem(
                op=raw.op, m=dims["m"], n=dims["n"], k=dims["k"], b=dims["b"], dtype=raw.dtype,
                layout=raw.layout, bias=raw.bias,
                allow_tf32=bool(allow_tf32 and raw.dtype == "float32"), device=device)
            hint = {s: binding[s] for s in sorted(symbols)} or None
            key = (problem, tuple(sorted(hint.items())) if hint else None)
            if key in local:
                prev = local[key]
                sources = prev.sources + ((raw.source,) if raw.source not in prev.sources else ())
                local[key] = replace(prev, count=prev.count + 1, sources=sources)
            else:
                local[key] = FoundGemm(problem, 1, (raw.source,), hint)
                order.append(key)
        for key in order:
            if key not in index:  # the same problem at the same values in another combination
                index[key] = len(out)
                out.append(local[key])
    return out
