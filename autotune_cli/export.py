"""Export cached winners as a PyTorch Inductor lookup table.

Inductor (torch >= 2.10) can skip its own GEMM autotuning when a lookup table names the
config to use:

    torch._inductor.config.lookup_table.table = table      # {key: [config, ...]}
    from torch._inductor.lookup_table import LookupTableChoices
    from torch._inductor.virtualized import V
    V.set_choices_handler(LookupTableChoices())

What follows was read from torch 2.11 and 2.13 (torch/_inductor/lookup_table/choices.py,
kernel/mm.py, kernel/bmm.py, template_heuristics/triton.py and aten.py).

The key is ``"<device>+<inputs>+<op>"``:
  * ``<device>`` is ``torch.cuda.get_device_properties(i).gcnArchName``, which on NVIDIA
    GPUs is the device name ("NVIDIA H200"). Inductor also tries the key without the
    device part; ``inductor_key(problem, None)`` builds that one. CPU tensors never match.
  * ``<inputs>`` is ``str(tuple((dtype, list(size), list(stride)) for each input))``, e.g.
    ``((torch.bfloat16, [1024, 4096], [4096, 1]), (torch.bfloat16, [4096, 512], [512, 1]))``,
    followed for addmm by ``+alpha=1&beta=1`` (its scalars, sorted, joined by ``&``).
  * ``<op>`` is the lowering's name: ``mm``, ``addmm``, ``bmm``.
  addmm's inputs are (bias, mat1, mat2). Triton templates see the bias expanded to
  ``[m, n]``; a ``[n]`` bias becomes stride ``[0, 1]``. ATen choices see the bias as given
  (``[n]``, stride ``[1]``) in torch 2.13 (and in 2.11 without max-autotune), but expanded
  in 2.11 under max-autotune; an ATen addmm winner is therefore written under both keys.
  Under the expanded key it is ``aten::bias_addmm``: ``aten::addmm`` there would make
  Inductor materialise the [m, n] expansion (an elementwise kernel) before cuBLAS, where
  ``bias_addmm`` passes the [n] row to cuBLASLt's bias epilogue, as eager addmm does.

A value is a list of dicts, each with ``template_id`` (the Inductor template uid) plus the
template's keyword arguments, and optionally ``template_hash`` (the template source's
sha256, ``template.src_hash``); a config whose hash differs from the installed template's
is dropped by Inductor. torch 2.10/2.11 pass a config's kwargs to the template as they are,
so a Triton entry must carry every argument: EVEN_K, USE_FAST_ACCUM, ACC_TYPE, num_stages,
num_warps, BLOCK_M, BLOCK_N, BLOCK_K, hint_override, GROUP_M (2.13 merges them over its
defaults). ALLOW_TF32 must not be in a config: Inductor passes it separately (from
``torch.backends.cuda.matmul.fp32_precision``) and a second copy is a duplicate keyword.
ATen entries take no arguments: ``{"template_id": "aten::mm"}``.

``triton::mm_persistent_tma`` takes the tile arguments plus its TMA ones (A_ROW_MAJOR,
B_ROW_MAJOR, NUM_SMS from the fingerprint's SM count, TMA_SIZE, TMA_EXPERIMENTAL_API, and
the flags the installed Inductor's TMA heuristic adds); our FLATTEN has no twin there.

Float8 winners (op ``scaled_mm``: aten::_scaled_mm, the persistent TMA and the tiled
Triton kernels) have keys and values of their own: see export_scaled.py.

When a key's configs name only some of the templates an op offers, Inductor builds choices
from those alone; one choice means no benchmarking at all. Triton entries apply only under
max-autotune on a GPU with at least 68 SMs.

This module imports torch only inside `installed_template_hash` and `_installed_tma_flag`.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

from .entry import Entry, Winner
from .errors import UserError
from .export_scaled import SCALED_TEMPLATES, check_scaled_problem, scaled_keys, scaled_value
from .problem import FLOAT_DTYPES, GemmProblem

__all__ = [
    "inductor_key",
    "inductor_value",
    "inductor_table",
    "installed_template_hash",
    "INDUCTOR_TRITON_ARGS",
]

_OPS = ("mm", "addmm", "bmm", "scaled_mm")

# The keyword arguments Inductor's triton::mm / triton::bmm templates take from a config,
# in the order Inductor's own heuristic emits them.
INDUCTOR_TRITON_ARGS = (
    "EVEN_K", "USE_FAST_ACCUM", "ACC_TYPE", "num_stages", "num_warps",
    "BLOCK_M", "BLOCK_N", "BLOCK_K", "hint_override", "GROUP_M",
)
_TILE_ARGS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages", "num_warps")
# Params of our Triton templates that Inductor derives itself (or that only shape our own
# rendering); they are dropped, not copied.
_DERIVED_PARAMS = frozenset({
    "EVEN_K", "ACC_TYPE", "ALLOW_TF32", "USE_FAST_ACCUM", "hint_override", "UPCAST",
    "INPUT_PRECISION", "HAS_BIAS", "BATCHED", "OUT_DTYPE",
})

# (our uid, op) -> Inductor template uid for ATen choices, which take no arguments.
_ATEN_EQUIVALENT = {
    ("aten::mm", "mm"): "aten::mm",
    ("aten::addmm", "addmm"): "aten::addmm",
    ("aten::bias_addmm", "addmm"): "aten::bias_addmm",
    ("aten::bmm", "bmm"): "aten::bmm",
}
# (our uid, op) -> Inductor Triton template uid.
_TRITON_EQUIVALENT = {
    ("triton::mm", "mm"): "triton::mm",
    ("triton::mm", "addmm"): "triton::mm",
    ("triton::bmm", "bmm"): "triton::bmm",
    ("triton::mm_persistent_tma", "mm"): "triton::mm_persistent_tma",
    ("triton::mm_persistent_tma", "addmm"): "triton::mm_persistent_tma",
}
_TMA_TARGETS = frozenset({"triton::mm_persistent_tma"})
TMA_DESCRIPTOR_SIZE = 128  # bytes per descriptor: Inductor's TMA_SIZE
# Flags Inductor's TMA heuristic adds after the fixed TMA arguments in some torch versions,
# with the value each takes by default (a torch 2.10/2.11 config needs exactly its set).
_TMA_OPTIONAL = (
    ("tma_store", "enable_template_tma_store", False),
    ("tma_load_for_template_epilogue", "enable_tma_load_for_template_epilogue", False),
    ("transpose_discontiguous_tensor_descriptors_override", None, True),
)
_TMA_FIXED_PARAMS = frozenset({"FLATTEN", "A_TRANSPOSED", "B_TRANSPOSED", "NUM_SMS"})
# Inductor template uid -> (module, attribute) holding the TritonTemplate.
_INDUCTOR_TRITON_TEMPLATES = {
    "triton::mm": ("torch._inductor.kernel.mm", "mm_template"),
    "triton::bmm": ("torch._inductor.kernel.bmm", "bmm_template"),
    "triton::mm_persistent_tma": ("torch._inductor.kernel.mm", "persistent_tma_mm_template"),
    **SCALED_TEMPLATES,
}


# -- keys ------------------------------------------------------------------------------------
def _fmt_inputs(inputs: list[tuple[str, list[int], list[int]]]) -> str:
    # Same text as str() of a tuple of (torch.dtype, list, list) tuples.
    return "(" + ", ".join(f"({dt}, {size!r}, {stride!r})" for dt, size, stride in inputs) + ")"


def _operand_strides(problem: GemmProblem) -> tuple[list[int], list[int]]:
    m, n, k = problem.m, problem.n, problem.k
    a = [1, m] if problem.a_transposed else [k, 1]
    b = [1, k] if problem.b_transposed else [n, 1]
    if problem.op == "bmm":
        a = [m * k, *a]
        b = [k * n, *b]
    return a, b


def _as_problem(problem: GemmProblem | dict) -> GemmProblem:
    """The problem, if Inductor's lookup table can hold it; ValueError saying why not. A dict
    (a problem's JSON object) is checked field by field first."""
    if not isinstance(problem, GemmProblem):
        _check_dict(problem)
        try:
            problem = GemmProblem.from_dict(problem)
        except (UserError, TypeError) as exc:
            raise ValueError(str(exc)) from None
    if problem.op not in _OPS:
        raise ValueError(f"unsupported op {problem.op!r} (Inductor export knows {', '.join(_OPS)})")
    if problem.op == "scaled_mm":
        check_scaled_problem(problem)
    elif problem.dtype not in FLOAT_DTYPES:
        raise ValueError(f"unsupported dtype {problem.dtype!r}")
    return problem


def _check_dict(problem: dict) -> None:
    if not isinstance(problem, dict):
        raise ValueError(f"a problem must be a dict, got {type(problem).__name__}")
    op = problem.get("op")
    if op not in _OPS:
        raise ValueError(f"unsupported op {op!r} (Inductor export knows {', '.join(_OPS)})")
    for name in ("m", "n", "k"):
        value = problem.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"problem field {name!r} must be a positive int, got {value!r}")
    if op == "scaled_mm":
        return  # checked as a problem (export_scaled.check_scaled_problem)
    if problem.get("dtype") not in FLOAT_DTYPES:
        raise ValueError(f"unsupported dtype {problem.get('dtype')!r}")
    layout = problem.get("layout", "nn")
    if layout not in ("nn", "nt", "tn", "tt"):
        raise ValueError(f"unknown layout {layout!r}")
    if op == "bmm":
        b = problem.get("b", 1)
        if isinstance(b, bool) or not isinstance(b, int) or b < 1:
            raise ValueError(f"problem field 'b' must be a positive int, got {b!r}")
    if op == "addmm" and problem.get("bias") not in ("n", "mn"):
        raise ValueError(f"addmm needs bias 'n' or 'mn', got {problem.get('bias')!r}")
    if op != "addmm" and problem.get("bias") is not None:
        raise ValueError(f"a bias only applies to addmm (op is {op})")


def inductor_key(problem: GemmProblem | dict, device_name: str | None, *, bias_expanded: bool = True) -> str:
    """Inductor's lookup key for `problem` on a device named `device_name`.

    `device_name` None (or "") gives the device-agnostic key, which Inductor tries second.
    `bias_expanded` (addmm with a [n] bias only): True gives the key the Triton templates
    (and, in torch 2.11 under max-autotune, every choice) are looked up with, the bias seen
    as [m, n] with stride [0, 1]; False the key of torch 2.13's ATen choices, bias [n].
    A scaled_mm's key is the one with contiguous scales (export_scaled.scaled_keys gives
    every form the table is written under).
    """
    problem = _as_problem(problem)
    op = problem.op
    if op == "scaled_mm":
        return scaled_keys(problem, device_name)[0]
    dt = f"torch.{problem.dtype}"  # as str() of the torch dtype
    m, n, k = problem.m, problem.n, problem.k
    a_stride, b_stride = _operand_strides(problem)
    if op == "bmm":
        b = problem.b
        inputs = [(dt, [b, m, k], a_stride), (dt, [b, k, n], b_stride)]
    else:
        inputs = [(dt, [m, k], a_stride), (dt, [k, n], b_stride)]
    scalars = ""
    if op == "addmm":
        if problem.bias == "mn":
            bias = (dt, [m, n], [n, 1])
        elif bias_expanded:
            bias = (dt, [m, n], [0, 1])
        else:
            bias = (dt, [n], [1])
        inputs.insert(0, bias)
        # Inductor's addmm lowering records alpha and beta (python ints, 1 by default).
        scalars = "+alpha=1&beta=1"
    body = _fmt_inputs(inputs) + scalars
    parts = [device_name, body, op] if device_name else [body, op]
    return "+".join(parts)


# -- values ----------------------------------------------------------------------------------
def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _pow2(value: int) -> bool:
    return value >= 1 and value & (value - 1) == 0


def _tma_arguments(problem: GemmProblem, sm_count: Any) -> tuple[dict | None, str]:
    """The TMA arguments of Inductor's persistent template for `problem`, or (None, why)."""
    sms = _as_int(sm_count)
    if sms is None or sms < 1:
        return None, "its fingerprint has no SM count (Inductor's NUM_SMS)"
    args: dict[str, Any] = {
        "A_ROW_MAJOR": not problem.a_transposed,
        "B_ROW_MAJOR": not problem.b_transposed,
        "NUM_SMS": sms,
        "TMA_SIZE": TMA_DESCRIPTOR_SIZE,
        "TMA_EXPERIMENTAL_API": False,  # our template needs triton >= 3.4, which has the stable API
    }
    for name, config_name, default in _TMA_OPTIONAL:
        present, value = _installed_tma_flag(name, config_name)
        if present:
            args[name] = default if value is None else value
    return args, ""


@lru_cache(maxsize=None)
def _installed_tma_flag(name: str, config_name: str | None) -> tuple[bool, Any]:
    """(whether the installed Inductor's TMA heuristic emits `name`, its config value or
    None). Without an importable torch every flag is written (torch 2.13 merges a config
    over its defaults, so an extra flag there is harmless)."""
    try:
        import inspect

        from torch._inductor import config
        from torch._inductor.template_heuristics import triton as heuristics

        source = inspect.getsource(heuristics.TMATemplateConfigMixin)
    except Exception:
        return True, None
    if f'"{name}"' not in source:
        return False, None
    value = getattr(config.triton, config_name, None) if config_name else None
    return True, value if isinstance(value, bool) else None


def _winner_of(winner: Winner | dict | None) -> tuple[str, Any] | None:
    """(uid, params) of a winner, or of its JSON object; None when there is none."""
    if isinstance(winner, Winner):
        return winner.uid, winner.params
    if isinstance(winner, dict) and isinstance(winner.get("uid"), str):
        return winner["uid"], winner.get("params") or {}
    return None


def _convert(winner: Winner | dict | None, problem: GemmProblem | dict, include_hash: bool = True,
             sm_count: Any = None) -> tuple[dict | None, str]:
    """(config, "") or (None, why not)."""
    picked = _winner_of(winner)
    if picked is None:
        return None, "no winner"
    try:
        problem = _as_problem(problem)
    except ValueError as exc:
        return None, str(exc)
    (uid, params), op = picked, problem.op
    if op == "scaled_mm":
        config, why, _ = scaled_value(uid, params, problem, sm_count,
                                      installed_template_hash if include_hash else lambda uid: None)
        return config, why
    aten = _ATEN_EQUIVALENT.get((uid, op))
    if aten is not None:
        return {"template_id": aten}, ""
    target = _TRITON_EQUIVALENT.get((uid, op))
    if target is None:
        return None, f"winner {uid} for {op} has no Inductor lookup-table equivalent"
    if not isinstance(params, dict):
        return None, f"winner {uid} has params that are not a dict"
    tma = target in _TMA_TARGETS
    unknown = sorted(key for key in params if key not in _DERIVED_PARAMS
                     and key not in _TILE_ARGS and key != "GROUP_M"
                     and not (tma and key in _TMA_FIXED_PARAMS))
    if unknown:
        return None, (f"winner {uid} has params Inductor's {target} does not take: "
                      f"{', '.join(unknown)}")
    tiles: dict[str, int] = {}
    for key in _TILE_ARGS:
        value = _as_int(params.get(key))
        if value is None or value < 1:
            return None, f"winner {uid} lacks a valid {key}: {params.get(key)!r}"
        tiles[key] = value
    for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps"):
        if not _pow2(tiles[key]):
            return None, f"winner {uid} has {key}={tiles[key]}, not a power of two"
    group_m = _as_int(params.get("GROUP_M", 8))
    if group_m is None or group_m < 1:
        return None, f"winner {uid} has an invalid GROUP_M: {params.get('GROUP_M')!r}"
    config: dict[str, Any] = {
        "template_id": target,
        # Inductor: EVEN_K = k % BLOCK_K == 0 (statically known); ACC_TYPE is tl.float32
        # for fp16/bf16 and the triton type of the output (tl.float32) for fp32.
        "EVEN_K": problem.k % tiles["BLOCK_K"] == 0,
        "USE_FAST_ACCUM": False,
        "ACC_TYPE": "tl.float32",
        "num_stages": tiles["num_stages"],
        "num_warps": tiles["num_warps"],
        "BLOCK_M": tiles["BLOCK_M"],
        "BLOCK_N": tiles["BLOCK_N"],
        "BLOCK_K": tiles["BLOCK_K"],
        "hint_override": None,
        "GROUP_M": group_m,
    }
    if tma:
        if tiles["num_warps"] == 2:
            return None, f"winner {uid} has num_warps=2, which Inductor's TMA template refuses"
        extra, why = _tma_arguments(problem, sm_count)
        if extra is None:
            return None, f"winner {uid}: {why}"
        config.update(extra)
    if include_hash:
        src_hash = installed_template_hash(target)
        if src_hash:
            config["template_hash"] = src_hash
    return config, ""


def inductor_value(winner: Winner | dict | None, problem: GemmProblem | dict, *, include_hash: bool = True,
                   sm_count: int | None = None) -> dict | None:
    """One lookup-table config equivalent to `winner`, or None where Inductor has none.

    Triton configs get `template_hash` from the installed torch when it can be read there
    (`include_hash=False` leaves it out); ATen configs are just their template_id. A
    persistent TMA winner needs `sm_count` (the fingerprint's) for Inductor's NUM_SMS.
    """
    config, _ = _convert(winner, problem, include_hash, sm_count)
    return config


# -- tables ----------------------------------------------------------------------------------
def _describe(entry: Entry) -> str:
    problem = entry.problem
    dims = "x".join(str(getattr(problem, d)) for d in (("b", "m", "n", "k") if problem.op == "bmm" else ("m", "n", "k")))
    text = f"{problem.op} {dims} {problem.dtype} {problem.layout}"
    if problem.op == "scaled_mm":
        text += f" {problem.scale}-scaled->{problem.result_dtype}"
        if problem.fast_accum:
            text += " fast-accum"
    if problem.bias:
        text += f" bias[{problem.bias}]"
    if problem.fp32_mode is not None:
        text += f" {problem.fp32_mode}"
    if entry.winner is not None:
        text += f" ({entry.winner.uid})"
    return text


def _base_version(version: str) -> str:
    return str(version).split("+", 1)[0].strip()


def _installed_torch_version() -> str | None:
    try:
        from importlib import metadata

        return metadata.version("torch")
    except Exception:
        return None


def _ms(entry: Entry) -> float:
    return float(entry.winner.ms) if entry.winner is not None else math.inf


def inductor_table(
    entries: list[Entry | dict],
    *,
    allow_tf32: bool = False,
    include_hash: bool = True,
) -> tuple[dict[str, list[dict]], list[str]]:
    """Build Inductor's lookup table from cache entries (or their JSON objects).

    Returns (table, notes): `table` maps each key to a one-config list; `notes` says, one
    line each, which entries were left out and why (CPU entries, winners without an Inductor
    equivalent, float32 entries tuned under the other precision mode, entries that lost to
    a faster one for the same key) and where a template hash was left out.

    Inductor's key does not say whether TF32 is allowed: it decides that at compile time
    from `torch.backends.cuda.matmul.fp32_precision`. Only float32 entries tuned with
    `allow_tf32` equal to this function's `allow_tf32` are exported (default: IEEE, torch's
    default).
    """
    notes: list[str] = []
    chosen: dict[str, tuple[Entry, dict]] = {}  # key -> (entry, config)
    installed = _installed_torch_version() if include_hash else None
    for entry in entries:
        if not isinstance(entry, Entry):
            try:
                entry = Entry.from_dict(entry)
            except ValueError as exc:
                notes.append(f"skipped, not a cache entry ({exc})")
                continue
        what = _describe(entry)
        problem = entry.problem
        device = problem.device
        if device != "cuda" or entry.device_type != "cuda":
            notes.append(f"{what}: skipped, tuned on {device} (Inductor's lookup table "
                         "applies to CUDA devices only)")
            continue
        device_name = entry.device_name
        if not device_name:
            notes.append(f"{what}: skipped, its fingerprint has no device name")
            continue
        if problem.dtype == "float32" and problem.allow_tf32 != allow_tf32:
            mode = "TF32" if problem.allow_tf32 else "IEEE float32"
            notes.append(f"{what}: skipped, tuned for {mode}; export with "
                         f"allow_tf32={not allow_tf32} for that precision mode")
            continue
        use_hash = include_hash
        tuned_torch = entry.torch_version
        if use_hash and tuned_torch and installed and _base_version(tuned_torch) != _base_version(installed):
            use_hash = False
            notes.append(f"{what}: template_hash left out, tuned with torch {tuned_torch} "
                         f"but torch {installed} is installed here")
        sm_count = entry.sm_count
        config, why = _convert(entry.winner, problem, use_hash, sm_count)
        if config is None:
            notes.append(f"{what}: skipped, {why}")
            continue
        if problem.op == "scaled_mm":
            _, _, mapped = scaled_value(entry.winner.uid, entry.winner.params, problem, sm_count, lambda uid: None)
            notes.extend(f"{what}: {note}" for note in mapped)
        if config["template_id"] in _TMA_TARGETS and _as_int(entry.winner.params.get("FLATTEN")):
            notes.append(f"{what}: note, mapped without loop flattening (FLATTEN=1 has no twin "
                         "in Inductor's persistent TMA template)")
        if (config["template_id"].startswith("triton::") and isinstance(sm_count, int)
                and 0 < sm_count < 68):
            notes.append(f"{what}: note, Inductor uses Triton GEMM templates only on GPUs "
                         f"with at least 68 SMs ({device_name} has {sm_count})")
        keyed = [(inductor_key(problem, device_name), config)]
        if problem.op == "scaled_mm":  # every common form of the scales (export_scaled)
            keyed = [(key, config) for key in scaled_keys(problem, device_name)]
        if problem.op == "addmm" and problem.bias == "n" and config["template_id"] == "aten::addmm":
            # see the module: cuBLAS's bias epilogue under both keys, no [m, n] expansion
            keyed = [(keyed[0][0], {"template_id": "aten::bias_addmm"}),
                     (inductor_key(problem, device_name, bias_expanded=False), config)]
        for key, config in keyed:
            previous = chosen.get(key)
            if previous is None:
                chosen[key] = (entry, config)
            elif _ms(entry) < _ms(previous[0]):
                notes.append(f"{_describe(previous[0])}: dropped, {what} is faster for the same key")
                chosen[key] = (entry, config)
            else:
                notes.append(f"{what}: dropped, {_describe(previous[0])} is faster for the same key")
    table = {key: [dict(config)] for key, (_, config) in chosen.items()}
    return table, list(dict.fromkeys(notes))


# -- the installed torch ---------------------------------------------------------------------
@lru_cache(maxsize=None)
def installed_template_hash(uid: str) -> str | None:
    """The installed torch's source hash of Inductor template `uid` (e.g. "triton::mm"),
    as its lookup table checks it; None for ATen choices (they have none), unknown uids, or
    when torch or Inductor cannot be imported."""
    target = _INDUCTOR_TRITON_TEMPLATES.get(uid)
    if target is None:
        return None
    module_name, attr = target
    try:
        import importlib

        module = importlib.import_module(module_name)
        template = getattr(module, attr, None)
        src_hash = getattr(template, "src_hash", None)
    except Exception:
        return None
    return src_hash if isinstance(src_hash, str) and src_hash else None
