"""model/dims.py: the values a program's dynamic dims are read at, and the concrete problems.

Dynamic dimensions (torch.export only): a size may be a sympy expression of symbols such
as `s0` (the names torch chose at export). Each symbol can also be named
`<input>.<dim>` (e.g. `x.0` for the first dim of input `x`) where it is the whole size of
a user input's dim; no other name (torch.export does not save a Dim's own name, so
`batch` could not be told from a typo). Values per symbol come from `hints`; a symbol without a hint takes its
default values: {max(lower, 1), the power of two nearest the geometric mean of that and
the capped upper bound, min(upper, cap)} from `ep.range_constraints`, deduplicated, where
cap is 4096 shared among the defaulted symbols one call's sizes hold: 4096 ** (1/n) (a power
of two) for n of them, so that their product, the rows of an attention's `mm` over batch and
sequence, stays within what one dim's default reaches (4096 each would make 16M). The
value lists of all symbols are combined position by position when they are all the same
length, else as their cartesian product; each combination gives concrete problems, and
each FoundGemm records the values of the symbols it depends on in `hint`. Values outside
the exported range are accepted (tuning batch 1 of a program exported for batch >= 2 is
still useful). `input_shapes` given for an exported program instead bind the symbols to
the sizes given (one combination; a derived size such as 8*b binds b, and one no whole b
gives is refused) and are checked against the static sizes and the inputs' dtypes.

Within one combination of values, identical problems (same GemmProblem, same hint) are
merged with their counts summed (a call in a map or scan body counts its trip count); a
problem already listed for an earlier combination (e.g. a static one, hint None) is not
listed again. Order: combination by combination,
then first appearance in the forward pass. `hint` keys are the names --hint gave, else the
first input dim a symbol is (x.0), else torch's symbols: each a name --hint takes.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import Any

from ..errors import UserError
from ..problem import MAX_DIM, GemmProblem
from .classify import MatmulCall, sym
from .found import GROUP_SOURCE, FoundGemm
from .text import shown

DEFAULT_HINT_CAP = 4096
MAX_COMBINATIONS = 1024  # combinations of hint values one model may be read at
MAX_COUNT = 2 ** 40  # calls of one matmul per forward pass (a map body's trip count)


def export_bindings(raws: list[Any], inputs: list[tuple[str, tuple[Any, ...]]],
                    ranges: dict[str, Any], input_shapes,
                    hints, names: dict[str, str] | None = None,
                    dtypes: dict[str, str] | None = None) -> list[dict[str, int]]:
    """The combinations of values an exported program's dims are read at: `raws` are its
    classified calls, `inputs` its user inputs (name, sizes), `ranges` its symbols' ranges
    (.lower, .upper); `input_shapes` or `hints` as find_gemms takes them. `names` receives
    {symbol: the name it is shown by}: the one --hint gave it, else its first input dim
    (x.0), which --hint takes as well (torch's s77 reads as nothing to the user). `dtypes`:
    the inputs' dtypes, which an --input-shape must give (the program runs no other)."""

    aliases = input_dims(inputs)
    if names is not None:
        for alias, symbol in aliases.items():  # --hint's own names are set over these below
            names.setdefault(symbol, alias)

    per_call = [_call_symbols(raw) for raw in raws if isinstance(raw, MatmulCall)]
    used = list(dict.fromkeys(name for names_of_call in per_call for name in names_of_call))

    if input_shapes is not None:
        if hints:
            raise UserError("give either --input-shape or --hint for an exported program, not both")
        binding = _bind_input_shapes(inputs, input_shapes, dtypes or {})
        missing = [s for s in used if s not in binding]
        if missing:
            caps = _default_caps(per_call, missing)
            extra = {s: _default_values(ranges.get(s), caps[s]) for s in missing}
            return [{**binding, **c} for c in _combine(extra)]
        return [binding]

    known = list(dict.fromkeys(list(ranges) + used))
    given: dict[str, list[int]] = {}
    for key, values in (hints or {}).items():
        symbol = _hint_symbol(key, known, aliases, inputs)
        if symbol in given:
            raise UserError(f"dynamic dim {symbol} is hinted twice (as {key!r} too)")
        given[symbol] = list(values)
        if names is not None:
            names[symbol] = key  # shown as the user named it
    caps = _default_caps(per_call, [s for s in used if s not in given])
    per_symbol = {s: given.get(s) or _default_values(ranges.get(s), caps[s]) for s in used}
    return _combine(per_symbol)


def _call_symbols(raw: MatmulCall) -> list[str]:
    """The symbols one call's sizes and trip count hold, in a stable order."""
    names: list[str] = []
    for e in (raw.b, raw.m, raw.n, raw.k, sym(raw.times)):
        for s in sorted(e.free_symbols, key=str):
            if s.name not in names:
                names.append(s.name)
    return names


def _default_caps(per_call: list[list[str]], defaulted: list[str]) -> dict[str, int]:
    """{symbol: its largest default value}: DEFAULT_HINT_CAP ** (1/n), rounded down to a power
    of two, for the most defaulted symbols (n) any call holding it holds: the product of the
    defaults one call is read at stays within DEFAULT_HINT_CAP (see the module)."""
    together = {s: 1 for s in defaulted}
    for names_of_call in per_call:
        mine = [s for s in names_of_call if s in together]
        for s in mine:
            together[s] = max(together[s], len(mine))
    bits = DEFAULT_HINT_CAP.bit_length() - 1
    return {s: 2 ** (bits // n) for s, n in together.items()}


def input_dims(inputs: list[tuple[str, tuple[Any, ...]]]) -> dict[str, str]:
    """{"<input>.<dim>": symbol} for each input dim that is a plain symbol (x.0: s77)."""
    aliases: dict[str, str] = {}
    for name, shape in inputs:
        for i, size in enumerate(shape):
            expr = sym(size)
            if expr.is_Symbol:
                aliases.setdefault(f"{name}.{i}", expr.name)
    return aliases


def outside_ranges(scenarios: list[dict[str, int]], ranges: dict[str, Any],
                   names: dict[str, str] | None = None, inputs=()) -> list[str]:
    """One note per symbol given a value outside the range the program was exported for:
    its problems are kept all the same (see the module), but the program itself never runs it.
    A symbol is shown by the name --hint gave it, else by its first input dim (x.0: what an
    --input-shape set), else as torch's symbol."""
    shown_as = {symbol: alias for alias, symbol in reversed(input_dims(list(inputs)).items())}
    shown_as.update(names or {})
    notes = []
    for symbol, vr in ranges.items():
        values = sorted({s[symbol] for s in scenarios if symbol in s})
        outside = [v for v in values if vr is not None and (v < vr.lower or v > vr.upper)]
        if outside:
            upper = "inf" if vr.upper == math.inf else vr.upper  # ints, or inf unbounded
            shown_values = ", ".join(map(str, outside))
            notes.append(f"{shown_as.get(symbol, symbol)}={shown_values}: outside the range the program "
                         f"was exported for ({vr.lower} to {upper}); kept all the same")
    return notes


def _hint_symbol(key: str, known: list[str], aliases: dict[str, str], inputs) -> str:
    """The symbol a --hint name stands for: the symbol itself (s77) or an input's dim (x.0).
    Any other name is refused, listing the known ones, even where the program has one
    dynamic dim: Dim("batch") is saved as s77 without its name, so `batch` and a typo
    would be told apart by nothing, and a typo must not tune the wrong values."""
    if key in known:
        return key
    if key in aliases:
        return aliases[key]
    if not known:
        raise UserError(f"--hint {key!r}: the exported program has no dynamic dims")
    name, dot, dim = key.partition(".")
    shapes = dict(inputs)
    if dot and name in shapes and dim.isdigit() and int(dim) < len(shapes[name]):
        size = sym(shapes[name][int(dim)])
        what = "static" if size.is_Integer else "not one symbol"
        raise UserError(f"--hint {key!r}: that dim is {what} ({size}); the dynamic dims are "
                        f"{', '.join(_with_aliases(s, aliases) for s in known)}")
    listing = ", ".join(_with_aliases(s, aliases) for s in known)
    raise UserError(
        f"unknown dynamic dim {key!r} in --hint; known: {listing}. Name a dim as <input>.<dim> (the "
        "forward argument's name and the dim's index) or by its symbol; torch.export does not save "
        "Dim names")

def _with_aliases(symbol: str, aliases: dict[str, str]) -> str:
    """A dim as the user can name it: "x.0 (s77)", its input dims first; else "s77"."""
    names = [a for a, target in aliases.items() if target == symbol]
    return f"{', '.join(names)} ({symbol})" if names else symbol


def _bind_input_shapes(inputs, input_shapes, dtypes: dict[str, str]) -> dict[str, int]:
    if len(input_shapes) != len(inputs):
        names = ", ".join(n for n, _ in inputs) or "none"
        raise UserError(
            f"the exported program takes {len(inputs)} tensor input(s) ({names}); "
            f"got {len(input_shapes)} --input-shape")
    binding: dict[str, int] = {}
    checks: list[tuple[str, int, Any, int]] = []
    for (name, sizes), (shape, dtype) in zip(inputs, input_shapes):
        if len(shape) != len(sizes):
            raise UserError(f"input '{name}' has {len(sizes)} dims; --input-shape gives {len(shape)}")
        if dtype is not None and dtypes.get(name, dtype) != dtype:  # None: none given, the program's own
            raise UserError(f"input '{name}' is {dtypes[name]}; --input-shape gives {dtype}")
        for i, (size, want) in enumerate(zip(sizes, shape)):
            expr = sym(size)
            if expr.is_Symbol:
                if binding.setdefault(expr.name, want) != want:
                    raise UserError(f"input '{name}' dim {i} is {expr.name}, already set to "
                                    f"{binding[expr.name]}; got {want}")
            else:
                checks.append((name, i, expr, want))
    # a derived size (8*b, b + 1) binds its one unbound symbol where it is linear in it;
    # a size no whole value gives is refused; others are checked once their symbols are bound
    waiting = checks
    while waiting:
        left = []
        for name, i, expr, want in waiting:
            value = _evaluate(expr, binding)
            if value is None:
                solved = _solve_linear(expr, want, binding, f"input '{name}' dim {i}")
                if solved is None:
                    left.append((name, i, expr, want))
                else:
                    binding[solved[0]] = solved[1]
            elif value != want:
                how = "" if expr.is_Integer else f" (= {expr})"
                raise UserError(f"input '{name}' dim {i} must be {value}{how}; got {want}")
        if len(left) == len(waiting):
            break  # sizes of several unbound symbols: those take their defaults
        waiting = left
    return binding


def _solve_linear(expr: Any, want: int, binding: dict[str, int], where: str) -> tuple[str, int] | None:
    """(symbol, value) for the one unbound symbol of `expr` where expr is a*symbol + c (a, c
    whole numbers) and equals `want` at a whole value >= 1; a UserError where no whole value
    gives `want`; None where expr is not of that form."""
    free = [s for s in expr.free_symbols if s.name not in binding]
    if len(free) != 1:
        return None
    (symbol,) = free
    bound = expr.xreplace({s: binding[s.name] for s in expr.free_symbols if s.name in binding})
    poly = bound.expand().as_poly(symbol) if bound.is_polynomial(symbol) else None
    if poly is None or poly.degree() != 1 or not all(c.is_Integer for c in poly.all_coeffs()):
        return None
    a, c = (int(v) for v in poly.all_coeffs())
    value, rest = divmod(want - c, a)
    if rest or value < 1:
        form = f"a multiple of {a}" if c == 0 else f"{a}*n {'+' if c > 0 else '-'} {abs(c)} for a whole n >= 1"
        raise UserError(f"{where} is {shown(str(expr), 60)}, {form}; --input-shape gives {want}")
    return symbol.name, value


def _default_values(vr: Any, cap: int = DEFAULT_HINT_CAP) -> list[int]:
    """{max(lower, 1), a middle power of two, min(upper, cap)}, deduplicated, ascending."""
    lo, hi = 1, cap
    if vr is not None:
        if not bool(vr.lower <= 1):
            lo = int(vr.lower)
        if not bool(vr.upper >= cap):
            hi = int(vr.upper)
    hi = max(hi, lo)
    mid = 2 ** int(math.floor(math.log2(lo * hi) / 2 + 0.5))
    mid = min(max(mid, lo), hi)
    return sorted({lo, mid, hi})


def _combine(per_symbol: dict[str, list[int]]) -> list[dict[str, int]]:
    """Zip value lists of equal length, else take their cartesian product."""
    if not per_symbol:
        return [{}]
    names = list(per_symbol)
    lists = [per_symbol[n] for n in names]
    if len({len(v) for v in lists}) == 1:
        rows = list(zip(*lists))
    else:
        total = math.prod(len(v) for v in lists)
        if total > MAX_COMBINATIONS:
            raise UserError(f"the dynamic dims' values (--hint or defaults) make {total} "
                            f"combinations ({' x '.join(str(len(v)) for v in lists)}); at most "
                            f"{MAX_COMBINATIONS} (dims given the same number of values are "
                            "paired instead)")
        rows = list(itertools.product(*lists))
    return [dict(zip(names, row)) for row in rows]


def _evaluate(expr: Any, binding: dict[str, int]) -> int | None:
    import sympy

    subs = {s: sympy.Integer(binding[s.name]) for s in expr.free_symbols if s.name in binding}
    try:
        value = expr.xreplace(subs) if subs else expr
        if value.free_symbols:
            value = value.subs(subs)
    except ZeroDivisionError:  # export_expr's integer functions refuse a zero divisor
        at = ", ".join(f"{s}={binding[s]}" for s in sorted(binding))
        raise UserError(f"at {at} the size {shown(str(expr), 120)} divides by zero") from None
    if value.free_symbols or not value.is_number:
        return None
    if not value.is_Integer:
        raise UserError(f"the size {shown(str(expr), 120)} is {shown(str(value), 60)}, not an integer")
    return int(value)



def _size_out_of_bounds(op: str, field: str, expr: Any, value: int, binding: dict[str, int],
                        symbols: set[str], sizes_from: str | None) -> str:
    """Why a size is no GEMM dim (more than MAX_DIM, or below 1), and what set it: the
    symbols' values, the --input-shape, or the program as saved."""
    size = f"{field}={value}" if expr.is_Integer else f"{field}={shown(str(expr), 120)} = {value}"
    at = ", ".join(f"{s}={binding[s]}" for s in sorted(symbols))
    where = " and ".join(part for part in (f"at {at}" if at else "", f"from {sizes_from}" if sizes_from else "")
                         if part) or "as the program was saved"
    if value < 1:
        return f"the {op}'s size {size} {where} is below 1; choose larger values"
    change = "choose smaller values" if sizes_from or at else "autotune tunes sizes up to that"
    return f"the {op}'s size {size} {where} is more than {MAX_DIM}; {change}"


def concretize(raws: list[MatmulCall], scenarios: list[dict[str, int]], *, device: str,
               allow_tf32: bool, names: dict[str, str] | None = None,
               sizes_from: str | None = None) -> list[FoundGemm]:
    """One FoundGemm per distinct problem (see the module); its `hint` names each dim as
    `names` does (the user's --hint name), else by its symbol. `sizes_from` says what set
    the sizes where that was not --hint (the --input-shape given): a size out of bounds
    names it, the one thing the user can change."""
    names = names or {}
    out: list[FoundGemm] = []
    index: dict[tuple, int] = {}
    for binding in scenarios:
        local: dict[tuple, FoundGemm] = {}
        order: list[tuple] = []
        for raw in raws:
            dims = {}
            symbols: set[str] = set()
            for field in ("m", "n", "k", "b"):
                expr = getattr(raw, field)
                symbols |= {s.name for s in expr.free_symbols}
                value = _evaluate(expr, binding)
                if value is None:
                    raise UserError(f"matmul size {field}={expr} depends on a symbol with no value")
                if value > MAX_DIM or value < 1:  # export_expr bounds it to a few thousand bits
                    raise UserError(_size_out_of_bounds(raw.op, field, expr, value, binding, symbols,
                                                        sizes_from))
                dims[field] = value
            problem = GemmProblem(
                op=raw.op, m=dims["m"], n=dims["n"], k=dims["k"], b=dims["b"], dtype=raw.dtype,
                layout=raw.layout, bias=raw.bias,
                allow_tf32=bool(allow_tf32 and raw.dtype == "float32"), device=device,
                scale=raw.scale, out_dtype=raw.out_dtype, fast_accum=raw.fast_accum)
            times = _evaluate(sym(raw.times), binding)  # a map or scan body's trip count
            if times is None:
                raise UserError(f"a {raw.op} runs {shown(str(raw.times), 120)} times per call, a count "
                                "with a symbol with no value")
            if times > MAX_COUNT:
                raise UserError(f"a {raw.op} runs {times} times per call, more than the {MAX_COUNT} read")
            if times < 1:
                continue  # a body that runs no time
            symbols |= {s.name for s in sym(raw.times).free_symbols}
            hint = {names.get(s, s): binding[s] for s in sorted(symbols)} or None
            # a group's one GEMM (GROUP_SOURCE) stays a row of its own, even where a linear of
            # the model poses the same problem: it is no call of the model, and counts as none
            key = (problem, tuple(sorted(hint.items())) if hint else None, raw.source == GROUP_SOURCE)
            if key in local:
                prev = local[key]
                sources = prev.sources + ((raw.source,) if raw.source not in prev.sources else ())
                local[key] = replace(prev, count=prev.count + times, sources=sources)
            else:
                local[key] = FoundGemm(problem, times, (raw.source,), hint)
                order.append(key)
        for key in order:
            if key not in index:  # the same problem at the same values in another combination
                index[key] = len(out)
                out.append(local[key])
    return out
