"""model/text.py: the command line's text about a model, and a file's text in a message.

`parse_input_shape` reads one --input-shape ("8x128x768:float16"), `parse_hints` the
--hint values of dynamic dims ("x.0=1,16,128"); `shown` and `one_line` make what a file
or an exception says safe to print in a one-line error.
"""

from __future__ import annotations

import re
from typing import Iterable

from ..errors import UserError
from ..problem import DTYPE_ALIASES, FP8_DTYPES, MAX_DIM

MAX_HINT_VALUES = 64  # values one --hint may list

# --input-shape dtypes: the problem dtypes' names and aliases (problem.py) less float8, which
# example inputs are not made in, and the other dtypes a model's inputs may have.
_INPUT_DTYPES = {
    **{alias: name for alias, name in DTYPE_ALIASES.items() if name not in FP8_DTYPES},
    "float64": "float64", "fp64": "float64", "double": "float64", "f64": "float64",
    "int64": "int64", "long": "int64", "i64": "int64",
    "int32": "int32", "int": "int32", "i32": "int32",
    "int16": "int16", "short": "int16",
    "int8": "int8", "uint8": "uint8", "bool": "bool",
}
_DIMS_RE = re.compile(r"^[0-9]+(?:[x,][0-9]+)*$")
_SIZE_RE = re.compile(r"[0-9]{1,10}")  # a size: at most MAX_DIM, checked once it is an int


def _size(text: str) -> int | None:
    """A size between 1 and MAX_DIM written in ASCII digits, else None."""
    if not _SIZE_RE.fullmatch(text):
        return None
    value = int(text)
    return value if 1 <= value <= MAX_DIM else None


def parse_input_shape(text: str) -> tuple[tuple[int, ...], str | None]:
    """Parse "8x128x768:float16" into ((8, 128, 768), "float16").

    Dims are separated by `x` or `,`; the dtype after `:` may be any of
    float16/bfloat16/float32/float64/int64/int32/int16/int8/uint8/bool (or the usual short
    names), and is None where none is given (a TorchScript model's input is then float32, an
    exported program's its own). "scalar:int64" is a 0-d tensor.
    """
    raw = str(text).strip()
    shape_text, sep, dtype_text = raw.partition(":")
    shape_text = shape_text.strip().lower().replace(" ", "")
    dtype_key = dtype_text.strip().lower().removeprefix("torch.") if sep else None
    if dtype_key is not None and dtype_key not in _INPUT_DTYPES:
        raise UserError(
            f"cannot parse input shape {text!r}: unknown dtype {dtype_text.strip()!r} "
            f"(use e.g. 8x128x768:float16)")
    dtype = None if dtype_key is None else _INPUT_DTYPES[dtype_key]
    if shape_text in ("scalar", "()"):
        return (), dtype
    if not _DIMS_RE.match(shape_text):
        raise UserError(f"cannot parse input shape {text!r}: expected dims like 8x128x768[:dtype]")
    dims = tuple(_size(d) for d in re.split(r"[x,]", shape_text))
    if any(d is None for d in dims):
        raise UserError(f"cannot parse input shape {shown(str(text))!r}: every dim must be "
                        f"from 1 to {MAX_DIM}")
    return dims, dtype


_HINT_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*(.+?)\s*$")


def parse_hints(texts: Iterable[str]) -> dict[str, list[int]]:
    """Parse ["s0=1,16,128", "s1=64"] into {"s0": [1, 16, 128], "s1": [64]}.

    Values are sizes from 1 to MAX_DIM, at most MAX_HINT_VALUES of them; repeated values
    are dropped, order is kept. NAME is checked against the model later (find_gemms).
    """
    out: dict[str, list[int]] = {}
    for text in texts:
        quoted = shown(str(text), 80)
        match = _HINT_RE.match(str(text))
        if not match:
            raise UserError(f"cannot parse hint {quoted!r}: expected NAME=V1,V2,... "
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
                raise UserError(f"cannot parse hint {quoted!r}: {shown(part.strip(), 24)!r} is "
                                f"not a size from 1 to {MAX_DIM}")
            if value not in values:
                values.append(value)
        out[name] = values
    return out


TORCHSCRIPT_FAILED = "The following operation failed in the TorchScript interpreter."


_EXCEPTION_LINE = re.compile(r"^[A-Z][A-Za-z0-9_.]*(Error|Exception): ")


def one_line(exc: BaseException) -> str:
    """What `exc` says, on one line: its first line, or, for an error TorchScript's interpreter
    wraps (its traceback first), the error under the traceback (its first line that names an
    exception: the dispatcher's notes may follow it)."""
    text = [line for line in str(exc).strip().splitlines() if line.strip()]
    if text and text[0].strip() == TORCHSCRIPT_FAILED:
        named = [line.strip() for line in text if _EXCEPTION_LINE.match(line.strip())]
        return named[0] if named else text[-1].strip()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def shown(text: str, limit: int = 300) -> str:
    """Text from a file, safe to print on one line: control characters escaped, cut short."""
    out = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    return out if len(out) <= limit else out[:limit] + "..."

