"""model/einsum.py: the bmm calls an einsum runs, found from its operands' sizes and strides.

torch runs `einsum` (at::einsum) without a GEMM of its own: it aligns every operand to one
order of labels (the output's labels, then the summed ones; a label an operand lacks is a
dim of size 1), then contracts the operands two at a time (left to right, or along the
path torch.einsum saved): each pair is permuted into (dims of both, dims of the left only,
summed dims) and (dims of both, summed dims, dims of the right only), reshaped to 3-D (a
view where the strides allow, else a contiguous copy) and multiplied by one `bmm` (the two
swapped where the right one's dims all come first in the output); a pair with no summed
dim is multiplied elementwise instead. `einsum_bmms` follows those steps on sizes and
strides alone, so that an exported einsum lists the bmm calls a run of it makes (what a
TorchScript run records). Where torch would first take a diagonal (a label
repeated in one operand), sum a label within one operand, or multiply a pair elementwise
before a bmm, the strides of what follows are not followed: the einsum is not read
(NotRead), and find_gemms names it not tuned.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from .classify import Operand, sym, sym_eq, sym_prod

_ELLIPSIS = 52  # past the 52 letter labels


class NotRead(Exception):
    """An einsum whose bmm calls are not followed (its message says why)."""


def _labels(text: str) -> list[int]:
    """Letter labels as torch numbers them (A-Z: 0-25, a-z: 26-51), "..." as _ELLIPSIS."""
    out: list[int] = []
    i = 0
    text = text.replace(" ", "")
    while i < len(text):
        c = text[i]
        if text.startswith("...", i):
            out.append(_ELLIPSIS)
            i += 3
            continue
        if not ("a" <= c <= "z" or "A" <= c <= "Z"):
            raise NotRead(f"subscript {c!r} not understood")
        out.append(ord(c) - ord("A") if c <= "Z" else ord(c) - ord("a") + 26)
        i += 1
    return out


def _is_one(size: Any) -> bool:
    return sym_eq(size, 1)


def _contiguous(sizes: Sequence[Any]) -> tuple[Any, ...]:
    strides: list[Any] = []
    step = sym(1)
    for size in reversed(sizes):
        strides.append(step)
        step = step * size
    return tuple(reversed(strides))


def _less(a: Any, b: Any) -> bool:
    """a < b for sizes (positive): decided by sympy where it can, else a != b."""
    difference = sym(b) - sym(a)
    if difference.is_positive is not None:
        return bool(difference.is_positive)
    return not sym_eq(a, b)


def _view_strides(sizes: Sequence[Any], strides: Sequence[Any],
                  shape: Sequence[Any]) -> tuple[Any, ...] | None:
    """The strides of a view of (sizes, strides) as `shape`, or None where no view exists
    (torch's reshape then copies). Chunks of dims that are contiguous among themselves map
    onto runs of the new dims of the same element count; each new dim's stride is the count
    of elements after it within its chunk times the chunk's innermost stride."""
    if not sizes:
        return tuple(sym(1) for _ in shape)
    out: list[Any] = [None] * len(shape)
    view_d = len(shape) - 1
    base = strides[-1]
    chunk_numel, view_numel = sym(1), sym(1)
    for d in range(len(sizes) - 1, -1, -1):
        chunk_numel = chunk_numel * sizes[d]
        chunk_ends = d == 0 or (not _is_one(sizes[d - 1])
                                and not sym_eq(strides[d - 1], chunk_numel * base))
        if not chunk_ends:
            continue
        while view_d >= 0 and (_less(view_numel, chunk_numel) or _is_one(shape[view_d])):
            out[view_d] = view_numel * base
            view_numel = view_numel * shape[view_d]
            view_d -= 1
        if not sym_eq(view_numel, chunk_numel):
            return None
        if d > 0:
            base = strides[d - 1]
            chunk_numel, view_numel = sym(1), sym(1)
    return None if view_d != -1 else tuple(out)


def _reshape(t: Operand, shape: Sequence[Any]) -> Operand:
    shape = tuple(sym(s) for s in shape)
    strides = _view_strides(t.sizes, t.strides, shape)
    return replace(t, sizes=shape, strides=strides if strides is not None else _contiguous(shape))


def _permute(t: Operand, order: Sequence[int]) -> Operand:
    return replace(t, sizes=tuple(t.sizes[i] for i in order), strides=tuple(t.strides[i] for i in order))


def _unsqueeze_last(t: Operand) -> Operand:
    return replace(t, sizes=t.sizes + (sym(1),), strides=t.strides + (sym(1),))


def einsum_bmms(equation: str, operands: Sequence[Operand],
                path: Sequence[int] | None = None) -> list[tuple[Operand, Operand]]:
    """The (left, right) operands of each bmm torch runs for this einsum, in order ([] when
    it multiplies no pair over a summed dim); NotRead where the steps are not followed."""
    lhs, arrow, rhs = equation.partition("->")
    parts = lhs.split(",")
    if len(parts) != len(operands):
        raise NotRead("the equation's operands are not the call's")
    op_labels = [_labels(p) for p in parts]
    count = [0] * _ELLIPSIS
    ell_dims = 0
    for labels, t in zip(op_labels, operands):
        named = [s for s in labels if s != _ELLIPSIS]
        if len(named) < len(labels):
            ell_dims = max(ell_dims, len(t.sizes) - len(named))
        elif len(named) != len(t.sizes):
            raise NotRead("the equation's dims are not the operand's")
        if len(set(named)) < len(named):
            raise NotRead("a label repeated in one operand (a diagonal)")
        for s in named:
            count[s] += 1

    # each label's place in the aligned order: the output's, then the summed ones
    place = [-1] * _ELLIPSIS
    at = 0
    ell_at, ell_out = 0, False
    if not arrow:
        ell_out, at = True, ell_dims  # implicit output: "..." then labels seen once
        for s in range(_ELLIPSIS):
            if count[s] == 1:
                place[s], at = at, at + 1
    else:
        for s in _labels(rhs):
            if s == _ELLIPSIS:
                ell_at, ell_out, at = at, True, at + ell_dims
            elif count[s] == 0 or place[s] != -1:
                raise NotRead("an output label not in the operands, or repeated")
            else:
                place[s], at = at, at + 1
    out_dims = at
    if not ell_out:
        ell_at, at = at, at + ell_dims
    for s in range(_ELLIPSIS):
        if count[s] > 0 and place[s] == -1:
            place[s], at = at, at + 1
    total = at

    # each operand aligned: dims of size 1 for the labels it lacks, then permuted
    nontrivial = [0] * total  # operands with a dim of size other than 1 there
    ops: list[Operand] = []
    for labels, t in zip(op_labels, operands):
        order = [-1] * total
        dim = 0
        for s in labels:
            spots = ([ell_at + j for j in range(ell_dims - (len(t.sizes) - len(labels) + 1), ell_dims)]
                     if s == _ELLIPSIS else [place[s]])
            for spot in spots:
                if not _is_one(t.sizes[dim]):
                    nontrivial[spot] += 1
                order[spot], dim = dim, dim + 1
        for spot in range(total):
            if order[spot] == -1:
                t = _unsqueeze_last(t)
                order[spot], dim = dim, dim + 1
        ops.append(_permute(t, order))

    bmms: list[tuple[Operand, Operand]] = []
    steps = list(path or [])
    if path is not None and len(steps) != 2 * (len(ops) - 1):
        raise NotRead("a contraction path of another length")
    while len(ops) > 1:
        i, j = (0, 1) if path is None else sorted(steps[:2])
        steps = steps[2:]
        if not 0 <= i < j < len(ops):
            raise NotRead("a contraction path not understood")
        a, b = ops[i], ops[j]
        del ops[j], ops[i]
        summed: list[int] = []
        for d in range(out_dims, total):
            if not _is_one(a.sizes[d]) and not _is_one(b.sizes[d]):
                nontrivial[d] -= 1
                if nontrivial[d] == 1:
                    summed.append(d)
                    nontrivial[d] = 0
            elif nontrivial[d] == 1 and (not _is_one(a.sizes[d]) or not _is_one(b.sizes[d])):
                raise NotRead("a label summed within one operand")
        if not summed:
            if ops:
                raise NotRead("an elementwise product before a matmul")
            return bmms  # the last pair is multiplied elementwise: no matmul
        left, right, result = _pair(a, b, summed)
        bmms.append((left, right))
        if path is not None:
            ops.append(result)
        else:
            ops.insert(0, result)
    return bmms


def _pair(a: Operand, b: Operand, summed: list[int]) -> tuple[Operand, Operand, Operand]:
    """The bmm operands of one contraction over `summed`, and its result as torch leaves it
    (the bmm's contiguous output viewed back to the aligned dims)."""
    both: list[int] = []
    left_only: list[int] = []
    right_only: list[int] = []
    for d in range(len(a.sizes)):
        if d in summed:
            continue
        one_a, one_b = _is_one(a.sizes[d]), _is_one(b.sizes[d])
        if not one_a and not one_b:
            both.append(d)
        elif not one_a:
            left_only.append(d)
        else:
            right_only.append(d)
    if left_only and right_only and right_only[-1] < left_only[0]:
        # the right operand's dims all lead the left's in the output: torch swaps the two,
        # so that the bmm's output is already in the output's order
        a, b, left_only, right_only = b, a, right_only, left_only
    size_both = sym_prod(a.sizes[d] for d in both)
    size_left = sym_prod(a.sizes[d] for d in left_only)
    size_right = sym_prod(b.sizes[d] for d in right_only)
    size_sum = sym_prod(a.sizes[d] for d in summed)
    left = _reshape(_permute(a, both + left_only + summed + right_only), (size_both, size_left, size_sum))
    right = _reshape(_permute(b, both + summed + right_only + left_only), (size_both, size_sum, size_right))
    out_sizes = ([a.sizes[d] for d in both] + [a.sizes[d] for d in left_only]
                 + [sym(1)] * len(summed) + [b.sizes[d] for d in right_only])
    product = Operand((size_both, size_left, size_right),
                      _contiguous((size_both, size_left, size_right)), a.dtype)
    grouped = _reshape(product, out_sizes)
    order = both + left_only + summed + right_only
    back = [0] * len(order)
    for position, d in enumerate(order):
        back[d] = position
    return left, right, _permute(grouped, back)
