"""model/classify.py: which calls are matrix multiplies, and the GEMM each one is.

An operand is known by its sizes, strides and dtype (`Operand`: sizes may be sympy
expressions of a program's dynamic dims); `classify_call` maps one matmul-like call to a
`MatmulCall` (a GemmProblem's fields, dims still possibly symbolic). Both formats, the
exported program's graph and a TorchScript run, go through it.

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
                            with a bias, for x 2-D or contiguous (3-D, or a 1-D bias):
                            addmm, bias "n"; otherwise matmul(x, W.T) below (the bias
                            added apart), as at::linear runs it
  matmul(x, y)              as at::matmul dispatches it:
                            2-D @ 2-D -> mm;
                            N-D @ 2-D and 2-D @ N-D fold the N-D operand's batch into
                            one mm when the 2-D operand requires grad (a Parameter, or a
                            view of one, does even under no_grad), or, for N-D @ 2-D,
                            when x's rows fold without a copy: N-D @ 2-D -> mm with
                            M = prod(leading dims) (x copied first if its rows don't
                            fold); 2-D @ N-D -> the transposed problem, mm with
                            M = prod(batch) * N, B = the 2-D operand transposed;
                            otherwise, and for N-D @ N-D -> bmm with b = the product of
                            the broadcast batch dims;
                            any 1-D operand -> a matrix-vector product (aten runs mv,
                            dot, or a GEMM with one dim of 1): not tuned, counted.
  linear(v, W) with v 1-D   a matrix-vector product, as above.
  gru, lstm, rnn_tanh,      fused recurrent ops, and an int8 matmul: not tuned, counted
  rnn_relu, _int_mm         (UNTUNED_KINDS).
  einsum(eq, a, b, ...)     read by einsum.py: the bmm calls at::einsum makes, each
                            mapped as bmm above.

An operand's `requires_grad` (None where the reader cannot know it) decides the fold;
None counts as True, as for a saved model's weights.

Layout: an operand is "n" if its last-dim stride is 1, "t" if its dim -2 stride is 1 (it
is the transpose of a contiguous matrix), else "n" (aten copies it first). Where aten
must copy an operand to flatten or merge batch dims (a reshape that is not a view), the
copy is contiguous and the operand counts as "n".

dtype: float16, bfloat16 and float32 matmuls are kept; matmuls in other dtypes (integers,
float64) are skipped, and if that leaves none it is a UserError.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Sequence

from ..problem import (FLOAT_DTYPES, FP8_LAYOUT, OUT_DTYPES, SCALE_BLOCK, linear_fuses_bias, matmul_folds,
                       scale_blocks)

# aten op name (schema name) -> how to read its operands, and its number of arguments
MATMUL_OPS = {
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

# The dtypes a matmul (other than scaled_mm) is tuned in: the problem dtypes less float8.
_GEMM_DTYPES = FLOAT_DTYPES

VECTOR_PRODUCT = "matrix-vector product"

# Ops that do much of a model's arithmetic but are no GEMM autotune tunes, by kind: the
# not-tuned note counts them, so that a Linear's share of the GEMMs is not read as its
# share of the model. Attention kernels and recurrent layers are fused ops (cuDNN runs
# them whole) and are not looked into; an int8 matmul is in a dtype no template takes;
# products with a vector, outer products, addbmm and bilinear are none `record` lists either.
UNTUNED_KINDS = {
    "convolution": ("convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                    "conv_transpose2d", "conv_transpose3d", "cudnn_convolution", "mkldnn_convolution"),
    "attention op": ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
                     "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
                     "_scaled_dot_product_flash_attention_for_cpu", "_flash_attention_forward",
                     "_efficient_attention_forward"),
    **{f"recurrent op (aten.{op})": (op,) for op in ("gru", "lstm", "rnn_tanh", "rnn_relu")},
    "matmul in int8 (torch._int_mm)": ("_int_mm",),
    VECTOR_PRODUCT: ("mv", "dot", "vdot", "addmv"),
    "outer product": ("addr", "outer", "ger"),
    "sum of batched products (aten.addbmm)": ("addbmm",),
    "bilinear layer (aten.bilinear)": ("bilinear", "_trilinear"),
}
UNTUNED_OPS = {op: kind for kind, ops in UNTUNED_KINDS.items() for op in ops}
EINSUM_NO_MATMUL = "einsum without a matmul"  # an elementwise or outer product
EINSUM_UNREAD = "einsum whose matmuls are not read"  # see einsum.py: a diagonal, a sum within one operand


@dataclass(frozen=True)
class Operand:
    """What we know of one operand: sizes and strides (sympy expressions) and dtype name."""

    sizes: tuple[Any, ...]
    strides: tuple[Any, ...]
    dtype: str  # torch dtype name without the "torch." prefix
    requires_grad: bool | None = None  # None: not known (counts as True, see the module)


@dataclass(frozen=True)
class Untuned:
    """A call whose work is no GEMM autotune tunes (`kind`, e.g. VECTOR_PRODUCT): counted
    in the not-tuned note, never listed."""

    kind: str


@dataclass(frozen=True)
class MatmulCall:
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
    # a linear's input by its name in the program (find.one_gemm_groups): where the call
    # reads from, not what it is, so not compared
    input: str | None = field(default=None, compare=False)
    weight: str | None = field(default=None, compare=False)  # a linear's Parameter, by its name (None: a buffer)
    times: Any = 1  # runs per call of the model: a map or scan body's trip count (maybe symbolic)


def sym(value: Any) -> Any:
    import sympy

    if isinstance(value, bool):
        return sympy.Integer(int(value))
    if isinstance(value, int):
        return sympy.Integer(value)
    node = getattr(value, "node", None)  # torch.SymInt
    if node is not None and hasattr(node, "expr"):
        return sympy.sympify(node.expr)
    return sympy.sympify(value)


def sym_eq(a: Any, b: Any) -> bool:
    import sympy

    try:
        return bool(sympy.expand(a - b) == 0)
    except TypeError:
        return False


def sym_prod(values: Iterable[Any]) -> Any:
    import sympy

    out = sympy.Integer(1)
    for v in values:
        out = out * v
    return out


def _mat_layout(t: Operand) -> str:
    """'n' if the last-dim stride is 1, 't' if dim -2's is (a transposed contiguous
    matrix), else 'n' (aten copies such an operand to a contiguous one)."""
    if sym_eq(t.strides[-1], 1):
        return "n"
    if sym_eq(t.strides[-2], 1):
        return "t"
    return "n"


def _rows_foldable(t: Operand) -> bool:
    """Whether t[..., K] views as [prod(leading), K] without a copy (at::matmul's test)."""
    return all(sym_eq(t.strides[i], t.strides[i + 1] * t.sizes[i + 1])
               for i in range(len(t.sizes) - 2))


def _contiguous(t: Operand) -> bool:
    """Whether t is row-major contiguous (the strides of dims of size 1 do not count)."""
    step = sym(1)
    for size, stride in zip(reversed(t.sizes), reversed(t.strides)):
        if not sym_eq(size, 1) and not sym_eq(stride, step):
            return False
        step = step * size
    return True


def _flat_layout(t: Operand) -> str:
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
        out.append(y if sym_eq(x, 1) else x)
    return tuple(out)


def _batched_layout(t: Operand, batch: Sequence[Any]) -> str:
    """Layout of t once expanded to batch + [r, c] and reshaped to [prod(batch), r, c]."""
    own = len(t.sizes) - 2
    pad = len(batch) - own
    sizes: list[Any] = []
    strides: list[Any] = []
    for i, full in enumerate(batch):
        j = i - pad
        if j < 0 or (sym_eq(t.sizes[j], 1) and not sym_eq(full, 1)):
            sizes.append(full)
            strides.append(0)  # expanded
        else:
            sizes.append(t.sizes[j])
            strides.append(t.strides[j])
    kept = [(s, st) for s, st in zip(sizes, strides) if not sym_eq(s, 1)]
    for (_, st0), (s1, st1) in zip(kept, kept[1:]):
        if not sym_eq(st0, st1 * s1):
            return "n"  # the reshape copies
    return _mat_layout(t)


def _bias_kind(bias: Operand | None) -> str:
    if bias is None or len(bias.sizes) < 2 or sym_eq(bias.sizes[-2], 1):
        return "n"
    return "mn"


def _classify_scaled(args: Sequence[Any], out: Operand | None, source: str,
                     fast_accum: bool) -> MatmulCall | str:
    """A torch._scaled_mm call (self, mat2, scale_a, scale_b, bias, ...) whose output is
    `out`: a MatmulCall, or a str saying what is not tuned (other float8 kinds, scales of
    other shapes, an output dtype or a layout the problem does not take)."""
    a, b, scale_a, scale_b, bias = (list(args) + [None] * 5)[:5]
    if not all(isinstance(t, Operand) and len(t.sizes) == 2 for t in (a, b)) \
            or not all(isinstance(t, Operand) for t in (scale_a, scale_b)):
        return "float8 (operands not read)"
    if a.dtype != "float8_e4m3fn" or b.dtype != "float8_e4m3fn":
        return f"{a.dtype} x {b.dtype}"
    m, k, n = a.sizes[0], a.sizes[1], b.sizes[1]
    if sym_eq(sym_prod(scale_a.sizes), 1) and sym_eq(sym_prod(scale_b.sizes), 1):
        scale = "tensor"
    elif (len(scale_a.sizes) == 2 and sym_eq(scale_a.sizes[0], m) and sym_eq(scale_a.sizes[1], 1)
          and len(scale_b.sizes) == 2 and sym_eq(scale_b.sizes[0], 1)
          and sym_eq(scale_b.sizes[1], n)):
        scale = "row"
    elif (len(scale_a.sizes) == 2 and len(scale_b.sizes) == 2 and sym_eq(scale_a.sizes[0], m)
          and sym_eq(scale_a.sizes[1], scale_blocks(k)) and sym_eq(scale_b.sizes[0], scale_blocks(k))
          and sym_eq(scale_b.sizes[1], scale_blocks(n))):
        scale = "block"  # 1x128 blocks of A, 128x128 of B
        if fast_accum:
            return "float8_e4m3fn with blockwise scales and use_fast_accum"
        if any(x.is_number and int(x) % SCALE_BLOCK for x in (sym(k), sym(n))):
            return f"float8_e4m3fn with blockwise scales, K or N not a multiple of {SCALE_BLOCK}"
    else:
        shapes = [f"[{', '.join(map(str, t.sizes))}]" for t in (scale_a, scale_b)]
        return f"float8_e4m3fn with scales of shapes {shapes[0]} and {shapes[1]}"
    if out is None or out.dtype not in OUT_DTYPES:
        return f"float8_e4m3fn to {out.dtype if out else 'an unknown dtype'}"
    layout = _mat_layout(a) + _mat_layout(b)
    if layout != FP8_LAYOUT:
        return f"float8_e4m3fn in layout {layout}"
    return MatmulCall("scaled_mm", m, n, k, sym(1), a.dtype, layout,
                      None if bias is None else "n", source,
                      scale=scale, out_dtype=out.dtype, fast_accum=fast_accum)


def classify_call(name: str, args: Sequence[Any], out: Operand | None = None,
                  fast_accum: bool = False) -> MatmulCall | Untuned | None | str:
    """Map one matmul-like call to a MatmulCall. Returns Untuned for a matrix-vector product,
    the dtype name (str) when the dtype is not one we tune, None when the operands are not
    read. `out`: the call's output, where known (a scaled_mm's output dtype is its own);
    `fast_accum`: a scaled_mm's use_fast_accum."""
    kind = MATMUL_OPS[name][0]
    source = name.replace("::", ".")
    if kind == "scaled_mm":
        return _classify_scaled(args, out, source, fast_accum)

    def arg(i: int) -> Operand | None:
        value = args[i] if i < len(args) else None
        return value if isinstance(value, Operand) else None

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
    dtype = a.dtype
    one = sym(1)

    if kind == "mm":
        if len(a.sizes) != 2 or len(b.sizes) != 2:
            return None
        return MatmulCall("mm", a.sizes[0], b.sizes[1], a.sizes[1], one, dtype,
                          _mat_layout(a) + _mat_layout(b), None, source)
    if kind == "addmm":
        if len(a.sizes) != 2 or len(b.sizes) != 2:
            return None
        return MatmulCall("addmm", a.sizes[0], b.sizes[1], a.sizes[1], one, dtype,
                          _mat_layout(a) + _mat_layout(b), _bias_kind(bias), source)
    if kind in ("bmm", "baddbmm"):
        if len(a.sizes) != 3 or len(b.sizes) != 3:
            return None
        return MatmulCall("bmm", a.sizes[1], b.sizes[2], a.sizes[2], a.sizes[0], dtype,
                          _mat_layout(a) + _mat_layout(b), None, source)
    if kind == "linear":
        if len(b.sizes) != 2:
            return None
        if len(a.sizes) < 2:
            return Untuned(VECTOR_PRODUCT)
        w_t = _transposed(b)  # B = W.T, a view: it requires grad as W does
        if bias is not None and linear_fuses_bias(len(a.sizes), _contiguous(a), bias.sizes):
            return MatmulCall("addmm", sym_prod(a.sizes[:-1]), b.sizes[0], a.sizes[-1], one, dtype,
                              _flat_layout(a) + _mat_layout(w_t), "n", source)
        return _classify_matmul(a, w_t, dtype, source)

    return _classify_matmul(a, b, dtype, source)


def _classify_matmul(a: Operand, b: Operand, dtype: str, source: str) -> MatmulCall | Untuned:
    """aten.matmul as at::matmul dispatches it (see the module)."""
    one = sym(1)
    da, db = len(a.sizes), len(b.sizes)
    if da < 2 or db < 2:
        return Untuned(VECTOR_PRODUCT)
    if da == 2 and db == 2:
        return MatmulCall("mm", a.sizes[0], b.sizes[1], a.sizes[1], one, dtype,
                          _mat_layout(a) + _mat_layout(b), None, source)
    if da >= 3 and db == 2 and matmul_folds(b.requires_grad is not False, _rows_foldable(a)):
        return MatmulCall("mm", sym_prod(a.sizes[:-1]), b.sizes[1], a.sizes[-1], one, dtype,
                          _flat_layout(a) + _mat_layout(b), None, source)
    if da == 2 and db >= 3 and a.requires_grad is not False:
        # b.mT [..., N, K] folded to [prod(batch) * N, K], times a.t(): C.mT of the product
        bt = _transposed(b)
        return MatmulCall("mm", sym_prod(bt.sizes[:-1]), a.sizes[0], a.sizes[1], one, dtype,
                          _flat_layout(bt) + _mat_layout(_transposed(a)), None, source)
    batch = _broadcast(a.sizes[:-2], b.sizes[:-2])
    layout = _batched_layout(a, batch) + _batched_layout(b, batch)
    return MatmulCall("bmm", a.sizes[-2], b.sizes[-1], a.sizes[-1], sym_prod(batch), dtype,
                      layout, None, source)


def _transposed(t: Operand) -> Operand:
    """t.mT: its last two dims swapped."""
    order = list(range(len(t.sizes) - 2)) + [len(t.sizes) - 1, len(t.sizes) - 2]
    return replace(t, sizes=tuple(t.sizes[i] for i in order), strides=tuple(t.strides[i] for i in order))
