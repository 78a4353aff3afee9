"""Float8 winners (op scaled_mm) as Inductor lookup-table entries, for the export package
(keys.py, values.py, `inductor_table`).

Read from torch 2.13 (torch/_inductor/kernel/mm.py `tuned_scaled_mm`,
template_heuristics/triton.py's scaled mixins, lookup_table/choices.py), and checked on the
GPU host's torch 2.11 by tests/test_gpu_inductor_lookup.py.

The op name is ``scaled_mm``. Its inputs, in the key, are what the lowering collects,
before any adjustment: ``mat_a`` (float8 [m, k], stride [k, 1]), ``mat_b`` (float8 [k, n]
column-major, stride [1, k]), ``scale_a``, ``scale_b`` (float32), and the bias ([n] of the
output dtype, stride [1]) when there is one; no scalars. A scale's shape and strides are the
caller's tensor's, which the problem does not fix, so each winner is written under every
common form: per tensor a 0-d, a [1] or a [1, 1] scale (the same form for both); per row
scale_a [m, 1] stride [1, 1] and scale_b [1, n] with stride [n, 1] (a contiguous [1, n]) or
[1, 1] (the transpose of an [n, 1] column); per block scale_a [m, k/128] and scale_b
[k/128, n/128], both column-major (strides [1, m] and [1, k/128]), the layout cuBLASLt's
blockwise scaling takes, and where a dimension is 1 (one row of A, one block column of B;
torch checks no stride there) contiguous too.

The choices Inductor offers a scaled_mm, each with its template uid:
  * ``aten::_scaled_mm`` (cuBLASLt): takes no config arguments (out_dtype and
    use_fast_accum come from the call). Our aten::_scaled_mm maps to it.
  * ``triton::scaled_mm_device_tma_epilogue_scaling``: a persistent TMA kernel with the
    scales in the epilogue, offered only without a bias; our
    triton::scaled_mm_persistent_tma maps to it (the tile, GROUP_M, TMA_SIZE, NUM_SMS,
    TMA_EXPERIMENTAL_API, SCALE_RECIPE_A/B as ScalingType values). Our FLATTEN,
    PROMOTE_IN_DOT and WARP_SPECIALIZE have no twin there and are said in a note.
  * ``triton::mm`` with the scaling epilogue: our tiled triton::scaled_mm maps to it.
  Our triton::scaled_mm_splitk and triton::scaled_gemv have none.
Blockwise scales: only the aten::_scaled_mm winner is written. Inductor's blockwise choice
(``triton::scaled_mm_device_tma_main_loop_scaling``) is a persistent TMA kernel; ours
(triton::scaled_mm_blockwise, tiled, and triton::scaled_gemv) have no twin there.
"""

from __future__ import annotations

from typing import Any

from ..problem import FP8_DTYPES, OUT_DTYPES, SCALES, GemmProblem
from ..templates.aten_scaled import AtenScaledMMTemplate
from ..templates.triton_scaled_mm import TritonScaledMMTemplate, TritonScaledMMTiledTemplate
from .args import TILE_ARGS, TMA_DESCRIPTOR_SIZE, as_int

# torch.nn.functional.ScalingType's values (torch 2.10+), as Inductor passes them
SCALING_TYPE = {"tensor": 0, "row": 1}
TMA_EPILOGUE = "triton::scaled_mm_device_tma_epilogue_scaling"
# our uid -> Inductor's, for scaled_mm
SCALED_EQUIVALENT = {
    AtenScaledMMTemplate.uid: "aten::_scaled_mm",
    TritonScaledMMTemplate.uid: TMA_EPILOGUE,
    TritonScaledMMTiledTemplate.uid: "triton::mm",
}
# Inductor template uid -> (module, attribute) holding its TritonTemplate
SCALED_TEMPLATES = {TMA_EPILOGUE: ("torch._inductor.kernel.mm", "scaled_mm_device_tma_epilogue_scaling_template")}
# our params Inductor derives itself or has no twin of (said in a note where it matters)
_OURS_ONLY = frozenset({"EVEN_K", "ACC_TYPE", "ALLOW_TF32", "SCALE", "OUT_DTYPE", "FAST_ACCUM", "FLATTEN",
                        "PROMOTE_IN_DOT", "WARP_SPECIALIZE"})


def check_scaled_problem(problem: GemmProblem) -> None:
    """ValueError unless `problem` is a scaled_mm the export knows."""
    if problem.dtype not in FP8_DTYPES:
        raise ValueError(f"unsupported float8 dtype {problem.dtype!r}")
    if problem.layout != "nt":
        raise ValueError(f"float8 layout {problem.layout!r} (A row-major, B column-major only)")
    if problem.scale not in SCALES:
        raise ValueError(f"unsupported scale kind {problem.scale!r}")
    if problem.result_dtype not in OUT_DTYPES:
        raise ValueError(f"unsupported output dtype {problem.out_dtype!r}")
    if problem.bias not in (None, "n"):
        raise ValueError(f"a scaled_mm bias is [n], got {problem.bias!r}")


def scale_forms(problem: GemmProblem) -> list[tuple[tuple, tuple]]:
    """[((scale_a shape, strides), (scale_b shape, strides)), ...]: the forms written."""
    if problem.scale == "tensor":
        return [(((), ()), ((), ())), (((1,), (1,)), ((1,), (1,))), (((1, 1), (1, 1)), ((1, 1), (1, 1)))]
    m, n = problem.m, problem.n
    if problem.scale == "block":  # column-major, as runner/verify.block_scale_storage makes them
        (_, k_blocks), (_, n_blocks) = problem.scale_shapes()
        # torch checks no stride of a size-1 dimension: one row of A (decode) or one block
        # column of B also comes contiguous ([1, k/128] stride [k/128, 1], [k/128, 1] stride [1, 1])
        forms_a = [((m, k_blocks), (1, m))] + ([((1, k_blocks), (k_blocks, 1))] if m == 1 else [])
        forms_b = [((k_blocks, n_blocks), (1, k_blocks))] + ([((k_blocks, 1), (1, 1))] if n_blocks == 1 else [])
        return list(dict.fromkeys((a, b) for a in forms_a for b in forms_b))  # [1, 1]: one form
    return [(((m, 1), (1, 1)), ((1, n), (n, 1))), (((m, 1), (1, 1)), ((1, n), (1, 1)))]


def scaled_keys(problem: GemmProblem, device_name: str | None) -> list[str]:
    """Inductor's lookup keys for a scaled_mm problem, one per scale form (the first is the
    common one: contiguous, or column-major for blockwise); `device_name` None gives the
    device-agnostic keys."""
    check_scaled_problem(problem)
    fp8, out = f"torch.{problem.dtype}", f"torch.{problem.result_dtype}"  # as str() of the torch dtypes
    m, n, k = problem.m, problem.n, problem.k
    keys = []
    for (shape_a, stride_a), (shape_b, stride_b) in scale_forms(problem):
        inputs = [(fp8, [m, k], [k, 1]), (fp8, [k, n], [1, k]),
                  ("torch.float32", list(shape_a), list(stride_a)), ("torch.float32", list(shape_b), list(stride_b))]
        if problem.bias == "n":
            inputs.append((out, [n], [1]))
        body = "(" + ", ".join(f"({dt}, {size!r}, {stride!r})" for dt, size, stride in inputs) + ")"
        keys.append("+".join([device_name, body, "scaled_mm"] if device_name else [body, "scaled_mm"]))
    return keys


def scaled_value(uid: str, params: Any, problem: GemmProblem, sm_count: Any,
                 template_hash) -> tuple[dict | None, str, list[str]]:
    """(config, "", notes) or (None, why not, []) for a scaled_mm winner (its uid and params).
    `template_hash(uid)` gives the installed Inductor template's hash, or None to leave it out."""
    target = SCALED_EQUIVALENT.get(uid)
    if target is None:
        return None, f"winner {uid} for scaled_mm has no Inductor lookup-table equivalent", []
    if target.startswith("aten::"):
        return {"template_id": target}, "", []
    if not isinstance(params, dict):
        return None, f"winner {uid} has params that are not a dict", []
    unknown = sorted(key for key in params if key not in _OURS_ONLY and key not in TILE_ARGS and key != "GROUP_M")
    if unknown:
        return None, f"winner {uid} has params Inductor's {target} does not take: {', '.join(unknown)}", []
    tiles = {}
    for key in TILE_ARGS:
        value = as_int(params.get(key))
        if value is None or value < 1 or (key != "num_stages" and value & (value - 1)):
            return None, f"winner {uid} lacks a valid {key}: {params.get(key)!r}", []
        tiles[key] = value
    group_m = as_int(params.get("GROUP_M", 8))
    if group_m is None or group_m < 1:
        return None, f"winner {uid} has an invalid GROUP_M: {params.get('GROUP_M')!r}", []
    config: dict[str, Any] = {
        "template_id": target,
        "EVEN_K": problem.k % tiles["BLOCK_K"] == 0,
        "USE_FAST_ACCUM": problem.fast_accum,
        "ACC_TYPE": "tl.float32",
        **{key: tiles[key] for key in ("num_stages", "num_warps", "BLOCK_M", "BLOCK_N", "BLOCK_K")},
        "hint_override": None,
        "GROUP_M": group_m,
    }
    notes = []
    if target == TMA_EPILOGUE:
        if problem.bias:
            return None, (f"winner {uid} has a bias, and Inductor offers its TMA scaled_mm template "
                          "only without one"), []
        if tiles["num_warps"] == 2:
            return None, f"winner {uid} has num_warps=2, which Inductor's TMA template refuses", []
        sms = as_int(sm_count)
        if sms is None or sms < 1:
            return None, f"winner {uid}: its fingerprint has no SM count (Inductor's NUM_SMS)", []
        scaling = SCALING_TYPE[problem.scale]
        config.update(TMA_SIZE=TMA_DESCRIPTOR_SIZE, NUM_SMS=sms, TMA_EXPERIMENTAL_API=False,
                      SCALE_RECIPE_A=scaling, SCALE_RECIPE_B=scaling)
        ours = [f"{key}={params[key]}" for key in ("FLATTEN", "PROMOTE_IN_DOT", "WARP_SPECIALIZE")
                if as_int(params.get(key))]
        if ours:
            notes.append(f"note, mapped without {', '.join(ours)} (no twin in Inductor's {target})")
    src_hash = template_hash(target)
    if src_hash:
        config["template_hash"] = src_hash
    return config, "", notes
