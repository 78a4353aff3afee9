"""GemmProblem: the one description of a matrix multiply to tune.

A problem is a frozen, hashable value. It is built from CLI flags or from a model's graph,
validated once, and then passed down unchanged. `key()` is a stable string used in the
cache key; `to_dict`/`from_dict` round-trip through JSON.

Semantics (matching aten):
  mm     C[m, n]    = A[m, k] @ B[k, n]
  addmm  C[m, n]    = bias + A[m, k] @ B[k, n]      (bias broadcast from [n] or [m, n])
  bmm    C[b, m, n] = A[b, m, k] @ B[b, k, n]
  scaled_mm  C[m, n] = (A[m, k] @ B[k, n]) * scale_a * scale_b (+ bias[n]), as torch._scaled_mm:
         A and B in float8_e4m3fn, fp32 scales per tensor (`scale` "tensor": two scalars),
         per row of A and column of B ("row": [m, 1] and [1, n]), or per block ("block":
         A's 1x128 blocks along K, [m, k/128], and B's 128x128 blocks, [k/128, n/128], as
         DeepSeek-style models quantize; K and N multiples of 128); C in `out_dtype`.
         `fast_accum`: torch's use_fast_accum (the FP8 matrix units' own accumulation over
         the whole K, not promoted to fp32 every K step).

`layout` is two letters, one per operand: `n` means row-major (contiguous in the last dim),
`t` means the operand is stored transposed (column-major), like BLAS's N/T flags.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, replace
from typing import Any

from .errors import UserError

OPS = ("mm", "addmm", "bmm", "scaled_mm")
# The dtype names: this module is their one home (the model readers, the API, the export and
# the templates' torch dtypes all take them from here). A name is torch's, without "torch.".
FLOAT_DTYPES = ("float16", "bfloat16", "float32")  # what mm, addmm and bmm take
FP8_DTYPES = ("float8_e4m3fn",)
DTYPES = FLOAT_DTYPES + FP8_DTYPES
LAYOUTS = ("nn", "nt", "tn", "tt")
DEVICES = ("cuda", "cpu")
BIAS_SHAPES = ("n", "mn")
# scaled_mm: the scale kinds served, the output dtypes, and the one layout the FP8 matrix
# units (cuBLASLt, and torch._scaled_mm on CUDA) take: A row-major, B column-major.
SCALES = ("tensor", "row", "block")
EPILOGUE_SCALES = ("tensor", "row")  # one factor per output element: applied after the K loop
SCALE_ALIASES = {"tensorwise": "tensor", "rowwise": "row", "blockwise": "block"}
SCALE_BLOCK = 128  # a "block" scale covers 1x128 of A and 128x128 of B
OUT_DTYPES = ("bfloat16", "float16", "float32")
FP8_LAYOUT = "nt"
FP8_MAX = {"float8_e4m3fn": 448.0}  # the largest finite value: where quantizing scales to


def scale_blocks(size):
    """How many blocks of SCALE_BLOCK cover `size` (an int, or a sympy size of a model's)."""
    return (size + SCALE_BLOCK - 1) // SCALE_BLOCK


DTYPE_ALIASES = {
    "float16": "float16", "fp16": "float16", "half": "float16", "f16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float32": "float32", "fp32": "float32", "float": "float32", "f32": "float32",
    "float8_e4m3fn": "float8_e4m3fn", "fp8": "float8_e4m3fn", "e4m3": "float8_e4m3fn",
    "fp8_e4m3": "float8_e4m3fn", "float8": "float8_e4m3fn",
}
DTYPE_SIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float8_e4m3fn": 1}
# Fields only scaled_mm has, with their unset values: left out of `to_dict` when unset, so
# that every other problem's dict (and the cache documents holding it) reads as before.
SCALED_FIELDS = {"scale": None, "out_dtype": None, "fast_accum": False}

# A problem whose operands would exceed this many bytes is refused before any allocation.
MAX_DIM = 2**31 - 1
# The first element offset a 32-bit index cannot hold: a kernel's offsets into a matrix that
# spans this many elements need 64 bits (GemmProblem.wide_offsets, api/problems.wide_view).
INDEX_LIMIT = 2**31
# A product over fewer terms than this is an outer product, pointwise work and not a GEMM
# (the rotary embedding's [64, 1] x [1, T]): the compiler fuses it with its neighbours, and a
# GEMM kernel would only add a launch. autotune_cli.compile, `autotune model` and the recorder
# leave it alone.
MIN_GEMM_K = 2


# torch's fused kernels whose matmuls run inside them, out of autotune's reach (the inference
# fast path of nn.MultiheadAttention and nn.TransformerEncoderLayer): met, and named as such.
FUSED_OPS = ("_native_multi_head_attention", "_transformer_encoder_layer_fwd")


def linear_fuses_bias(x_dims: int, x_contiguous: bool, bias_sizes) -> bool:
    """Whether at::linear runs x @ W.T + bias as one addmm: x 2-D, or contiguous with a bias
    of one dim or more and one size other than 1 at most ([n], [1, n]: torch squeezes the
    bias to decide; a 0-d bias is added after). Otherwise it runs the product (an mm of x
    folded) and adds the bias after; autotune poses that call's problem as torch runs it,
    wherever it reads a linear."""
    return x_dims == 2 or (x_contiguous and len(bias_sizes) >= 1
                           and sum(str(size) != "1" for size in bias_sizes) <= 1)


def matmul_folds(weight_requires_grad: bool, rows_fold: bool) -> bool:
    """Whether at::matmul runs an N-D x (N >= 3) times a 2-D weight as one mm of x's rows
    (x copied first where its rows do not fold as a view): where the weight requires grad
    (a Parameter, even under no_grad), or x's leading dims fold without a copy; otherwise
    it runs a bmm over x's batch, the weight expanded. Linears without a fused bias run so."""
    return weight_requires_grad or rows_fold


def normalize_dtype(name: str) -> str:
    key = str(name).strip().lower().removeprefix("torch.")
    if key not in DTYPE_ALIASES:
        raise UserError(f"unsupported dtype {name!r}: choose one of {', '.join(DTYPES)}")
    return DTYPE_ALIASES[key]


@dataclass(frozen=True, order=True)
class GemmProblem:
    op: str
    m: int
    n: int
    k: int
    b: int = 1
    dtype: str = "float16"
    layout: str = "nn"
    bias: str | None = None  # addmm only: "n" (a row vector, as nn.Linear) or "mn"
    allow_tf32: bool = False  # float32 only: whether the matrix units may round to tf32
    device: str = "cuda"
    scale: str | None = None  # scaled_mm only: "tensor", "row" or "block"
    out_dtype: str | None = None  # scaled_mm only: the output's dtype (bfloat16 by default)
    fast_accum: bool = False  # scaled_mm only: torch._scaled_mm's use_fast_accum

    def __post_init__(self) -> None:
        self.validate()

    # -- validation -----------------------------------------------------------------------
    def validate(self) -> None:
        if not isinstance(self.op, str) or self.op not in OPS:
            raise UserError(f"unknown op {self.op!r}: choose one of {', '.join(OPS)}")
        for name, flag in (("m", "--m"), ("n", "--n"), ("k", "--k"), ("b", "--batch")):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise UserError(f"{flag} must be an integer, got {value!r}")
            if value < 1:
                raise UserError(f"{flag} must be at least 1, got {value}")
            if value > MAX_DIM:
                raise UserError(f"{flag} is {value}, larger than {MAX_DIM}")
        if self.op != "bmm" and self.b != 1:
            raise UserError(f"--batch {self.b} only applies to bmm (op is {self.op})")
        if not isinstance(self.dtype, str) or self.dtype not in DTYPES:
            raise UserError(f"unsupported dtype {self.dtype!r}: choose one of {', '.join(DTYPES)}")
        if not isinstance(self.layout, str) or self.layout not in LAYOUTS:
            raise UserError(f"unknown layout {self.layout!r}: choose one of {', '.join(LAYOUTS)}")
        if not isinstance(self.device, str) or self.device not in DEVICES:
            raise UserError(f"unknown device {self.device!r}: choose one of {', '.join(DEVICES)}")
        if self.op == "scaled_mm":
            self._validate_scaled()
        elif self.dtype in FP8_DTYPES:
            raise UserError(f"{self.dtype} operands need scales: --scale {', '.join(SCALES)}")
        elif self.scale is not None or self.out_dtype is not None or self.fast_accum is not False:
            raise UserError("--scale, --out-dtype and --fast-accum only apply to float8 operands "
                            f"(--dtype {FP8_DTYPES[0]}); the dtype is {self.dtype}")
        elif self.op == "addmm":
            if self.bias not in BIAS_SHAPES:
                raise UserError(f"addmm needs a bias shape, one of {', '.join(BIAS_SHAPES)}")
        elif self.bias is not None:
            raise UserError(f"a bias only applies to addmm (op is {self.op})")
        if not isinstance(self.allow_tf32, bool):
            raise UserError(f"allow_tf32 must be true or false, got {self.allow_tf32!r}")
        if self.allow_tf32 and self.dtype != "float32":
            raise UserError("--allow-tf32 only applies to float32")

    def _validate_scaled(self) -> None:
        if self.dtype not in FP8_DTYPES:
            raise UserError(f"scaled_mm takes float8 operands ({', '.join(FP8_DTYPES)}), not {self.dtype}")
        if self.scale not in SCALES:
            raise UserError(f"--scale must be one of {', '.join(SCALES)}, got {self.scale!r}")
        if self.scale == "block":
            if self.k % SCALE_BLOCK or self.n % SCALE_BLOCK:
                raise UserError(f"blockwise scales (1x{SCALE_BLOCK} blocks of A, {SCALE_BLOCK}x{SCALE_BLOCK} of B) "
                                f"need K and N multiples of {SCALE_BLOCK}, got K={self.k}, N={self.n}")
            if self.fast_accum:
                raise UserError("--fast-accum does not apply to blockwise scales: every "
                                f"{SCALE_BLOCK}-long block of K is summed and scaled apart")
        if self.out_dtype not in OUT_DTYPES:
            raise UserError(f"--out-dtype must be one of {', '.join(OUT_DTYPES)}, got {self.out_dtype!r}")
        if self.layout != FP8_LAYOUT:
            raise UserError(f"float8 GEMMs need A row-major and B column-major: --layout {FP8_LAYOUT} "
                            f"(the only layout accepted), got {self.layout}")
        if self.bias not in (None, "n"):
            raise UserError(f"a float8 GEMM's bias is a row vector [n] (--bias-shape n), got {self.bias}")
        if not isinstance(self.fast_accum, bool):
            raise UserError(f"fast_accum must be true or false, got {self.fast_accum!r}")
        if self.bias and self.out_dtype == "float32":
            raise UserError("torch._scaled_mm takes no bias with a float32 output: "
                            "--out-dtype bfloat16 or float16")

    # -- derived quantities ---------------------------------------------------------------
    @property
    def a_transposed(self) -> bool:
        return self.layout[0] == "t"

    @property
    def b_transposed(self) -> bool:
        return self.layout[1] == "t"

    @property
    def wide_offsets(self) -> bool:
        """Whether one matrix of an operand (or the output) holds INDEX_LIMIT elements or
        more, so that a kernel's offsets into it need 64 bits (triton::mm's WIDE_INDEX). From
        the sizes alone: a call's view that spans more is api/problems.wide_view's."""
        return max(self.m * self.k, self.k * self.n, self.m * self.n) >= INDEX_LIMIT

    @property
    def dtype_size(self) -> int:
        return DTYPE_SIZE[self.dtype]

    @property
    def result_dtype(self) -> str:
        """The output's dtype: the operands' own, or a scaled_mm's `out_dtype`."""
        return self.out_dtype or self.dtype

    # -- precision: the one place each of its meanings is worked out ----------------------
    @property
    def precision(self) -> str:
        """What the result's accuracy is judged by: the output dtype (a scaled_mm's
        quantization error belongs to its inputs), or tf32 where float32 may round to it."""
        return "tf32" if self.allow_tf32 else self.result_dtype

    @property
    def operand_precision(self) -> str:
        """What the matrix units read the operands as, which sets their peak rate: the
        operands' dtype, or tf32 where float32 may round to it."""
        return "tf32" if self.allow_tf32 else self.dtype

    @property
    def fp32_mode(self) -> str | None:
        """A float32 problem's mode: "tf32" (the matrix units may round the inputs) or
        "ieee"; None for other dtypes. In the key, and Triton's tl.dot input_precision."""
        if self.dtype != "float32":
            return None
        return "tf32" if self.allow_tf32 else "ieee"

    @property
    def flops(self) -> int:
        return 2 * self.b * self.m * self.n * self.k

    @property
    def min_bytes(self) -> int:
        """Fewest bytes a kernel must move: each operand read once, the output written once."""
        if self.op == "scaled_mm":
            shape_a, shape_b = self.scale_shapes()
            scales = math.prod(shape_a) + math.prod(shape_b)  # a per-tensor scale's () is 1
            out = DTYPE_SIZE[self.result_dtype]
            return (self.m * self.k + self.k * self.n) * self.dtype_size + 4 * scales \
                + (self.m * self.n + (self.n if self.bias else 0)) * out
        elems = self.b * (self.m * self.k + self.k * self.n + self.m * self.n)
        if self.op == "addmm":
            elems += self.n if self.bias == "n" else self.m * self.n
        return elems * self.dtype_size

    def a_shape(self) -> tuple[int, ...]:
        return ((self.b,) if self.op == "bmm" else ()) + (self.m, self.k)

    def b_shape(self) -> tuple[int, ...]:
        return ((self.b,) if self.op == "bmm" else ()) + (self.k, self.n)

    def out_shape(self) -> tuple[int, ...]:
        return ((self.b,) if self.op == "bmm" else ()) + (self.m, self.n)

    def bias_shape(self) -> tuple[int, ...] | None:
        if self.bias is None:
            return None
        return (self.n,) if self.bias == "n" else (self.m, self.n)

    def scale_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """A scaled_mm's scale_a and scale_b shapes: () each per tensor, [m, 1] and [1, n] per
        row, [m, k/128] and [k/128, n/128] per block (torch._scaled_mm's)."""
        if self.op != "scaled_mm":
            return None
        if self.scale == "tensor":
            return (), ()
        if self.scale == "row":
            return (self.m, 1), (1, self.n)
        return (self.m, scale_blocks(self.k)), (scale_blocks(self.k), scale_blocks(self.n))

    def tflops(self, ms: float) -> float:
        return self.flops / (ms * 1e-3) / 1e12 if ms > 0 else 0.0

    # -- identity -------------------------------------------------------------------------
    def key(self) -> str:
        """A stable, human-readable key: the same problem always gives the same string."""
        parts = [self.op]
        if self.op == "bmm":
            parts.append(f"b{self.b}")
        parts += [f"m{self.m}", f"n{self.n}", f"k{self.k}", self.dtype, self.layout]
        if self.op == "scaled_mm":
            parts += [f"scale_{self.scale}", f"out_{self.out_dtype}"]
            if self.fast_accum:
                parts.append("fast_accum")
        if self.bias:
            parts.append(f"bias_{self.bias}")
        if self.fp32_mode is not None:
            parts.append(self.fp32_mode)
        parts.append(self.device)
        return "/".join(parts)

    def describe(self) -> str:
        dims = f"{self.b}x{self.m}x{self.n}x{self.k}" if self.op == "bmm" else f"{self.m}x{self.n}x{self.k}"
        extra = f" bias[{self.bias}]" if self.bias else ""
        tf = " tf32" if self.allow_tf32 else ""
        scaled = (f" {self.scale}-scaled->{self.out_dtype}" + (" fast-accum" if self.fast_accum else "")
                  if self.op == "scaled_mm" else "")
        return f"{self.op} {dims} {self.dtype}{tf}{scaled} {self.layout}{extra}"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for name, unset in SCALED_FIELDS.items():
            if data[name] is unset:
                del data[name]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GemmProblem":
        if not isinstance(data, dict):
            raise UserError(f"a problem must be a JSON object, got {type(data).__name__}")
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise UserError(f"unknown problem field(s): {', '.join(sorted(map(repr, unknown)))}")
        missing = [f for f in ("op", "m", "n", "k") if f not in data]
        if missing:
            raise UserError(f"a problem lacks {', '.join(missing)}")
        return cls(**data)

    def with_device(self, device: str) -> "GemmProblem":
        return replace(self, device=device)


def make_problem(
    *,
    m: int,
    n: int,
    k: int,
    batch: int | None = None,
    dtype: str = "float16",
    layout: str | None = None,
    bias: str | None = None,
    allow_tf32: bool = False,
    device: str = "cuda",
    op: str | None = None,
    scale: str | None = None,
    out_dtype: str | None = None,
    fast_accum: bool = False,
) -> GemmProblem:
    """Build a problem from CLI-style arguments: a bias makes addmm, a batch makes bmm, float8
    operands make scaled_mm (output bfloat16 unless `out_dtype` says otherwise; layout None:
    nt for float8, else nn)."""
    dtype = normalize_dtype(dtype)
    fp8 = dtype in FP8_DTYPES
    if op is None:
        if bias and batch is not None:
            raise UserError("--bias and --batch cannot be combined (baddbmm is not supported)")
        if fp8 and batch is not None:
            raise UserError("--batch does not apply to float8 operands (torch._scaled_mm is 2-D)")
        op = "scaled_mm" if fp8 else "addmm" if bias else "bmm" if batch is not None else "mm"
    if op == "scaled_mm":
        scale = str(scale).strip().lower() if scale is not None else None
        if scale is None:
            raise UserError(f"{dtype} operands need scales: --scale {', '.join(SCALES)}")
        scale = SCALE_ALIASES.get(scale, scale)
        out_dtype = _out_dtype(out_dtype) if out_dtype is not None else "bfloat16"
    elif out_dtype is not None:
        out_dtype = normalize_dtype(out_dtype)
    if layout is None:
        layout = FP8_LAYOUT if fp8 else "nn"
    return GemmProblem(
        op=op, m=m, n=n, k=k, b=1 if batch is None else batch, dtype=dtype,
        layout=str(layout).lower(), bias=bias, allow_tf32=allow_tf32, device=device,
        scale=scale, out_dtype=out_dtype, fast_accum=fast_accum,
    )


def _out_dtype(name: str) -> str:
    try:
        dtype = normalize_dtype(name)
    except UserError:
        dtype = None
    if dtype not in OUT_DTYPES:
        raise UserError(f"--out-dtype must be one of {', '.join(OUT_DTYPES)}, got {name!r}")
    return dtype


_SHAPE_RE = re.compile(r"^\s*(\d+)\s*[x,]\s*(\d+)\s*[x,]\s*(\d+)\s*$")


def parse_mnk(text: str) -> tuple[int, int, int]:
    """Parse 'MxNxK' (or 'M,N,K') into three ints."""
    match = _SHAPE_RE.match(text)
    if not match or any(len(g) > 12 for g in match.groups()):
        raise UserError(f"cannot parse {text[:40]!r} as MxNxK")
    return tuple(int(g) for g in match.groups())  # type: ignore[return-value]


# What must agree among linears for them to run as one GEMM (one_gemm).
_ONE_GEMM_FIELDS = ("op", "m", "k", "b", "dtype", "layout", "bias", "allow_tf32", "device")


def one_gemm(parts: list) -> Any:
    """The one GEMM that linears reading one input run as (routing/groups.py, and listed for
    it by `autotune model --groups` and `autotune_cli.record`): two or more mm or addmm
    problems of one M, K, dtype, layout, precision and device, each B a weight's transpose
    (layout "?t"), biases all rows or none; their N summed. None where they cannot be one.
    Takes GemmProblems, or any dataclass with those fields (model/classify.MatmulCall, whose
    sizes may be symbolic)."""
    if len(parts) < 2 or any(p is None for p in parts):
        return None
    first = parts[0]
    if first.op not in ("mm", "addmm") or first.layout[1] != "t" or first.bias not in (None, "n") or any(
            getattr(p, name, None) != getattr(first, name, None) for p in parts[1:] for name in _ONE_GEMM_FIELDS):
        return None
    n = first.n
    for part in parts[1:]:
        n = n + part.n
    return replace(first, n=n)
