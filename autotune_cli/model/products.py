"""model/products.py: the mm calls of torch's composite products, which an exported program
keeps as one node each: inner, tensordot, linalg.multi_dot and chain_matmul.

torch runs each as mm calls (what `record` sees, and a TorchScript run shows), read here
from the operands' sizes and strides alone:

  tensordot(a, b, dims_a, dims_b)  a permuted to (its free dims, dims_a) and reshaped to
                                   [M, K], b to (dims_b, its free dims) and [K, N]; one mm.
                                   A reshape that cannot view copies (row-major: "n"). No
                                   free dim on either side: a dot (counted, not listed).
  inner(a, b)                      tensordot over the last dim of each (B read as "t" where
                                   b is row-major); a 0-dim operand: a multiply, no mm.
  linalg.multi_dot(ts), chain_matmul(*ts)
                                   mm calls in the order torch picks to spend the fewest
                                   multiplies (three matrices: by comparing the two costs;
                                   more: the matrix-chain order), a 1-D first operand a row,
                                   a 1-D last one a column; each product made is row-major.
                                   Sizes not all known (a dynamic dim) leave the order
                                   unknown: counted, not listed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

from .classify import VECTOR_PRODUCT, MatmulCall, Operand, Untuned, classify_call, sym, sym_eq, sym_prod

PRODUCT_OPS = ("inner", "tensordot", "linalg_multi_dot", "chain_matmul")
MULTI_DOT_DYNAMIC = "linalg.multi_dot of dynamic sizes (its order is chosen per call)"

__all__ = ["MULTI_DOT_DYNAMIC", "PRODUCT_OPS", "multiply_chain", "product_calls", "tensordot_split"]


def product_calls(op: str, args: dict[str, Any]) -> list[Any]:
    """The calls (each a classify_call result: a MatmulCall, an Untuned, a dtype name, or
    None) torch runs for the composite product `op` (one of PRODUCT_OPS) on `args`, its
    schema's arguments by name (Operands, lists of Operands, lists of ints)."""
    if op == "inner":
        a, b = args.get("self"), args.get("other")
        if not _operands(a, b) or not a.sizes or not b.sizes:
            return []  # a scalar operand: a multiply
        pair = _tensordot(a, b, [-1], [-1])
        pairs = [pair] if pair else []
    elif op == "tensordot":
        a, b = args.get("self"), args.get("other")
        if not _operands(a, b):
            return []
        pair = _tensordot(a, b, list(args.get("dims_self") or ()), list(args.get("dims_other") or ()))
        pairs = [pair] if pair else []
    else:
        tensors = args.get("tensors" if op == "linalg_multi_dot" else "matrices") or []
        if len(tensors) < 2 or not _operands(*tensors):
            return []
        pairs = _chain(list(tensors))
        if pairs is None:
            return [Untuned(MULTI_DOT_DYNAMIC)]
    if not pairs:
        return [Untuned(VECTOR_PRODUCT)]  # every dim summed: a dot
    source = f"aten.{op}"
    calls = []
    for left, right in pairs:
        raw = classify_call("aten::mm", [left, right])
        calls.append(replace(raw, source=source) if isinstance(raw, MatmulCall) else raw)
    return calls


def _operands(*values: Any) -> bool:
    return all(isinstance(v, Operand) for v in values)


def _row_major(rows: Any, cols: Any, like: Operand) -> Operand:
    """A new [rows, cols] matrix (a copy, or a product made): row-major."""
    return Operand((rows, cols), (cols, sym(1)), like.dtype)


def _merged(t: Operand, dims: Sequence[int]) -> tuple[Any, Any] | None:
    """(size, stride) of `dims` of t merged into one dim without a copy, or None where a
    reshape must copy (size-1 dims do not count)."""
    kept = [d for d in dims if not sym_eq(t.sizes[d], 1)]
    size = sym_prod(t.sizes[d] for d in dims)
    for outer, inner in zip(kept, kept[1:]):
        if not sym_eq(t.strides[outer], t.strides[inner] * t.sizes[inner]):
            return None
    return size, (t.strides[kept[-1]] if kept else None)


def _as_matrix(t: Operand, rows: Sequence[int], cols: Sequence[int]) -> Operand:
    """t permuted to (rows, cols) and reshaped to a matrix: a view where the two groups merge,
    else a row-major copy."""
    row, col = _merged(t, rows), _merged(t, cols)
    if row is None or col is None:
        return _row_major(sym_prod(t.sizes[d] for d in rows), sym_prod(t.sizes[d] for d in cols), t)
    (m, row_stride), (n, col_stride) = row, col
    # a group of one element: any stride serves; the one a contiguous matrix would have
    return Operand((m, n), (n if row_stride is None else row_stride, sym(1) if col_stride is None else col_stride),
                   t.dtype, t.requires_grad)


def tensordot_split(rank_a: int, rank_b: int, dims_a, dims_b) -> tuple[list[int], ...] | None:
    """(A's free dims, A's summed ones, B's summed ones, B's free ones) of a tensordot summing
    `dims_a` with `dims_b` (negative ones counted from the end), or None where neither side
    keeps a dim: torch runs a dot then."""
    dims_a = [d % rank_a for d in dims_a]
    dims_b = [d % rank_b for d in dims_b]
    free_a = [d for d in range(rank_a) if d not in dims_a]
    free_b = [d for d in range(rank_b) if d not in dims_b]
    if not free_a and not free_b:
        return None
    return free_a, dims_a, dims_b, free_b


def _tensordot(a: Operand, b: Operand, dims_a: list[int], dims_b: list[int]) -> tuple[Operand, Operand] | None:
    """The mm's operands, or None where torch runs a dot."""
    split = tensordot_split(len(a.sizes), len(b.sizes), dims_a, dims_b)
    if split is None:
        return None
    free_a, dims_a, dims_b, free_b = split
    return _as_matrix(a, free_a, dims_a), _as_matrix(b, dims_b, free_b)


def _chain(tensors: list[Operand]) -> list[tuple[Operand, Operand]] | None:
    """The (left, right) operands of each mm linalg.multi_dot runs, in order; None where the
    sizes that choose the order are not all numbers."""
    first, last = tensors[0], tensors[-1]
    if len(first.sizes) == 1:  # a row vector
        tensors[0] = Operand((sym(1), first.sizes[0]), (first.sizes[0] * first.strides[0], first.strides[0]),
                             first.dtype)
    if len(last.sizes) == 1:  # a column vector
        tensors[-1] = Operand((last.sizes[0], sym(1)), (last.strides[0], sym(1)), last.dtype)
    dims = [t.sizes[0] for t in tensors] + [tensors[-1].sizes[1]]
    if not all(getattr(sym(d), "is_number", False) for d in dims):
        return None
    pairs: list[tuple[Operand, Operand]] = []

    def product(left: Operand, right: Operand) -> Operand:
        pairs.append((left, right))
        return _row_major(left.sizes[0], right.sizes[1], left)

    multiply_chain(tensors, [int(sym(d)) for d in dims], product)
    return pairs


def multiply_chain(items: list, p: list[int], product: Callable[[Any, Any], Any]) -> Any:
    """`items` (matrices of sizes p[0] x p[1], p[1] x p[2], ...) multiplied in the order
    torch's multi_dot picks, each step `product(left, right)`, which gives the product's
    item; the last. Three matrices: (AB)C unless A(BC) costs fewer multiplies; more: the
    matrix-chain order."""
    n = len(items)
    if n == 2:
        return product(items[0], items[1])
    if n == 3:
        if _three_right_first(p):
            return product(items[0], product(items[1], items[2]))
        return product(product(items[0], items[1]), items[2])
    split = _chain_order(p)

    def run(i: int, j: int) -> Any:
        if i == j:
            return items[i]
        k = split[i][j]
        left = run(i, k)
        return product(left, run(k + 1, j))

    return run(0, n - 1)


def _three_right_first(p: list[int]) -> bool:
    """Whether torch multiplies three matrices (sizes p: a x b, b x c, c x d) as A(BC):
    where that costs fewer multiplies than (AB)C."""
    a, b, c, d = p
    return a * c * (b + d) > b * d * (a + c)


def _chain_order(p: list[int]) -> list[list[int]]:
    """The split of each span of the chain that multiplies fewest (the first such, as torch's
    matrix_chain_order keeps it): split[i][j] = k for (i..k)(k+1..j)."""
    n = len(p) - 1
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = None
            for k in range(i, j):
                q = cost[i][k] + cost[k + 1][j] + p[i] * p[k + 1] * p[j + 1]
                if cost[i][j] is None or q < cost[i][j]:
                    cost[i][j], split[i][j] = q, k
    return split
