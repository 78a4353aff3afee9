"""A list of problems read from a file, for `autotune mm --from FILE`.

The file is JSON: a list of objects, or an object whose "problems" is that list. Each
object is one problem, with the fields of `autotune mm`'s flags:

    m, n, k      integers >= 1 (required)
    batch        integer >= 1: the problem is a bmm
    dtype        "float16" (default), "bfloat16" or "float32" (or fp16, bf16, fp32, half...)
    layout       "nn" (default), "nt", "tn" or "tt"
    bias         true: the problem is an addmm
    bias_shape   "n" (default: a row vector, as nn.Linear) or "mn" (a full matrix)
    allow_tf32   true: float32 may use tf32
    scale        float8 only: "tensor", "row" or "block" (dtype "float8_e4m3fn": a scaled_mm)
    out_dtype    float8 only: "bfloat16" (default), "float16" or "float32"
    fast_accum   float8 only: true as torch._scaled_mm(use_fast_accum=True)
    count        integer >= 1 (default 1): how many calls ran it (`autotune_cli.record` writes
                 it); the table shows it and weighs the problem's share of the flops by it
    group        true: the one GEMM of linears that read one input (problem.one_gemm), which
                 autotune_cli.compile runs in their place (`record` writes it): tuned like
                 the rest; its share is its linears', and it is no call of its own

e.g. [{"m": 1, "n": 4096, "k": 4096, "dtype": "bfloat16", "layout": "nt"},
      {"m": 4096, "n": 4096, "k": 1024, "bias": true}]

Anything wrong is a UserError naming the file, the entry (counted from 1) and the field.
Only a regular file of at most MAX_LIST_BYTES is read (safe_read.read_regular_file):
a FIFO would block, /dev/zero would never end.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..safe_read import NotAFile, read_regular_file
from ..errors import UserError
from ..text import not_utf8
from ..problem import BIAS_SHAPES, LAYOUTS, MAX_DIM, GemmProblem, make_problem, normalize_dtype

MAX_LIST_BYTES = 64 << 20  # a list of 100,000 problems is about 10 MB
FIELDS = ("m", "n", "k", "batch", "dtype", "layout", "bias", "bias_shape", "allow_tf32", "scale", "out_dtype",
          "fast_accum", "group", "count")


def _integer(value, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"must be an integer, got {json.dumps(value)[:40]}")
    if not 1 <= value <= MAX_DIM:
        raise ValueError(f"must be between 1 and {MAX_DIM}, got {value}")
    return value


def _flag(value, field: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {json.dumps(value)[:40]}")
    return value


def _text(value, field: str, choices: tuple[str, ...] | None = None) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, got {json.dumps(value)[:40]}")
    if choices is not None and value.lower() not in choices:
        raise ValueError(f"is {value[:40]!r}: choose one of {', '.join(choices)}")
    return value.lower()


def entry_of(problem: GemmProblem, count: int | None = None, group: bool = False) -> dict:
    """The entry that `problem_from_entry` reads back as `problem` (on any device): the
    fields that differ from their defaults, `group` (the one GEMM of linears of one input,
    problem.one_gemm: no call of the program itself) when set, and `count` when given."""
    entry: dict = {"m": problem.m, "n": problem.n, "k": problem.k}
    if problem.op == "bmm":
        entry["batch"] = problem.b
    entry["dtype"] = problem.dtype
    entry["layout"] = problem.layout
    if problem.bias:
        entry["bias"] = True
        if problem.bias != "n":
            entry["bias_shape"] = problem.bias
    if problem.allow_tf32:
        entry["allow_tf32"] = True
    if problem.op == "scaled_mm":
        entry["scale"] = problem.scale
        entry["out_dtype"] = problem.out_dtype
        if problem.fast_accum:
            entry["fast_accum"] = True
    if group:
        entry["group"] = True
    if count is not None:
        entry["count"] = count
    return entry


def problem_from_entry(entry, device: str) -> GemmProblem:
    """One entry of the file as a problem; a ValueError "field 'x' ..." names what is wrong."""
    return counted_from_entry(entry, device)[0]


def counted_from_entry(entry, device: str) -> tuple[GemmProblem, int]:
    """One entry of the file as (problem, count); a ValueError "field 'x' ..." names what is wrong."""
    if not isinstance(entry, dict):
        raise ValueError(f"must be an object with fields {', '.join(FIELDS)}, "
                         f"got {json.dumps(entry)[:40]}")
    for name in entry:
        if name not in FIELDS:
            raise ValueError(f"field {name!r} is unknown: the fields are {', '.join(FIELDS)}")
    for name in ("m", "n", "k"):
        if name not in entry:
            raise ValueError(f"field {name!r} is missing")
    args: dict = {}

    def field(name, check, *extra):
        try:
            return check(entry[name], name, *extra)
        except (ValueError, UserError) as exc:
            raise ValueError(f"field {name!r} {exc}") from None

    for name in ("m", "n", "k"):
        args[name] = field(name, _integer)
    args["batch"] = field("batch", _integer) if entry.get("batch") is not None else None
    if "dtype" in entry:
        def dtype(value, name):
            if not isinstance(value, str):
                raise ValueError(f"must be a string, got {json.dumps(value)[:40]}")
            try:
                return normalize_dtype(value)
            except UserError as exc:
                raise ValueError(f"is {value[:40]!r}: {str(exc).split(': ', 1)[-1]}") from None

        args["dtype"] = field("dtype", dtype)
    if "layout" in entry:
        args["layout"] = field("layout", _text, LAYOUTS)
    bias = field("bias", _flag) if "bias" in entry else False
    if "bias_shape" in entry:
        shape = field("bias_shape", _text, BIAS_SHAPES)
        if not bias:
            raise ValueError("field 'bias_shape' needs \"bias\": true")
    else:
        shape = "n"
    if bias and args["batch"] is not None:
        raise ValueError("field 'bias' cannot go with 'batch' (baddbmm is not supported)")
    allow_tf32 = field("allow_tf32", _flag) if "allow_tf32" in entry else False
    if allow_tf32 and args.get("dtype", "float16") != "float32":
        raise ValueError("field 'allow_tf32' only applies to float32")
    for name in ("scale", "out_dtype"):  # checked with the problem (GemmProblem: float8 only)
        if name in entry:
            args[name] = field(name, _text)
    if "fast_accum" in entry:
        args["fast_accum"] = field("fast_accum", _flag)
    if "group" in entry:
        field("group", _flag)  # read by read_listed
    count = field("count", _integer) if "count" in entry else 1
    return make_problem(bias=shape if bias else None, allow_tf32=allow_tf32, device=device, **args), count


def read_problems(path: Path, device: str) -> list[GemmProblem]:
    """Every problem of the file, in its order (a problem listed twice is kept twice: the
    second is answered from the cache)."""
    return [problem for problem, _ in read_counted(path, device)]


def read_counted(path: Path, device: str) -> list[tuple[GemmProblem, int]]:
    """Every (problem, count) of the file, in its order."""
    return [(problem, count) for problem, count, _ in read_listed(path, device)]


def read_listed(path: Path, device: str) -> list[tuple[GemmProblem, int, bool]]:
    """Every (problem, count, whether it is a group's one GEMM) of the file, in its order."""
    try:
        text = read_regular_file(path, MAX_LIST_BYTES).decode("utf-8-sig")  # an editor's BOM is no JSON
    except FileNotFoundError:
        raise UserError(f"--from: file not found: {path}") from None
    except NotAFile as exc:
        raise UserError(f"--from: {exc}") from None
    except OSError as exc:
        raise UserError(f"--from: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"--from: cannot read {path}: {not_utf8(exc)}") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise UserError(f"{path}: not JSON (nested too deeply)") from None
    except ValueError as exc:
        raise UserError(f"{path}: not JSON ({exc})") from None
    if isinstance(data, dict) and "problems" in data:
        data = data["problems"]
    if not isinstance(data, list):
        raise UserError(f"{path}: must hold a list of problems (or {{\"problems\": [...]}})")
    if not data:
        raise UserError(f"{path}: the list of problems is empty")
    problems = []
    for number, entry in enumerate(data, 1):
        try:
            problems.append((*counted_from_entry(entry, device), entry.get("group") is True))
        except (ValueError, UserError) as exc:
            raise UserError(f"{path}: entry {number}: {exc}") from None
    return problems
