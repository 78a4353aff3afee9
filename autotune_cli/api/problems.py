"""The tensors of a call -> the GemmProblem they pose, and the key a call's plan is kept under.

Reads only shapes, strides, dtypes and devices (the tensors may be torch.compile's fakes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UserError
from ..problem import FLOAT_DTYPES, INDEX_LIMIT, GemmProblem, make_problem, matmul_folds

UNTUNED_DTYPE = "autotune tunes float16, bfloat16 and float32"  # the start of a call's reason


def plain_parameter(t) -> bool:
    """A Parameter holding a plain tensor: the only weight a compile moves to group linears
    (routing/groups.py); a tensor subclass (a sharded or quantized weight) keeps its storage
    its own way, and a buffer or a computed weight is left where it is."""
    import torch

    return type(t) is torch.nn.Parameter and type(t.data) is torch.Tensor


class TorchDecides(Exception):
    """The tensors do not make a valid call: let torch raise its own error."""


@dataclass(frozen=True)
class Adapt:
    """How a call's tensors become the kernel's operands."""

    copy_a: bool = False
    copy_b: bool = False
    bias_row: bool = False  # a [1, n] bias passed as its [n] row


ALIGN_BYTES = 16  # what TMA needs of a base and a row stride (the persistent template)


def folds_as_torch(x, weight) -> bool:
    """Whether torch's matmul of an N-D `x` by a 2-D `weight` (a linear without a fused bias
    among them) runs one mm of x's rows, as autotune poses it (problem.matmul_folds)."""
    if x.dim() <= 2:
        return True
    sizes, strides = x.shape, x.stride()
    rows_fold = all(strides[i] == strides[i + 1] * sizes[i + 1] for i in range(x.dim() - 2))
    return matmul_folds(bool(weight.requires_grad), rows_fold)


def layout(tensor) -> tuple[str, bool]:
    """(letter, needs a contiguous copy): 'n' when the last dim is contiguous, 't' when the
    one before it is (the transpose of a contiguous matrix), where the other stride is the
    dense one, or past it and 16-byte aligned (padded rows, as TMA takes them); anything
    else is copied (overlapping or broadcast rows, a misaligned pitch)."""
    strides, shape, size = tensor.stride(), tensor.shape, tensor.element_size()

    def takes(stride: int, dense: int, count: int) -> bool:
        return count == 1 or stride == dense or (stride > dense and stride * size % ALIGN_BYTES == 0)

    if strides[-1] == 1 and takes(strides[-2], shape[-1], shape[-2]):
        return "n", False
    if strides[-2] == 1 and takes(strides[-1], shape[-2], shape[-1]):
        return "t", False
    return "n", True


def matrix_span(t) -> int:
    """How many elements one matrix of `t` spans (its last two dims; a 1-d tensor whole),
    from its first element to its last: a pitched row's padding counts."""
    return 1 + sum((size - 1) * abs(stride) for size, stride in zip(t.shape[-2:], t.stride()[-2:]))


def wide_view(problem: GemmProblem, how: Adapt, a, b, bias) -> str:
    """Which operand a winner's kernel cannot index ("" where none): one whose matrix spans
    INDEX_LIMIT elements or more, more than the problem's dense one (a row pitch wider than
    its rows, which `layout` passes uncopied). A kernel sizes its offsets from the problem
    (GemmProblem.wide_offsets) and was verified on dense operands: such a view's offsets
    would wrap. One matrix counts (every kernel's batch offset is 64-bit); an operand the
    call copies (`how`) is dense."""
    m, n, k = problem.m, problem.n, problem.k
    views = (("A", None if how.copy_a else a, m * k), ("B", None if how.copy_b else b, k * n),
             ("the bias", bias, n if problem.bias == "n" else m * n))
    for name, t, dense in views:
        span = 0 if t is None else matrix_span(t)
        if span >= INDEX_LIMIT and span > dense:
            return f"{name} spans {span:,} elements (strides {tuple(t.stride())}), past 32-bit offsets"
    return ""


TF32_AT = 8  # where call_key keeps whether TF32 was allowed


def call_key(float32, allow_tf32, a, b) -> tuple:
    """What a call's plan depends on, read cheaply: shapes, strides, dtypes, devices (as
    index and whether CUDA: a torch.device hashes slowly), for float32 whether TF32 is
    allowed (at TF32_AT), and the layouts and neg bits (`torch_only`: a sparse tensor or a
    negated view has a dense one's shape and strides, and would share its plan)."""
    dtype = a.dtype
    try:
        return (a.shape, a.stride(), b.shape, b.stride(), dtype, b.dtype, a.get_device(), b.get_device(),
                dtype is float32 and allow_tf32(), a.is_cuda, b.is_cuda, a.layout, b.layout,
                a.is_neg() or b.is_neg())
    except RuntimeError:  # no strides (a compressed sparse layout): a key of its own, planned as torch's op
        return (a.shape, None, b.shape, None, dtype, b.dtype, a.get_device(), b.get_device(), False,
                a.layout, b.layout)


def bias_key(bias) -> tuple:
    try:
        return (bias.shape, bias.stride(), bias.dtype, bias.get_device(), bias.is_cuda, bias.layout, bias.is_neg())
    except RuntimeError:  # no strides, as in call_key
        return (bias.shape, None, bias.dtype, bias.get_device(), bias.layout)


def torch_only(*tensors) -> str:
    """Why a call with these tensors (None: absent) runs torch's op whatever is cached, or
    "": a layout other than strided (a sparse tensor's values are not where strides point)
    or a neg or conj bit (a lazy view whose memory holds the values negated or conjugated:
    torch's ops resolve it, a kernel would read the raw memory). A conj bit comes only with
    a complex dtype, in the key: call_key folds in the layouts and the neg bit alone."""
    import torch

    for t in tensors:
        if t is None:
            continue
        if t.layout is not torch.strided:
            return f"an operand of layout {t.layout} is not tuned (dense, strided tensors only)"
        if t.is_neg() or t.is_conj():
            return ("a view with its neg or conj bit set (torch._neg_view, .imag of a conjugate) is not tuned: "
                    "its memory holds other values than it reads as")
    return ""


def problem_of(op: str, a, b, bias, *, tf32: bool) -> tuple[GemmProblem, Adapt]:
    """The GemmProblem these tensors pose, and how to adapt them to it (TorchDecides: not a
    valid call; UserError: a GEMM autotune does not tune)."""
    why = torch_only(a, b, bias)
    if why:
        raise UserError(why)
    dims = 3 if op == "bmm" else 2
    if a.dim() != dims or b.dim() != dims:
        raise TorchDecides(f"{op} needs {dims}-d operands")
    if a.shape[-1] != b.shape[-2] or (op == "bmm" and a.shape[0] != b.shape[0]):
        raise TorchDecides("the operands' shapes do not match")
    if a.dtype != b.dtype or a.device != b.device:
        raise TorchDecides("the operands differ in dtype or device")
    dtype = str(a.dtype).removeprefix("torch.")
    if dtype not in FLOAT_DTYPES:
        raise UserError(f"{UNTUNED_DTYPE}, not {a.dtype}")
    if a.device.type not in ("cuda", "cpu"):
        raise UserError(f"autotune runs on cuda or cpu, not {a.device.type}")
    m, k = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    if 0 in (m, n, k) or (op == "bmm" and a.shape[0] == 0):
        raise TorchDecides("an empty matmul (a size of 0)")
    bias_kind, bias_row = None, False
    if op == "addmm":
        if bias.dtype != a.dtype or bias.device != a.device:
            raise TorchDecides("the bias differs in dtype or device")
        if tuple(bias.shape) == (n,):
            bias_kind = "n"
        elif tuple(bias.shape) == (1, n):
            bias_kind, bias_row = "n", True
        elif tuple(bias.shape) == (m, n):
            bias_kind = "mn"
        else:
            raise UserError(f"a bias of shape {list(bias.shape)} is not tuned (only [n] and [m, n])")
    layout_a, copy_a = layout(a)
    layout_b, copy_b = layout(b)
    device = a.device.type
    problem = make_problem(
        m=m, n=n, k=k, batch=a.shape[0] if op == "bmm" else None, dtype=dtype,
        layout=layout_a + layout_b, bias=bias_kind, op=op, device=device,
        allow_tf32=bool(tf32) and dtype == "float32" and device == "cuda",
    )
    return problem, Adapt(copy_a, copy_b, bias_row)


def scaled_problem_of(a, b, scale_a, scale_b, bias, out_dtype, fast_accum: bool) -> GemmProblem:
    """The scaled_mm problem a torch._scaled_mm call poses (UserError: one not tuned)."""
    from ..problem import FP8_DTYPES, FP8_LAYOUT, scale_blocks

    why = torch_only(a, b, scale_a, scale_b, bias)
    if why:
        raise UserError(why)
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise TorchDecides("the operands' shapes do not match")
    if a.device != b.device or scale_a.device != a.device or scale_b.device != a.device:
        raise TorchDecides("the operands are on different devices")
    name = str(a.dtype).removeprefix("torch.")
    if name not in FP8_DTYPES or b.dtype != a.dtype:
        raise UserError(f"autotune tunes scaled GEMMs of {', '.join(FP8_DTYPES)}, not {a.dtype} x {b.dtype}")
    if out_dtype is None:
        raise UserError("a float8 output (out_dtype None) is not tuned")
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    if scale_a.dtype != scale_b.dtype or str(scale_a.dtype) != "torch.float32":
        raise UserError(f"scales of {scale_a.dtype} are not tuned (float32 only)")
    if scale_a.numel() == 1 and scale_b.numel() == 1:
        scale = "tensor"
    elif tuple(scale_a.shape) == (m, 1) and tuple(scale_b.shape) == (1, n):
        scale = "row"
    elif tuple(scale_a.shape) == (m, scale_blocks(k)) and tuple(scale_b.shape) == (scale_blocks(k), scale_blocks(n)):
        scale = "block"  # 1x128 blocks of A, 128x128 of B
    else:
        raise UserError(f"scales of shapes {list(scale_a.shape)} and {list(scale_b.shape)} are not tuned "
                        "(per tensor, [m, 1] and [1, n], or [m, k/128] and [k/128, n/128])")
    (layout_a, copy_a), (layout_b, copy_b) = layout(a), layout(b)
    if copy_a or copy_b or layout_a + layout_b != FP8_LAYOUT:
        raise UserError(f"float8 operands of layout {layout_a}{layout_b} are not tuned "
                        "(A row-major, B column-major only)")
    if bias is not None and bias.device != a.device:
        raise TorchDecides("the bias is on another device")
    if bias is not None and tuple(bias.shape) != (n,):
        raise UserError(f"a bias of shape {list(bias.shape)} is not tuned (a contiguous [n])")
    if bias is not None and bias.stride(0) != 1:  # the kernels read the bias as one contiguous row
        raise UserError(f"a bias [n] with stride {bias.stride(0)} is not tuned (a contiguous [n], stride 1)")
    if bias is not None and bias.dtype != out_dtype:
        raise TorchDecides("the bias's dtype is not the output's")
    return make_problem(m=m, n=n, k=k, dtype=name, layout=FP8_LAYOUT, bias="n" if bias is not None else None,
                        device=a.device.type, scale=scale, out_dtype=str(out_dtype).removeprefix("torch."),
                        fast_accum=fast_accum)


# The problem's checks name the command's flags (--m, --batch); a caller of the API gave
# keywords or a dict: its errors name those (m, batch), as the caller wrote them.
_FLAG = re.compile(r"--(m|n|k|batch|dtype|layout|bias-shape|bias|allow-tf32|scale|out-dtype|fast-accum)\b(?!-)")


def as_problem(problem: GemmProblem | dict | None, fields: dict) -> GemmProblem:
    """A GemmProblem from a problem, its dict, or its fields as keywords (device: cuda where
    a GPU is present, else cpu); a bad field is a UserError that names it as given (m, not
    the command's --m)."""
    try:
        return _as_problem(problem, fields)
    except UserError as exc:
        raise UserError(_FLAG.sub(lambda m: m.group(1).replace("-", "_"), str(exc))) from None


def _as_problem(problem: GemmProblem | dict | None, fields: dict) -> GemmProblem:
    if isinstance(problem, GemmProblem):
        if fields:
            raise TypeError("give a problem or its fields, not both")
        return problem
    if isinstance(problem, dict):
        if fields:
            raise TypeError("give a problem or its fields, not both")
        return GemmProblem.from_dict(problem)
    if problem is not None:
        raise TypeError(f"expected a GemmProblem or a dict, got {type(problem).__name__}")
    fields = dict(fields)
    # bias as the flags and a --from list give it: True (with bias_shape, default "n") or False
    shape = fields.pop("bias_shape", None)
    if shape is not None and fields.get("bias") is not True:
        raise TypeError("bias_shape needs bias=True")
    if shape is not None and shape not in ("n", "mn"):
        raise TypeError(f"bias_shape must be 'n' or 'mn', got {shape!r}")
    if fields.get("bias") is True:
        fields["bias"] = shape or "n"
    elif fields.get("bias") is False:
        fields["bias"] = None
    if fields.get("device") is None:
        from ..hardware.device import cuda_available

        fields["device"] = "cuda" if cuda_available() else "cpu"
    return make_problem(**fields)


def tune_hint(op: str, problem: GemmProblem) -> str:
    """The `autotune mm` command that tunes `problem`."""
    return (f"autotune mm --m {problem.m} --n {problem.n} --k {problem.k} --dtype {problem.dtype} "
            f"--layout {problem.layout}" + (f" --batch {problem.b}" if op == "bmm" else "")
            + (f" --bias --bias-shape {problem.bias}" if op == "addmm" else "")
            + (f" --scale {problem.scale} --out-dtype {problem.out_dtype}" if op == "scaled_mm" else "")
            + (" --fast-accum" if problem.fast_accum else "")
            + (" --bias" if op == "scaled_mm" and problem.bias else "")
            + (" --allow-tf32" if problem.allow_tf32 else "") + f" --device {problem.device}")
