"""model/export_expr.py: a serialized program's sizes, strides and dtypes, read without eval.

In the program JSON of a torch.export archive (see export_program.py) every union is a
one-key object ({"as_tensor": {...}}), and `graph.tensor_values` gives each tensor's dtype
(the ScalarType enum of torch/_export/serde/schema.py), sizes and strides ({"as_int": 4}
or {"as_expr": {"expr_str": <sympy.srepr of the expression>}}). `ExprReader` turns those
into an `Operand` whose sizes are sympy expressions equal to the ones torch's deserializer
makes; the expression text is parsed here by a small tokenizer, never evaluated, and only
the forms sizes take are accepted (anything else is `ArchiveUnreadable`, naming it).

Sympy does arithmetic as it builds (a power of an integer is computed, products of integers
multiplied), so the work is bounded before it is done: an expression of at most
_MAX_TOKENS tokens (or _MAX_STR_CHARS characters of str() text), and every sub-expression
built only if the integers it can reach stay within _MAX_BITS bits (a symbol counted as
_SYMBOL_BITS: sizes are below 2**63). A divisor that is zero, or becomes zero once values
are put in, is refused (ZeroDivisionError from the integer functions).
"""

from __future__ import annotations

import re
from typing import Any

from .classify import Operand


class ArchiveUnreadable(Exception):
    """The archive holds something the reader does not understand: the file is refused."""


# schema.py's ScalarType -> torch dtype name (str(dtype) without "torch.")
EXPORT_DTYPES = {
    1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float16", 7: "float32",
    8: "float64", 9: "complex32", 10: "complex64", 11: "complex128", 12: "bool",
    13: "bfloat16", 28: "uint16", 29: "float8_e4m3fn", 30: "float8_e5m2",
    31: "float8_e4m3fnuz", 32: "float8_e5m2fnuz", 33: "float8_e8m0fnu", 34: "uint32",
    35: "uint64",
}

IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SYMBOL_NAME_RE = re.compile(r"[a-z]+[0-9]+")  # torch's shape symbols: s0, s77, u3, ...
_STR_EXPR_RE = re.compile(r"[A-Za-z0-9_+\-* ()]+")  # "4*s0 + 1": str() form (older files)
_SREPR_START_RE = re.compile(r"\s*[A-Z][A-Za-z]*\(")  # "Mul(...": sympy.srepr text
_SREPR_SYMBOL_RE = re.compile(r"Symbol\(\s*'([^']*)'")
_SREPR_TOKEN_RE = re.compile(r"\s*(?:([A-Za-z_][A-Za-z0-9_]*)|(-?[0-9]+)|'([^'\\]*)'|([(),=]))")


def one_field(union: Any) -> tuple[str, Any]:
    """The (field, value) of a serialized union: a one-key object."""
    if not isinstance(union, dict) or len(union) != 1:
        raise ArchiveUnreadable(f"not a one-field union: {union!r}"[:200])
    return next(iter(union.items()))


def expr_symbol_names(text: str) -> set[str]:
    """Names of the symbols in an expr_str, without parsing it."""
    if "Symbol(" in text:
        return set(_SREPR_SYMBOL_RE.findall(text))
    return set(IDENT_RE.findall(text))


_MAX_POW = 64
_MAX_TOKENS = 4096  # a real size expression is a few dozen tokens
_MAX_STR_CHARS = 1000
_SYMBOL_BITS = 64  # a size's value: hints are at most 2**31, range bounds below 2**63
_MAX_BITS = 4096  # room for s0**64; 1233 digits, well within what Python prints


def _short(text: str) -> str:
    """An expression's text for a message: its start only, on one line."""
    return repr(text if len(text) <= 80 else text[:80] + "...")

# torch's integer functions of sizes (torch/utils/_sympy/functions.py names them), on
# non-negative sizes: FloorDiv(a, b) = a // b (CleanDiv: exact), CeilDiv rounds up, Mod and
# PythonMod are a % b.
_INT_OPS = {
    "FloorDiv": lambda a, b: a // b,
    "CleanDiv": lambda a, b: a // b,
    "CeilDiv": lambda a, b: -(-a // b),
    "Mod": lambda a, b: a % b,
    "PythonMod": lambda a, b: a % b,
}
_INT_FUNCTION_CLASSES: dict[str, Any] = {}


def _int_functions() -> dict[str, Any]:
    """sympy functions standing for _INT_OPS: unevaluated while an argument is symbolic,
    an Integer once both are (when hint values are put in)."""
    if not _INT_FUNCTION_CLASSES:
        import sympy

        def make(name: str, op: Any) -> Any:
            def evaluate(cls: Any, a: Any, b: Any) -> Any:
                if b.is_Integer and b == 0:
                    raise ZeroDivisionError(f"{name}({a}, 0)")
                if a.is_Integer and b.is_Integer:
                    return sympy.Integer(op(int(a), int(b)))
                return None

            return type(name, (sympy.Function,), {"nargs": 2, "is_integer": True,
                                                    "eval": classmethod(evaluate)})

        _INT_FUNCTION_CLASSES.update({name: make(name, op) for name, op in _INT_OPS.items()})
    return _INT_FUNCTION_CLASSES


class ExprReader:
    """Sizes and strides as sympy expressions equal to the ones torch's deserializer makes
    (it sympifies expr_str: `sympy.srepr` text such as "Mul(Integer(4), Symbol('s0',
    positive=True, integer=True))", or str() text "4*s0" in older files), and so to sym()'s
    results on the fake tensors torch.export.load would give. The srepr text is parsed here,
    not evaluated. Only integers (|i| < 2**63), symbols, sums, products, powers with exponents
    0 to 64, sympy's Min and Max and torch's integer functions in _int_functions() are
    accepted: anything else is refused by name."""

    def __init__(self) -> None:
        self.plain: dict[str, Any] = {}  # symbols of str() text: no assumptions, as sympify
        self.cache: dict[str, Any] = {}
        self.bits: dict[Any, int] = {}  # expression -> bound on its value's bit length

    def expr(self, text: Any) -> Any:
        if not isinstance(text, str):
            raise ArchiveUnreadable(f"expr_str is not a string: {_short(text)}")
        if text not in self.cache:
            try:
                value = self._srepr(text) if _SREPR_START_RE.match(text) else self._str(text)
            except ZeroDivisionError:
                raise ArchiveUnreadable(f"symbolic size {_short(text)} divides by zero") from None
            self._check(text, value)
            self._bound(text, value)
            self.cache[text] = value
        return self.cache[text]

    def _str(self, text: str) -> Any:
        import sympy

        # no powers and no long numbers: sympify computes what it is given ("9**9**9**9")
        if len(text) > _MAX_STR_CHARS:
            raise ArchiveUnreadable(f"symbolic size {_short(text)} is longer than "
                                    f"{_MAX_STR_CHARS} characters")
        if (not _STR_EXPR_RE.fullmatch(text) or "**" in text
                or any(len(d) > 18 for d in re.findall(r"[0-9]+", text))):
            raise ArchiveUnreadable(f"symbolic size {_short(text)} not understood")
        names = set(IDENT_RE.findall(text))
        for name in names:
            if not _SYMBOL_NAME_RE.fullmatch(name):
                raise ArchiveUnreadable(f"symbolic size {_short(text)}: {name!r} is not a symbol")
            self.plain.setdefault(name, sympy.Symbol(name))
        try:
            return sympy.sympify(text, locals={n: self.plain[n] for n in names})
        except Exception as exc:  # noqa: BLE001 - SympifyError, TokenError, SyntaxError
            raise ArchiveUnreadable(f"symbolic size {_short(text)}: {exc}") from None

    def _srepr(self, text: str) -> Any:
        tokens: list[tuple[str, Any]] = []
        pos = 0
        while pos < len(text):
            match = _SREPR_TOKEN_RE.match(text, pos)
            if match is None:
                if text[pos:].strip():
                    raise ArchiveUnreadable(f"symbolic size {_short(text)} not understood")
                break
            pos = match.end()
            if len(tokens) >= _MAX_TOKENS:
                raise ArchiveUnreadable(f"symbolic size {_short(text)} is longer than "
                                        f"{_MAX_TOKENS} tokens")
            name, number, string, punct = match.groups()
            if name is not None:
                tokens.append(("name", name))
            elif number is not None:
                if len(number) > 20:
                    raise ArchiveUnreadable(
                        f"symbolic size {_short(text)}: integer out of range")
                tokens.append(("int", int(number)))
            elif string is not None:
                tokens.append(("str", string))
            else:
                tokens.append((punct, punct))
        tokens.append(("end", None))
        at = 0

        def take(kind: str) -> Any:
            nonlocal at
            if tokens[at][0] != kind:
                raise ArchiveUnreadable(f"symbolic size {_short(text)} not understood")
            at += 1
            return tokens[at - 1][1]

        def call() -> Any:
            func = take("name")
            take("(")
            args: list[Any] = []
            kwargs: dict[str, bool] = {}
            while tokens[at][0] != ")":
                kind = tokens[at][0]
                if kind == "name" and tokens[at + 1][0] == "=":
                    key = take("name")
                    take("=")
                    flag = take("name")
                    if flag not in ("True", "False"):
                        raise ArchiveUnreadable(f"symbolic size {_short(text)} not understood")
                    kwargs[key] = flag == "True"
                elif kind in ("int", "str"):
                    args.append(take(kind))
                else:
                    args.append(call())
                if tokens[at][0] != ")":
                    take(",")
            take(")")
            return self._build(text, func, args, kwargs)

        value = call()
        take("end")
        return value

    def _build(self, text: str, func: str, args: list[Any], kwargs: dict[str, bool]) -> Any:
        import sympy

        def exprs() -> bool:
            return bool(args) and all(isinstance(a, sympy.Basic) for a in args)

        if func == "Integer" and len(args) == 1 and type(args[0]) is int and not kwargs:
            if abs(args[0]) >= 2 ** 63:
                raise ArchiveUnreadable(f"symbolic size {_short(text)}: integer out of range")
            return sympy.Integer(args[0])
        if (func == "Symbol" and len(args) == 1 and isinstance(args[0], str)
                and IDENT_RE.fullmatch(args[0])):
            try:
                return sympy.Symbol(args[0], **kwargs)
            except Exception as exc:  # noqa: BLE001 - an assumption sympy doesn't know
                raise ArchiveUnreadable(f"symbolic size {_short(text)}: {exc}") from None
        # each bounded before sympy adds, multiplies or raises to a power
        if func in ("Add", "Mul") and exprs() and not kwargs:
            sizes = [self._bound(text, a) for a in args]
            self._refuse_past(text, sum(sizes) if func == "Mul"
                              else max(sizes) + len(args).bit_length())
            return (sympy.Add if func == "Add" else sympy.Mul)(*args)
        if func == "Pow" and len(args) == 2 and exprs() and not kwargs:
            if not (args[1].is_Integer and 0 <= args[1] <= _MAX_POW):
                raise ArchiveUnreadable(f"symbolic size {_short(text)}: power {args[1]} not understood")
            self._refuse_past(text, self._bound(text, args[0]) * int(args[1]))
            return sympy.Pow(*args)
        functions = _int_functions()
        if func in functions and len(args) == 2 and exprs() and not kwargs:
            return functions[func](*args)
        if func in ("Min", "Max") and exprs() and not kwargs:  # sympy's, as sympify finds them
            return (sympy.Min if func == "Min" else sympy.Max)(*args)
        raise ArchiveUnreadable(f"symbolic size {_short(text)}: {func} not understood")

    @staticmethod
    def _check(text: str, value: Any) -> None:
        import sympy

        for part in sympy.preorder_traversal(value):
            if part.is_Symbol or part.is_Integer or part.is_Add or part.is_Mul:
                continue
            if isinstance(part, (sympy.Min, sympy.Max, *_int_functions().values())):
                continue
            if part.is_Pow and part.exp.is_Integer and part.exp >= 0:
                continue
            raise ArchiveUnreadable(f"symbolic size {_short(text)}: {part} not understood")

    def _bound(self, text: str, value: Any) -> int:
        """An upper bound on the bit length of `value` once every symbol is a size (below
        2**_SYMBOL_BITS); refused past _MAX_BITS. Every sub-expression is bounded once."""
        found = self.bits.get(value)
        if found is not None:
            return found
        args = value.args
        if value.is_Integer:
            bound = abs(int(value)).bit_length()
        elif value.is_Symbol:
            bound = _SYMBOL_BITS
        elif value.is_Pow:
            if not (args[1].is_Integer and args[1] >= 0):
                raise ArchiveUnreadable(f"symbolic size {_short(text)}: {value} not understood")
            bound = self._bound(text, args[0]) * int(min(args[1], _MAX_BITS + 1))
        elif value.is_Mul:
            bound = sum(self._bound(text, a) for a in args)
        elif value.is_Add:
            bound = max(self._bound(text, a) for a in args) + len(args).bit_length()
        elif not args:
            raise ArchiveUnreadable(f"symbolic size {_short(text)}: {value} not understood")
        else:  # Min, Max and the integer functions: no larger than an argument, plus one
            bound = max(self._bound(text, a) for a in args) + 1
        self._refuse_past(text, bound)
        self.bits[value] = bound
        return bound

    @staticmethod
    def _refuse_past(text: str, bound: int) -> None:
        if bound > _MAX_BITS:
            raise ArchiveUnreadable(f"symbolic size {_short(text)} may reach numbers of more "
                                    f"than {_MAX_BITS} bits")

    def symint(self, value: Any) -> Any:
        import sympy

        field, body = one_field(value)
        if field == "as_int" and type(body) is int:
            return sympy.Integer(body)
        if field == "as_expr" and isinstance(body, dict):
            return self.expr(body["expr_str"])
        raise ArchiveUnreadable(f"size {value!r} not understood")

    def tensor(self, meta: Any) -> Operand:
        dtype = meta["dtype"]
        if type(dtype) is not int or dtype not in EXPORT_DTYPES:
            raise ArchiveUnreadable(f"unknown dtype {dtype!r}")
        sizes = tuple(self.symint(v) for v in meta["sizes"])
        strides = tuple(self.symint(v) for v in meta["strides"])
        if len(sizes) != len(strides):
            raise ArchiveUnreadable("sizes and strides differ in length")
        return Operand(sizes, strides, EXPORT_DTYPES[dtype])

    def scalar_type(self, code: Any) -> str:
        """The dtype name of a serialized ScalarType (an autocast region's dtype)."""
        if type(code) is not int or code not in EXPORT_DTYPES:
            raise ArchiveUnreadable(f"unknown dtype {code!r}")
        return EXPORT_DTYPES[code]


