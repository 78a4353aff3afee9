"""model.py: the matrix multiplies in a saved model, as GemmProblems with counts.

Two formats are read:

* a torch.export program (`torch.export.save`, usually `.pt2`): the graph is walked and
  each matmul-like node's operands' shape, strides and dtype are read. The archive's
  serialized program (`<archive>/models/model.json`) is read by autotune itself, without
  importing torch and without opening any weight: reading a .pt2 never runs code from it.
  Anything that reader does not understand (another schema major version, an argument
  form or symbolic expression it does not handle, an entry larger than MAX_PROGRAM_BYTES)
  is a UserError naming it; the file is never handed to `torch.export.load`, which
  unpickles what the archive holds. Sizes may be symbolic (`torch.export.Dim`); see
  "Dynamic dimensions" below.
* TorchScript (`torch.jit.save`): a TorchScript file is code: loading it and running its
  forward runs what its author wrote, so it is read only when the caller says the file is
  trusted (`trust_torchscript`, the CLI's --trust-torchscript). Sizes are not stored, so
  the module is run once on example inputs built from `input_shapes` under
  `torch.profiler` with `record_shapes`, which records every aten op with its operands'
  sizes, strides and dtype, nested as they were called, with the graph executor's
  optimizations off so that the ops are the saved ones (the optimizing executor rewrites
  e.g. addmm into mm + add). The run is first tried on the meta device (no arithmetic, no
  memory for activations); if the module cannot run there it is run on the CPU with random
  inputs (integer and bool inputs are zeros, so that they are valid indices). Fused ops
  whose matmuls run inside them (nn.TransformerEncoderLayer's fast path,
  `aten::_transformer_encoder_layer_fwd`) are not looked into; when they hide every matmul
  the error names them.
* A plain `torch.save` checkpoint (a pickle) is refused without being opened.

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
import json
import math
import os
import re
import sys
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..errors import UserError
from ..problem import MAX_DIM, GemmProblem

__all__ = [
    "FoundGemm",
    "parse_input_shape",
    "parse_hints",
    "find_gemms",
    "check_model",
    "plan_flops_share",
]

DEFAULT_HINT_CAP = 4096
MAX_HINT_VALUES = 64  # values one --hint may list
MAX_COMBINATIONS = 1024  # combinations of hint values one model may be read at

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
    "aten::_scaled_mm": ("scaled_mm", 8),
}
# Fused kernels that may call matmuls inside (math fallbacks); never looked into.
_OPAQUE_PREFIXES = (
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product",
    "aten::_flash_attention",
    "aten::_efficient_attention",
)

# Fused kernels with matmuls inside that the profiler does not see (nn.Transformer layers'
# fast path in eval mode); named when they hide every matmul of a TorchScript model.
_FUSED_MATMUL_OPS = (
    "aten::_transformer_encoder_layer_fwd",
    "aten::_transformer_decoder_only_layer_fwd",
    "aten::_native_multi_head_attention",
    "aten::_native_decoder_only_multi_head_attention",
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

_DIMS_RE = re.compile(r"^[0-9]+(?:[x,][0-9]+)*$")
_SIZE_RE = re.compile(r"[0-9]{1,10}")  # a size: at most MAX_DIM, checked once it is an int


def _size(text: str) -> int | None:
    """A size between 1 and MAX_DIM written in ASCII digits, else None."""
    if not _SIZE_RE.fullmatch(text):
        return None
    value = int(text)
    return value if 1 <= value <= MAX_DIM else None


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
    dims = tuple(_size(d) for d in re.split(r"[x,]", shape_text))
    if any(d is None for d in dims):
        raise UserError(f"cannot parse input shape {_shown(str(text))!r}: every dim must be "
                        f"from 1 to {MAX_DIM}")
    return dims, _INPUT_DTYPES[dtype_key]


_HINT_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*(.+?)\s*$")


def parse_hints(texts: Iterable[str]) -> dict[str, list[int]]:
    """Parse ["s0=1,16,128", "s1=64"] into {"s0": [1, 16, 128], "s1": [64]}.

    Values are sizes from 1 to MAX_DIM, at most MAX_HINT_VALUES of them; repeated values
    are dropped, order is kept. NAME is checked against the model later (find_gemms).
    """
    out: dict[str, list[int]] = {}
    for text in texts:
        shown = _shown(str(text), 80)
        match = _HINT_RE.match(str(text))
        if not match:
            raise UserError(f"cannot parse hint {shown!r}: expected NAME=V1,V2,... "
                            "e.g. x.0=1,16,128")
        name, values_text = match.groups()
        if name in out:
            raise UserError(f"hint {name!r} is given more than once")
        values: list[int] = []
        parts = values_text.split(",")
        if len(parts) > MAX_HINT_VALUES:
            raise UserError(f"hint {name!r} lists {len(parts)} values; at most "
                            f"{MAX_HINT_VALUES} are tuned at")
        for part in parts:
            value = _size(part.strip())
            if value is None:
                raise UserError(f"cannot parse hint {shown!r}: {_shown(part.strip(), 24)!r} is "
                                f"not a size from 1 to {MAX_DIM}")
            if value not in values:
                values.append(value)
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
    scale: str | None = None  # scaled_mm: "tensor" or "row"
    out_dtype: str | None = None  # scaled_mm: the output's dtype
    fast_accum: bool = False  # scaled_mm: its use_fast_accum


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


def _classify_scaled(args: Sequence[Any], out: _Tensor | None, source: str, fast_accum: bool) -> _Raw | str:
    """A torch._scaled_mm call (self, mat2, scale_a, scale_b, bias, ...) whose output is
    `out`: a _Raw, or a str saying what is not tuned (other float8 kinds, blockwise scales,
    an output dtype or a layout the problem does not take)."""
    from ..problem import FP8_LAYOUT, OUT_DTYPES

    a, b, scale_a, scale_b, bias = (list(args) + [None] * 5)[:5]
    if not all(isinstance(t, _Tensor) and len(t.sizes) == 2 for t in (a, b)) \
            or not all(isinstance(t, _Tensor) for t in (scale_a, scale_b)):
        return "float8 (operands not read)"
    if a.dtype != "float8_e4m3fn" or b.dtype != "float8_e4m3fn":
        return f"{a.dtype} x {b.dtype}"
    m, k, n = a.sizes[0], a.sizes[1], b.sizes[1]
    if _eq(_prod(scale_a.sizes), 1) and _eq(_prod(scale_b.sizes), 1):
        scale = "tensor"
    elif (len(scale_a.sizes) == 2 and _eq(scale_a.sizes[0], m) and _eq(scale_a.sizes[1], 1)
          and len(scale_b.sizes) == 2 and _eq(scale_b.sizes[0], 1) and _eq(scale_b.sizes[1], n)):
        scale = "row"
    else:
        return "float8_e4m3fn with blockwise scales"
    if out is None or out.dtype not in OUT_DTYPES:
        return f"float8_e4m3fn to {out.dtype if out else 'an unknown dtype'}"
    layout = _mat_layout(a) + _mat_layout(b)
    if layout != FP8_LAYOUT:
        return f"float8_e4m3fn in layout {layout}"
    return _Raw("scaled_mm", m, n, k, _sym(1), a.dtype, layout, None if bias is None else "n", source,
                scale=scale, out_dtype=out.dtype, fast_accum=fast_accum)


def _classify(name: str, args: Sequence[Any], out: _Tensor | None = None,
              fast_accum: bool = False) -> _Raw | None | str:
    """Map one matmul-like call to a _Raw. Returns None to skip (1-D matmul), or the
    dtype name (str) when the dtype is not one we tune. `out`: the call's output, where
    known (a scaled_mm's output dtype is its own); `fast_accum`: a scaled_mm's use_fast_accum."""
    kind = _MATMUL_OPS[name][0]
    source = name.replace("::", ".")
    if kind == "scaled_mm":
        return _classify_scaled(args, out, source, fast_accum)

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

def model_format(path: Path) -> str:
    """"export" or "torchscript", read from the archive's listing (cheap: a caller checks the
    file with it before starting work); else a UserError that says what the file is."""
    if not path.exists():
        raise UserError(f"model file not found: {path}")
    if path.is_dir():
        raise UserError(f"not a model file: {path} is a directory")
    if not path.is_file():
        raise UserError(f"not a model file: {path} is not a regular file")
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


def _shown(text: str, limit: int = 300) -> str:
    """Text from a file, safe to print on one line: control characters escaped, cut short."""
    out = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    return out if len(out) <= limit else out[:limit] + "..."


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def find_gemms(
    path: str | Path,
    *,
    input_shapes: list[tuple[tuple[int, ...], str]] | None = None,
    hints: dict[str, list[int]] | None = None,
    device: str = "cuda",
    allow_tf32: bool = False,
    trust_torchscript: bool = False,
    notes: list[str] | None = None,
) -> list[FoundGemm]:
    """Every GEMM in one forward pass of the saved model at `path`, merged, with counts.

    See the module docstring for the formats, the mapping rules and dynamic dims. A
    TorchScript file is read only with trust_torchscript (reading it runs it). What the
    list leaves out that the caller should know (matmuls inside a fused op) is appended
    to `notes`, one line each.
    """
    path = Path(path)
    fmt = check_model(path, trust_torchscript=trust_torchscript)
    fused: list[str] = []
    if fmt == "export":
        raws, scenarios = _from_export(path, input_shapes, hints)
    else:
        if hints:
            raise UserError("--hint applies to exported programs with dynamic dims; "
                            "a TorchScript model takes its sizes from --input-shape")
        raws, fused = _from_torchscript(path, input_shapes)
        scenarios = [{}]

    kept = [r for r in raws if isinstance(r, _Raw)]
    way_out = ("save the model with torch.export.export and torch.export.save, or trace it "
               "in train mode (model.train() before torch.jit.trace)")
    if not kept:
        if fused:
            raise UserError(
                f"no matmuls found in {path}: they run inside {', '.join(fused)}, a fused op "
                "autotune does not look into (nn.Transformer layers traced in eval mode take "
                f"this fast path); {way_out}")
        other = sorted({r for r in raws if isinstance(r, str)})
        extra = f" (only matmuls in {', '.join(other)}, which are not tuned)" if other else ""
        raise UserError(f"no matmuls found in {path}{extra}")
    if fused and notes is not None:
        notes.append(f"the matmuls inside {', '.join(fused)} (a fused op) are not listed; "
                     f"to list them, {way_out}")
    return _concretize(kept, scenarios, device=device, allow_tf32=allow_tf32)


def check_model(path: Path, *, trust_torchscript: bool = False) -> str:
    """model_format(path), refusing TorchScript unless it is trusted: a TorchScript file is
    code, and reading it runs it (a caller checks this before starting work)."""
    fmt = model_format(path)
    if fmt == "torchscript" and not trust_torchscript:
        raise UserError(
            f"{path} is TorchScript, which is code: reading it loads and runs the model. "
            "Pass --trust-torchscript for a file you trust, or save the model with "
            "torch.export.save (a .pt2 is read without running anything)")
    return fmt


# ---------------------------------------------------------------------------------------
# torch.export
# ---------------------------------------------------------------------------------------

@dataclass
class _ExportGraph:
    """What is read of an exported program."""

    raws: list[Any]  # _classify's results for the graph's matmul-like nodes, in order
    inputs: list[tuple[str, tuple[Any, ...]]]  # user tensor inputs: placeholder name, sizes
    ranges: dict[str, Any]  # symbol name -> its range (.lower, .upper), as range_constraints


def _from_export(path: Path, input_shapes, hints) -> tuple[list[Any], list[dict[str, int]]]:
    return _export_scenarios(_read_export(path), input_shapes, hints)


def _read_export(path: Path) -> _ExportGraph:
    """The archive read by autotune's own reader, or a UserError naming what it did not
    understand. There is no fallback to torch.export.load: it unpickles what the archive
    holds, and a crafted pickle runs code."""
    try:
        return _read_export_archive(path)
    except _ArchiveUnreadable as exc:
        what = str(exc)
    except RecursionError:
        what = "nested too deeply"
    except Exception as exc:  # noqa: BLE001 - a crafted or damaged file: say so in one line
        what = f"unexpected content ({_one_line(exc)})"
    raise UserError(f"cannot read exported program {path}: {_shown(what)}; autotune reads "
                    ".pt2 files itself and never loads them with torch (that unpickles, which "
                    "can run code stored in the file)")


def _export_scenarios(graph: _ExportGraph, input_shapes,
                      hints) -> tuple[list[Any], list[dict[str, int]]]:
    raws, inputs, ranges = graph.raws, graph.inputs, graph.ranges

    # aliases "<input>.<dim>" for plain symbols
    aliases: dict[str, str] = {}
    for name, shape in inputs:
        for i, size in enumerate(shape):
            expr = _sym(size)
            if expr.is_Symbol:
                aliases.setdefault(f"{name}.{i}", expr.name)

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
        sym = _hint_symbol(key, known, aliases, inputs)
        if sym in given:
            raise UserError(f"dynamic dim {sym} is hinted twice (as {key!r} too)")
        given[sym] = list(values)
    per_symbol = {s: given.get(s) or _default_values(ranges.get(s)) for s in used}
    return raws, _combine(per_symbol)


def _hint_symbol(key: str, known: list[str], aliases: dict[str, str], inputs) -> str:
    """The symbol a --hint name stands for: the symbol itself (s77), an input's dim (x.0),
    or, where the program has one dynamic dim, any other name (torch.export does not save
    a Dim's name, so Dim("batch") is saved as s77 and `batch` can only mean that one)."""
    if key in known:
        return key
    if key in aliases:
        return aliases[key]
    if not known:
        raise UserError(f"--hint {key!r}: the exported program has no dynamic dims")
    name, dot, dim = key.partition(".")
    shapes = dict(inputs)
    if dot and name in shapes and dim.isdigit() and int(dim) < len(shapes[name]):
        size = _sym(shapes[name][int(dim)])
        what = "static" if size.is_Integer else "not one symbol"
        raise UserError(f"--hint {key!r}: that dim is {what} ({size}); the dynamic dims are "
                        f"{', '.join(_with_aliases(s, aliases) for s in known)}")
    plain = [s for s in known if _IDENT_RE.fullmatch(s)]
    if not dot and len(plain) == 1:
        return plain[0]
    listing = ", ".join(_with_aliases(s, aliases) for s in known)
    raise UserError(
        f"unknown dynamic dim {key!r} in --hint; known: {listing}. Name a dim by its symbol "
        "or as <input>.<dim> (e.g. x.0); torch.export does not save Dim names, so a Dim's own "
        "name is accepted only where the program has one dynamic dim")


# -- torch.export's archive, read without torch ------------------------------------------------
#
# A .pt2 written by torch.export.save is a zip whose records all lie in one folder; in it
# `archive_format` holds "pt2", `archive_version` "0", and `models/model.json` the program
# that torch.export.load returns, serialized as torch/_export/serde/schema.py describes
# (schema version 8.20 in torch 2.13; another major version is refused). Every union
# there is a one-key object ({"as_tensor": {...}}); each node names its target
# ("torch.ops.aten.mm.default") and its inputs by schema argument name;
# `graph.tensor_values` gives every tensor's dtype (the ScalarType enum), sizes and strides
# ({"as_int": 4} or {"as_expr": {"expr_str": <sympy.srepr of the expression>}});
# `signature.input_specs` says which placeholders are user inputs; `range_constraints` maps
# str(symbol) to {"min_val", "max_val"} (null for unbounded). Only those three small entries
# are read, each bounded in size (a zip entry can inflate a thousandfold); the weights are
# never opened.

class _ArchiveUnreadable(Exception):
    """The archive holds something the reader does not understand: the file is refused."""


# The most autotune inflates of one archive entry: the program's JSON (a few MB for a
# large model; the weights are never read), and the two one-word markers.
MAX_PROGRAM_BYTES = 128 << 20
_MAX_MARKER_BYTES = 64


_EXPORT_SCHEMA_MAJOR = 8

# schema.py's ScalarType -> torch dtype name (str(dtype) without "torch.")
_EXPORT_DTYPES = {
    1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float16", 7: "float32",
    8: "float64", 9: "complex32", 10: "complex64", 11: "complex128", 12: "bool",
    13: "bfloat16", 28: "uint16", 29: "float8_e4m3fn", 30: "float8_e5m2",
    31: "float8_e4m3fnuz", 32: "float8_e5m2fnuz", 33: "float8_e8m0fnu", 34: "uint32",
    35: "uint64",
}

# The schema argument names, in order, of each overload of the ops in _MATMUL_OPS (from
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

_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SYMBOL_NAME_RE = re.compile(r"[a-z]+[0-9]+")  # torch's shape symbols: s0, s77, u3, ...
_STR_EXPR_RE = re.compile(r"[A-Za-z0-9_+\-* ()]+")  # "4*s0 + 1": str() form (older files)
_SREPR_START_RE = re.compile(r"\s*[A-Z][A-Za-z]*\(")  # "Mul(...": sympy.srepr text
_SREPR_SYMBOL_RE = re.compile(r"Symbol\(\s*'([^']*)'")
_SREPR_TOKEN_RE = re.compile(r"\s*(?:([A-Za-z_][A-Za-z0-9_]*)|(-?[0-9]+)|'([^'\\]*)'|([(),=]))")


def _one(union: Any) -> tuple[str, Any]:
    """The (field, value) of a serialized union: a one-key object."""
    if not isinstance(union, dict) or len(union) != 1:
        raise _ArchiveUnreadable(f"not a one-field union: {union!r}"[:200])
    return next(iter(union.items()))


def _expr_symbol_names(text: str) -> set[str]:
    """Names of the symbols in an expr_str, without parsing it."""
    if "Symbol(" in text:
        return set(_SREPR_SYMBOL_RE.findall(text))
    return set(_IDENT_RE.findall(text))


_MAX_POW = 64

# torch's integer functions of sizes (torch/utils/_sympy/functions.py names them), on
# non-negative sizes: FloorDiv(a, b) = a // b (CleanDiv: exact), CeilDiv rounds up, Mod and
# PythonMod are a % b.
_INT_OPS = {
    "FloorDiv": lambda a, b: a // b,
    "CleanDiv": lambda a, b: a // b,
    "CeilDiv": lambda a, b: -(-a // b),
    "Mod": lambda a, b: a % b,
    "PythonMod": lambda a, b: a % b,
}
_INT_FUNCTION_CLASSES: dict[str, Any] = {}


def _int_functions() -> dict[str, Any]:
    """sympy functions standing for _INT_OPS: unevaluated while an argument is symbolic,
    an Integer once both are (when hint values are put in)."""
    if not _INT_FUNCTION_CLASSES:
        import sympy

        def make(name: str, op: Any) -> Any:
            def evaluate(cls: Any, a: Any, b: Any) -> Any:
                if a.is_Integer and b.is_Integer and b != 0:
                    return sympy.Integer(op(int(a), int(b)))
                return None

            return type(name, (sympy.Function,), {"nargs": 2, "is_integer": True,
                                                    "eval": classmethod(evaluate)})

        _INT_FUNCTION_CLASSES.update({name: make(name, op) for name, op in _INT_OPS.items()})
    return _INT_FUNCTION_CLASSES


class _ExprReader:
    """Sizes and strides as sympy expressions equal to the ones torch's deserializer makes
    (it sympifies expr_str: `sympy.srepr` text such as "Mul(Integer(4), Symbol('s0',
    positive=True, integer=True))", or str() text "4*s0" in older files), and so to _sym()'s
    results on the fake tensors torch.export.load would give. The srepr text is parsed here,
    not evaluated. Only integers (|i| < 2**63), symbols, sums, products, powers with exponents
    0 to 64, sympy's Min and Max and torch's integer functions in _int_functions() are
    accepted: anything else is refused by name."""

    def __init__(self) -> None:
        self.plain: dict[str, Any] = {}  # symbols of str() text: no assumptions, as sympify
        self.cache: dict[str, Any] = {}

    def expr(self, text: Any) -> Any:
        if not isinstance(text, str):
            raise _ArchiveUnreadable(f"expr_str is not a string: {text!r}")
        if text not in self.cache:
            value = self._srepr(text) if _SREPR_START_RE.match(text) else self._str(text)
            self._check(text, value)
            self.cache[text] = value
        return self.cache[text]

    def _str(self, text: str) -> Any:
        import sympy

        # no powers and no long numbers: sympify computes what it is given ("9**9**9**9")
        if (not _STR_EXPR_RE.fullmatch(text) or "**" in text
                or any(len(d) > 18 for d in re.findall(r"[0-9]+", text))):
            raise _ArchiveUnreadable(f"symbolic size {text!r} not understood")
        names = set(_IDENT_RE.findall(text))
        for name in names:
            if not _SYMBOL_NAME_RE.fullmatch(name):
                raise _ArchiveUnreadable(f"symbolic size {text!r}: {name!r} is not a symbol")
            self.plain.setdefault(name, sympy.Symbol(name))
        try:
            return sympy.sympify(text, locals={n: self.plain[n] for n in names})
        except Exception as exc:  # noqa: BLE001 - SympifyError, TokenError, SyntaxError
            raise _ArchiveUnreadable(f"symbolic size {text!r}: {exc}") from None

    def _srepr(self, text: str) -> Any:
        tokens: list[tuple[str, Any]] = []
        pos = 0
        while pos < len(text):
            match = _SREPR_TOKEN_RE.match(text, pos)
            if match is None:
                if text[pos:].strip():
                    raise _ArchiveUnreadable(f"symbolic size {text!r} not understood")
                break
            pos = match.end()
            name, number, string, punct = match.groups()
            if name is not None:
                tokens.append(("name", name))
            elif number is not None:
                if len(number) > 20:
                    raise _ArchiveUnreadable(
                        f"symbolic size {text[:80]!r}...: integer out of range")
                tokens.append(("int", int(number)))
            elif string is not None:
                tokens.append(("str", string))
            else:
                tokens.append((punct, punct))
        tokens.append(("end", None))
        at = 0

        def take(kind: str) -> Any:
            nonlocal at
            if tokens[at][0] != kind:
                raise _ArchiveUnreadable(f"symbolic size {text!r} not understood")
            at += 1
            return tokens[at - 1][1]

        def call() -> Any:
            func = take("name")
            take("(")
            args: list[Any] = []
            kwargs: dict[str, bool] = {}
            while tokens[at][0] != ")":
                kind = tokens[at][0]
                if kind == "name" and tokens[at + 1][0] == "=":
                    key = take("name")
                    take("=")
                    flag = take("name")
                    if flag not in ("True", "False"):
                        raise _ArchiveUnreadable(f"symbolic size {text!r} not understood")
                    kwargs[key] = flag == "True"
                elif kind in ("int", "str"):
                    args.append(take(kind))
                else:
                    args.append(call())
                if tokens[at][0] != ")":
                    take(",")
            take(")")
            return self._build(text, func, args, kwargs)

        value = call()
        take("end")
        return value

    @staticmethod
    def _build(text: str, func: str, args: list[Any], kwargs: dict[str, bool]) -> Any:
        import sympy

        def exprs() -> bool:
            return bool(args) and all(isinstance(a, sympy.Basic) for a in args)

        if func == "Integer" and len(args) == 1 and type(args[0]) is int and not kwargs:
            if abs(args[0]) >= 2 ** 63:
                raise _ArchiveUnreadable(f"symbolic size {text!r}: integer out of range")
            return sympy.Integer(args[0])
        if (func == "Symbol" and len(args) == 1 and isinstance(args[0], str)
                and _IDENT_RE.fullmatch(args[0])):
            try:
                return sympy.Symbol(args[0], **kwargs)
            except Exception as exc:  # noqa: BLE001 - an assumption sympy doesn't know
                raise _ArchiveUnreadable(f"symbolic size {text!r}: {exc}") from None
        if func in ("Add", "Mul") and exprs() and not kwargs:
            return (sympy.Add if func == "Add" else sympy.Mul)(*args)
        if func == "Pow" and len(args) == 2 and exprs() and not kwargs:
            if not (args[1].is_Integer and 0 <= args[1] <= _MAX_POW):
                raise _ArchiveUnreadable(f"symbolic size {text!r}: power {args[1]} not understood")
            return sympy.Pow(*args)
        functions = _int_functions()
        if func in functions and len(args) == 2 and exprs() and not kwargs:
            return functions[func](*args)
        if func in ("Min", "Max") and exprs() and not kwargs:  # sympy's, as sympify finds them
            return (sympy.Min if func == "Min" else sympy.Max)(*args)
        raise _ArchiveUnreadable(f"symbolic size {text!r}: {func} not understood")

    @staticmethod
    def _check(text: str, value: Any) -> None:
        import sympy

        for part in sympy.preorder_traversal(value):
            if part.is_Symbol or part.is_Integer or part.is_Add or part.is_Mul:
                continue
            if isinstance(part, (sympy.Min, sympy.Max, *_int_functions().values())):
                continue
            if part.is_Pow and part.exp.is_Integer and part.exp >= 0:
                continue
            raise _ArchiveUnreadable(f"symbolic size {text!r}: {part} not understood")

    def symint(self, value: Any) -> Any:
        import sympy

        field, body = _one(value)
        if field == "as_int" and type(body) is int:
            return sympy.Integer(body)
        if field == "as_expr" and isinstance(body, dict):
            return self.expr(body["expr_str"])
        raise _ArchiveUnreadable(f"size {value!r} not understood")

    def tensor(self, meta: Any) -> _Tensor:
        dtype = meta["dtype"]
        if type(dtype) is not int or dtype not in _EXPORT_DTYPES:
            raise _ArchiveUnreadable(f"unknown dtype {dtype!r}")
        sizes = tuple(self.symint(v) for v in meta["sizes"])
        strides = tuple(self.symint(v) for v in meta["strides"])
        if len(sizes) != len(strides):
            raise _ArchiveUnreadable("sizes and strides differ in length")
        return _Tensor(sizes, strides, _EXPORT_DTYPES[dtype])


@dataclass(frozen=True)
class _Range:
    """A symbol's range as `ep.range_constraints` has it: ints, or -inf/inf when unbounded."""

    lower: Any
    upper: Any


def _range_bound(value: Any, unbounded: float) -> Any:
    if value is None or (isinstance(value, float) and value == unbounded):
        return unbounded  # torch: -int_oo / int_oo
    if type(value) is not int:
        raise _ArchiveUnreadable(f"range bound {value!r} not understood")
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


def _read_export_archive(path: Path) -> _ExportGraph:
    """Read the exported program from the archive's JSON, importing neither torch nor any
    weight. Raises _ArchiveUnreadable (or another exception) on anything unexpected."""
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        if not names or "/" not in names[0]:
            raise _ArchiveUnreadable("not a pt2 archive")
        root = names[0].split("/", 1)[0]  # torch's reader takes the first record's folder

        def read(name: str, cap: int) -> bytes:
            return _read_entry(zf, f"{root}/{name}", cap)

        if (read("archive_format", _MAX_MARKER_BYTES) != b"pt2"
                or read("archive_version", _MAX_MARKER_BYTES) != b"0"):
            raise _ArchiveUnreadable("unknown archive format or version")
        doc = json.loads(read("models/model.json", MAX_PROGRAM_BYTES))
    return _parse_exported_program(doc)


def _read_entry(zf: zipfile.ZipFile, name: str, cap: int) -> bytes:
    """One entry's bytes, refused if its declared size or the bytes it inflates to exceed
    cap (the declared size is the archive's word, not a bound)."""
    try:
        info = zf.getinfo(name)
    except KeyError:
        raise _ArchiveUnreadable(f"no entry {name!r}") from None
    if info.file_size > cap:
        raise _ArchiveUnreadable(f"entry {name!r} inflates to {info.file_size} bytes, more "
                                 f"than the {cap} autotune reads")
    chunks: list[bytes] = []
    total = 0
    with zf.open(info) as stream:
        while True:
            block = stream.read(min(1 << 20, cap + 1 - total))
            if not block:
                break
            total += len(block)
            chunks.append(block)
            if total > cap:
                raise _ArchiveUnreadable(f"entry {name!r} inflates to more than the {cap} "
                                         "bytes autotune reads")
    return b"".join(chunks)


def _parse_exported_program(doc: Any) -> _ExportGraph:
    """_ExportGraph of a serialized ExportedProgram (models/model.json, parsed)."""
    version = doc["schema_version"]
    if version["major"] != _EXPORT_SCHEMA_MAJOR:
        raise _ArchiveUnreadable(f"schema version {version['major']}.{version['minor']}")
    module = doc["graph_module"]
    graph = module["graph"]
    values = graph["tensor_values"]
    if not isinstance(values, dict):
        raise _ArchiveUnreadable("tensor_values is not an object")
    reader = _ExprReader()
    tensors: dict[str, _Tensor] = {}

    def tensor(name: Any) -> _Tensor:
        if name not in tensors:
            if not isinstance(name, str) or name not in values:
                raise _ArchiveUnreadable(f"no tensor value {name!r}")
            tensors[name] = reader.tensor(values[name])
        return tensors[name]

    def operand(arg: Any) -> _Tensor | None:
        field, body = _one(arg)
        if field == "as_tensor":
            return tensor(body["name"])
        if field in _EXPORT_NON_TENSOR_ARGS:
            return None
        raise _ArchiveUnreadable(f"argument form {field!r} not handled")

    raws: list[Any] = []
    for node in graph["nodes"]:
        target = node["target"]
        if not isinstance(target, str):
            raise _ArchiveUnreadable(f"target {target!r}")
        if not target.startswith("torch.ops.aten."):
            continue  # other namespaces, operator.getitem, higher-order ops: not matmuls
        parts = target.split(".")
        if len(parts) != 5:
            raise _ArchiveUnreadable(f"target {target!r} not understood")
        op, overload = parts[3], parts[4]
        name = f"aten::{op}"
        if name not in _MATMUL_OPS:
            continue
        arg_names = _EXPORT_ARG_NAMES.get(op, {}).get(overload)
        if arg_names is None:
            raise _ArchiveUnreadable(f"unknown overload {target}")
        args: list[Any] = [None] * len(arg_names)
        for named in node["inputs"]:
            if named["name"] not in arg_names:
                raise _ArchiveUnreadable(f"{target} has no argument {named['name']!r}")
            args[arg_names.index(named["name"])] = operand(named["arg"])
        out, fast = None, False
        if op == "_scaled_mm":  # its output dtype and accumulation are its own
            outputs = node.get("outputs") or [None]
            out = operand(outputs[0]) if isinstance(outputs[0], dict) else None
            fast = any(named["name"] == "use_fast_accum" and named["arg"] == {"as_bool": True}
                       for named in node["inputs"])
        raw = _classify(name, args, out, fast)
        if raw is not None:
            raws.append(raw)

    # user inputs that are tensors, in placeholder order
    user: set[str] = set()
    for spec in module["signature"]["input_specs"]:
        kind, body = _one(spec)
        if kind == "user_input":
            field, arg = _one(body["arg"])
            if field == "as_tensor":
                user.add(arg["name"])
    inputs: list[tuple[str, tuple[Any, ...]]] = []
    for arg in graph["inputs"]:
        field, body = _one(arg)
        if field == "as_tensor" and body["name"] in user:
            inputs.append((body["name"], tensor(body["name"]).sizes))

    # range_constraints, less the keys that occur in no expression of the graph (torch's
    # deserializer keeps those whose str() is that of a symbol or sub-expression it parsed)
    texts: list[str] = []
    _expr_strings(graph, texts)
    present: set[str] = set()
    for text in texts:
        present |= _expr_symbol_names(text)
    if not all(_IDENT_RE.fullmatch(k) for k in doc["range_constraints"]):
        import sympy  # a key such as "2*s0" (a derived Dim): parse every expression

        for text in texts:
            present.update(str(p) for p in sympy.preorder_traversal(reader.expr(text))
                           if not p.is_Integer)
    ranges: dict[str, Any] = {}
    for key, bounds in doc["range_constraints"].items():
        if key in present:
            ranges[key] = _Range(_range_bound(bounds["min_val"], -math.inf),
                                 _range_bound(bounds["max_val"], math.inf))
    return _ExportGraph(raws, inputs, ranges)


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
    for (name, sizes), (shape, _dtype) in zip(inputs, input_shapes):
        if len(shape) != len(sizes):
            raise UserError(f"input {name} has {len(sizes)} dims; --input-shape gives {len(shape)}")
        for i, (size, want) in enumerate(zip(sizes, shape)):
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
        total = math.prod(len(v) for v in lists)
        if total > MAX_COMBINATIONS:
            raise UserError(f"the dynamic dims' values (--hint or defaults) make {total} "
                            f"combinations ({' x '.join(str(len(v)) for v in lists)}); at most "
                            f"{MAX_COMBINATIONS} (dims given the same number of values are "
                            "paired instead)")
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


def _profile_run(module: Any, inputs: list[Any]) -> tuple[list[Any], list[str]]:
    """Run once under the profiler: the outermost matmul-like calls, and the names of the
    fused ops (_FUSED_MATMUL_OPS) that ran."""
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
    fused: list[str] = []

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
        if name in _FUSED_MATMUL_OPS and name not in fused:
            fused.append(name)
        stack.extend(reversed(events_sorted(event.children)))
    return found, fused


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


def _from_torchscript(path: Path, input_shapes) -> tuple[list[Any], list[str]]:
    """The matmul-like calls of one run (and the fused ops that ran); the caller has
    checked that the file is trusted (check_model)."""
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
                allow_tf32=bool(allow_tf32 and raw.dtype == "float32"), device=device,
                scale=raw.scale, out_dtype=raw.out_dtype, fast_accum=raw.fast_accum)
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
