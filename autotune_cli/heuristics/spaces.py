"""Config spaces: the JSON lists shipped in configs/, a user's --space file, and the
exhaustive space, generated rather than listed."""

from __future__ import annotations

import itertools
import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import UserError

TRITON_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_stages", "num_warps")
BLOCK_RANGE = (16, 256)


def shipped_document(name: str) -> dict[str, Any]:
    """configs/<name>.json, shipped with the package, as parsed JSON. Run from a checkout
    (its pyproject.toml beside configs/), the checkout's own file: an editable install maps
    autotune_cli.configs to the tree it was installed from, which need not be the one
    running (a second git worktree), and a tree's templates go with its own configs."""
    checkout = Path(__file__).resolve().parents[2]
    own = checkout / "configs" / f"{name}.json"
    if (checkout / "pyproject.toml").is_file() and own.is_file():
        return json.loads(own.read_text())
    try:  # installed: configs/ is the package autotune_cli.configs
        text = resources.files("autotune_cli.configs").joinpath(f"{name}.json").read_text()
    except ModuleNotFoundError:  # run from a checkout with PYTHONPATH=.
        text = own.read_text()
    return json.loads(text)


@lru_cache(maxsize=None)
def shipped_space(name: str) -> tuple[dict[str, Any], ...]:
    """A config list from the package's configs/ folder, e.g. 'triton_mm_cuda'."""
    return tuple(validate_config(c, f"configs/{name}.json") for c in shipped_document(name)["configs"])


def exhaustive_space() -> list[dict[str, Any]]:
    """BLOCK_M/N/K in 16..256, stages 1..5, warps 2/4/8: 1875 configs, like Inductor's."""
    blocks = (16, 32, 64, 128, 256)
    return [
        {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_stages": s, "num_warps": w}
        for bm, bn, bk, s, w in itertools.product(blocks, blocks, blocks, range(1, 6), (2, 4, 8))
    ]


def own_keys(template) -> set[str]:
    """The keys a config listed under a template's uid may set beyond TRITON_KEYS: those its
    configs take (config_keys and the optional `defaults`), not those it derives from the
    problem (EVEN_K, a float8 kernel's SCALE and OUT_DTYPE), which a config could not change."""
    settable = set(getattr(template, "config_keys", ())) | set(getattr(template, "defaults", {}))
    return (settable & set(template.params_schema)) - set(TRITON_KEYS)


def validate_config(config: Any, where: str, template=None) -> dict[str, Any]:
    """A config of a space as the tiles' keys (TRITON_KEYS; GROUP_M 8 where not given),
    checked. `template`: the one whose uid lists it, which may then set that template's own
    keys too (triton::gemv's PDL, DOT, REDUCE_EACH, SPLIT_K), each value checked by its
    params_schema (its BLOCK_N from 1)."""
    if not isinstance(config, dict):
        raise UserError(f"{where}: each config must be an object, got {type(config).__name__}")
    allowed = set(TRITON_KEYS) | (own_keys(template) if template is not None else set())
    unknown = set(config) - allowed
    if unknown:
        expected = ", ".join(TRITON_KEYS) + (f" and {', '.join(sorted(allowed - set(TRITON_KEYS)))}"
                                              if allowed - set(TRITON_KEYS) else "")
        raise UserError(f"{where}: unknown config key(s) {', '.join(sorted(map(repr, unknown)))}; "
                        f"expected {expected}")
    out = {"GROUP_M": 8}
    out.update(config)
    for key in TRITON_KEYS:
        if key not in out:
            raise UserError(f"{where}: config {config} lacks {key}")
        value = out[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(f"{where}: {key} must be a positive integer, got {value!r}")
    if template is not None:
        schema = template.params_schema
        for key, value in out.items():
            problem = schema[key].problem(value) if key in schema else None
            if problem:
                raise UserError(f"{where}: {key}={value!r} is {problem}")
        return out
    for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        value = out[key]
        if value & (value - 1) or not (BLOCK_RANGE[0] <= value <= 1024):
            raise UserError(f"{where}: {key}={value} must be a power of two from 16 to 1024")
    if out["num_warps"] not in (1, 2, 4, 8, 16, 32):
        raise UserError(f"{where}: num_warps={out['num_warps']} must be a power of two up to 32")
    if out["num_stages"] > 8:
        raise UserError(f"{where}: num_stages={out['num_stages']} is more than 8")
    return out


def load_space_file(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """A user's space: a JSON list of configs (for every Triton template: the tiles' keys
    alone) or an object {uid: [configs]} (each may set its template's own keys too). Returns
    {uid or "*": configs}."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"space file not found: {path}")
    if not path.is_file():  # a folder, a device, a pipe: never a list of configs
        raise UserError(f"space file {path} is not a regular file")
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))  # UTF-8, an editor's BOM or not
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise UserError(f"space file {path} is not valid JSON: {reason}") from None
    if isinstance(data, dict) and "configs" in data and isinstance(data["configs"], list):
        data = data["configs"]
    if isinstance(data, list):
        groups = {"*": data}
    elif isinstance(data, dict):
        groups = data
    else:
        raise UserError(f"space file {path}: expected a list of configs or {{uid: [configs]}}")
    if not groups:
        raise UserError(f"space file {path} holds no configs")
    out: dict[str, list[dict[str, Any]]] = {}
    for uid, configs in groups.items():
        if not isinstance(configs, list) or not configs:
            raise UserError(f"space file {path}: {str(uid)!r} must map to a non-empty list of configs")
        template = None
        if uid != "*":  # listed under a template: its own keys allowed, its schema checks them
            template = _listed_template(path, str(uid))
        out[str(uid)] = [validate_config(c, f"{path} [{uid}]", template) for c in configs]
    return out


def _listed_template(path: Path, uid: str):
    """The template a space file lists configs under: a registered Triton one, else why not
    (a typo'd uid, or one that takes no configs), naming the file."""
    from ..templates import all_templates, registered_template

    template = registered_template(uid)
    if template is None:
        known = ", ".join(t.uid for t in all_templates() if t.takes_configs)
        raise UserError(f"space file {path} names unknown template {uid!r}; Triton templates: {known}")
    if not template.takes_configs:
        raise UserError(f"space file {path} lists configs for {uid}, which takes none (only Triton "
                        "templates do)")
    return template


# The shipped lists of some templates carry keys the shared validator does not know
# (FLATTEN, SPLIT_K, ATOMIC_ADD, FUSED_REDUCE): those are checked here, the rest by
# validate_config.
EXTRA_KEYS = {
    "FLATTEN": (0, 1),
    "WARP_SPECIALIZE": (0, 1, 2),
    "PROMOTE_IN_DOT": (0, 1),
    "ATOMIC_ADD": (0, 1),
    "FUSED_REDUCE": (0, 1),
    "SPLIT_K": tuple(2**i for i in range(1, 8)),
}


@lru_cache(maxsize=None)
def shipped_configs(name: str) -> tuple[dict[str, Any], ...]:
    """A config list from configs/<name>.json, its extra keys checked here."""
    return parse_configs(shipped_document(name), f"configs/{name}.json")


def parse_configs(data: dict[str, Any], where: str) -> tuple[dict[str, Any], ...]:
    """{"configs": [...]}: each config's extra keys checked here, the rest by validate_config."""
    out = []
    for config in data["configs"]:
        if not isinstance(config, dict):
            raise UserError(f"{where}: each config must be an object")
        extras = {key: config[key] for key in EXTRA_KEYS if key in config}
        for key, value in extras.items():
            if isinstance(value, bool) or value not in EXTRA_KEYS[key]:
                raise UserError(f"{where}: {key}={value!r} must be one of {EXTRA_KEYS[key]}")
        base = validate_config({k: v for k, v in config.items() if k not in EXTRA_KEYS}, where)
        out.append({**base, **extras})
    return tuple(out)
