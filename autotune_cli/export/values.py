"""Inductor's lookup-table values: the config equivalent to a winner (`inductor_value`,
`convert` with the reason when there is none), and the installed torch's template hashes.

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

A float8 winner's value is export/scaled.py's.

This module imports torch only inside `installed_template_hash` and `_installed_tma_flag`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ..store.entry import Winner
from ..problem import GemmProblem
from .args import TILE_ARGS, TMA_DESCRIPTOR_SIZE, as_int
from .keys import as_problem
from .scaled import SCALED_TEMPLATES, scaled_value
from ..templates.aten import ATEN_TEMPLATES
from ..templates.triton_mm import TritonBMMTemplate, TritonMMTemplate
from ..templates.triton_persistent_tma import TritonPersistentTMATemplate

__all__ = ["inductor_value", "installed_template_hash", "INDUCTOR_TRITON_ARGS"]

# The keyword arguments Inductor's triton::mm / triton::bmm templates take from a config,
# in the order Inductor's own heuristic emits them.
INDUCTOR_TRITON_ARGS = (
    "EVEN_K", "USE_FAST_ACCUM", "ACC_TYPE", "num_stages", "num_warps",
    "BLOCK_M", "BLOCK_N", "BLOCK_K", "hint_override", "GROUP_M",
)
# Params of our Triton templates that Inductor derives itself (or that only shape our own
# rendering); they are dropped, not copied.
_DERIVED_PARAMS = frozenset({
    "EVEN_K", "ACC_TYPE", "ALLOW_TF32", "USE_FAST_ACCUM", "hint_override", "UPCAST",
    "INPUT_PRECISION", "HAS_BIAS", "BATCHED", "OUT_DTYPE",
    "FIXED_NK",  # Inductor writes every static size into its kernels anyway
})

# (our uid, op) -> Inductor template uid for ATen choices, which take no arguments.
_ATEN_EQUIVALENT = {
    (ATEN_TEMPLATES["mm"].uid, "mm"): "aten::mm",
    (ATEN_TEMPLATES["addmm"].uid, "addmm"): "aten::addmm",
    ("aten::bias_addmm", "addmm"): "aten::bias_addmm",  # Inductor's alone (export/__init__.py)
    (ATEN_TEMPLATES["bmm"].uid, "bmm"): "aten::bmm",
}
# (our uid, op) -> Inductor Triton template uid.
_TRITON_EQUIVALENT = {
    (TritonMMTemplate.uid, "mm"): "triton::mm",
    (TritonMMTemplate.uid, "addmm"): "triton::mm",
    (TritonBMMTemplate.uid, "bmm"): "triton::bmm",
    (TritonPersistentTMATemplate.uid, "mm"): "triton::mm_persistent_tma",
    (TritonPersistentTMATemplate.uid, "addmm"): "triton::mm_persistent_tma",
}
TMA_TARGETS = frozenset({"triton::mm_persistent_tma"})
# Inductor (2.11, 2.13) offers a TMA template, and so takes a lookup entry naming one, only
# with this switch on (utils.use_triton_tma_template); off by default.
TMA_SWITCH = "torch._inductor.config.triton.enable_persistent_tma_matmul"
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


def _pow2(value: int) -> bool:
    return value >= 1 and value & (value - 1) == 0


def _tma_arguments(problem: GemmProblem, sm_count: Any) -> tuple[dict | None, str]:
    """The TMA arguments of Inductor's persistent template for `problem`, or (None, why)."""
    sms = as_int(sm_count)
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
    except Exception:  # noqa: BLE001 - another torch's layout: the value is left as it is
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


def convert(winner: Winner | dict | None, problem: GemmProblem | dict, include_hash: bool = True,
             sm_count: Any = None) -> tuple[dict | None, str]:
    """(config, "") or (None, why not)."""
    picked = _winner_of(winner)
    if picked is None:
        return None, "no winner"
    try:
        problem = as_problem(problem)
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
    tma = target in TMA_TARGETS
    unknown = sorted(key for key in params if key not in _DERIVED_PARAMS
                     and key not in TILE_ARGS and key != "GROUP_M"
                     and not (tma and key in _TMA_FIXED_PARAMS))
    if unknown:
        return None, (f"winner {uid} has params Inductor's {target} does not take: "
                      f"{', '.join(unknown)}")
    tiles: dict[str, int] = {}
    for key in TILE_ARGS:
        value = as_int(params.get(key))
        if value is None or value < 1:
            return None, f"winner {uid} lacks a valid {key}: {params.get(key)!r}"
        tiles[key] = value
    for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps"):
        if not _pow2(tiles[key]):
            return None, f"winner {uid} has {key}={tiles[key]}, not a power of two"
    group_m = as_int(params.get("GROUP_M", 8))
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
    config, _ = convert(winner, problem, include_hash, sm_count)
    return config


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
    except Exception:  # noqa: BLE001 - another torch's layout: no hash, the key leaves it out
        return None
    return src_hash if isinstance(src_hash, str) and src_hash else None
