"""model/export_ops.py: what the exported-program reader knows of the ops it meets.

Each matmul op's schema argument names (a serialized node names its inputs by them), the
argument forms that are never a tensor, the ops whose result is a view of their operand
(it requires grad as that one does), and the ops autocast runs in its lower precision.
"""

from __future__ import annotations

# The schema argument names, in order, of each overload of the ops in MATMUL_OPS (from
# `torch.ops.aten.<op>.<overload>._schema`). A node's operands are placed by these, as
# torch places an fx node's args and kwargs by its schema.
EXPORT_ARG_NAMES: dict[str, dict[str, tuple[str, ...]]] = {
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
NON_TENSOR_ARGS = frozenset({
    "as_none", "as_int", "as_ints", "as_float", "as_floats", "as_bool", "as_bools",
    "as_string", "as_strings", "as_scalar_type", "as_memory_format", "as_layout", "as_device",
    "as_sym_int", "as_sym_ints", "as_sym_float", "as_sym_floats", "as_sym_bool",
    "as_sym_bools", "as_complex",
})

# Ops whose result is a view of their first operand: it requires grad as that one does,
# in either grad mode (reshape, flatten and contiguous are views where no copy is needed,
# as for a weight).
VIEW_OPS = frozenset({
    "alias", "as_strided", "chunk", "contiguous", "diagonal", "expand", "expand_as", "flatten",
    "movedim", "mT", "narrow", "numpy_T", "permute", "reshape", "select", "slice", "split",
    "split_with_sizes", "squeeze", "swapaxes", "swapdims", "t", "transpose", "unbind",
    "unflatten", "unfold", "unsqueeze", "view", "view_as",
})

# Matmul ops autocast runs in its lower-precision dtype: each on CPU and CUDA, but einsum,
# which CPU autocast leaves to the bmm it runs (cast there): the product's dtype is the same.
AUTOCAST_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "linear", "matmul", "einsum"})
