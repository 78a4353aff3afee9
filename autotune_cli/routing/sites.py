"""Which nodes of a Dynamo graph are matmuls that the routing backend (backend.py) routes: linear, mm,
addmm, bmm and matmul / @ read as a GEMM (MatmulMatch: its operand nodes, how A is folded
and whether B is a weight to transpose), and torch._scaled_mm with constant arguments
(ScaledMatch). Anything else is left to the compiler. Reads node metadata only; imports
torch when called.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, field, replace
from typing import Any

from ..api.calls import needs_gradients
from ..problem import FUSED_OPS, linear_fuses_bias, matmul_folds
from .products import fused_kind, other_kind, other_overload, other_targets

__all__ = ["MatmulMatch", "ScaledMatch", "Site", "call_args", "concrete", "einsum_targets",
           "folds_traced", "is_static", "records_gradients", "match_matmul", "match_scaled", "matmul_sites",
           "node_value"]


@dataclass
class MatmulMatch:
    """A matmul node read as a GEMM: operand nodes, how A is folded and B transposed."""

    a: Any
    b: Any
    bias: Any
    fold: tuple[int, ...] | None  # A's leading dims, folded into M (None: A is the matrix)
    transpose_b: bool  # B is a linear's weight: the product takes W.T
    batch: tuple[int, ...] | None = None  # both operands' leading dims, folded into a bmm's batch
    unrouted: str = ""  # why the call stays torch's though it is a GEMM (alpha=, beta=, out=)
    bias_apart: bool = False  # a linear's bias added after the product, as at::linear adds it there


@functools.cache  # torch's objects: the same sets for every node
def _targets():
    """Each routed op's call targets: torch's function, and the aten op a graph of an
    exported program (ExportedProgram.module()) calls in its place."""
    import torch

    aten = torch.ops.aten
    linear = {torch._C._nn.linear, torch.nn.functional.linear, aten.linear.default}
    matmul = {torch.matmul, operator.matmul, torch.linalg.matmul, aten.matmul.default}
    return linear, matmul, {torch.mm, aten.mm.default}, {torch.addmm, aten.addmm.default}, \
        {torch.bmm, aten.bmm.default}


@functools.cache
def einsum_targets() -> set:
    import torch

    return {torch.einsum, torch.ops.aten.einsum.default}


@functools.cache
def _scaled_targets() -> set:
    import torch

    return {torch._scaled_mm, torch.ops.aten._scaled_mm.default}


def node_value(arg):
    return arg.meta.get("example_value") if hasattr(arg, "meta") else None


@dataclass
class ScaledMatch:
    """A torch._scaled_mm node: its tensor operand nodes and its constant arguments."""

    a: Any
    b: Any
    scale_a: Any
    scale_b: Any
    bias: Any
    out_dtype: Any
    fast_accum: bool


# torch._scaled_mm(self, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
# use_fast_accum=False): its arguments in order, with their defaults after the fourth
_SCALED_ARGS = ("a", "b", "scale_a", "scale_b", "bias", "scale_result", "out_dtype", "use_fast_accum")
_SCALED_DEFAULTS = {"bias": None, "scale_result": None, "out_dtype": None, "use_fast_accum": False}
_SCALED_KWARG_NAMES = {"self": "a", "mat2": "b"}


def call_args(node, names: tuple, defaults: dict | None = None, aliases: dict | None = None) -> dict | None:
    """A call node's arguments by name: its positional ones in the order of `names`, then its
    keywords (a keyword renamed by `aliases` first), over `defaults`; None where it passes more
    positional arguments than `names`, a keyword not among them, or one argument twice."""
    if len(node.args) > len(names):
        return None
    args = dict(zip(names, node.args))
    for name, value in node.kwargs.items():
        name = (aliases or {}).get(name, name)
        if name not in names or name in args:
            return None
        args[name] = value
    return {**(defaults or {}), **args}


def match_scaled(node) -> ScaledMatch | None:
    """torch._scaled_mm called with tensors, constant out_dtype and use_fast_accum and no
    scale_result; anything else (out=, a traced flag) is left to the compiler."""
    import torch

    if node.op != "call_function" or node.target not in _scaled_targets():
        return None
    args = call_args(node, _SCALED_ARGS, _SCALED_DEFAULTS, _SCALED_KWARG_NAMES)
    if args is None:
        return None
    if any(name not in args for name in _SCALED_ARGS[:4]) or args["scale_result"] is not None:
        return None
    if not all(isinstance(node_value(args[name]), torch.Tensor) for name in _SCALED_ARGS[:4]):
        return None
    if args["bias"] is not None and not isinstance(node_value(args["bias"]), torch.Tensor):
        return None
    out_dtype, fast = args["out_dtype"], args["use_fast_accum"]
    if not (out_dtype is None or isinstance(out_dtype, torch.dtype)) or not isinstance(fast, bool):
        return None
    return ScaledMatch(args["a"], args["b"], args["scale_a"], args["scale_b"], args["bias"], out_dtype, fast)


def match_matmul(node) -> MatmulMatch | None:
    import torch

    if node.op == "call_method":
        name = node.target
        args = list(node.args)
    elif node.op == "call_function":
        name, args = None, list(node.args)
    else:
        return None
    linear, matmul, mm, addmm, bmm = _targets()
    # beta=1, alpha=1 are addmm's and baddbmm's own defaults: the call is the plain one
    kwargs = {name: value for name, value in node.kwargs.items()
              if not (name in ("beta", "alpha") and type(value) in (int, float) and value == 1)}
    target = node.target
    overload = other_overload(node)
    if overload is not None:  # aten.mm.out, aten.mm.dtype, ...: met and left to torch (said)
        name, how = overload
        operands = args[1:3] if name in ("addmm", "baddbmm") else args[:2]
        if len(operands) != 2 or not all(isinstance(node_value(x), torch.Tensor) for x in operands):
            return None
        a, b = operands
        said = ", ".join(f"{k}=" for k in sorted(kwargs)) or how
        return MatmulMatch(a, b, None, None, name == "linear", unrouted=f"{UNROUTED_ARGUMENTS} ({said})")
    tensors = [node_value(x) for x in args]
    if not all(isinstance(t, torch.Tensor) for t in tensors[:2]) or len(args) < 2:
        return None
    if target in linear:
        bias = args[2] if len(args) > 2 else kwargs.pop("bias", None)
        if kwargs or (bias is not None and not isinstance(node_value(bias), torch.Tensor)):
            return None
        x, w = tensors[0], tensors[1]
        if w.dim() != 2 or x.dim() < 2:
            return None
        apart = bias is not None and not linear_fuses_bias(x.dim(), x.is_contiguous(), node_value(bias).shape)
        unfolded = (bias is None or apart) and not folds_traced(x, w)
        return MatmulMatch(args[0], args[1], bias, tuple(x.shape[:-1]) if x.dim() > 2 else None, True,
                           unrouted=UNFOLDED if unfolded else "", bias_apart=apart)
    # out=, alpha=, beta=: a GEMM our ops do not take, met and left to torch (said in the summary)
    unrouted = f"{UNROUTED_ARGUMENTS} ({', '.join(f'{k}=' for k in sorted(kwargs))})" if kwargs else ""
    if target in mm or name == "mm":
        return MatmulMatch(args[0], args[1], None, None, False, unrouted=unrouted) if len(args) == 2 else None
    if target in bmm or name == "bmm":
        return MatmulMatch(args[0], args[1], None, None, False, unrouted=unrouted) if len(args) == 2 else None
    if target in addmm or name == "addmm":
        if len(args) != 3 or not isinstance(node_value(args[2]), torch.Tensor):
            return None
        return MatmulMatch(args[1], args[2], args[0], None, False, unrouted=unrouted)
    if target in (torch.baddbmm, torch.ops.aten.baddbmm.default) or name == "baddbmm":  # met, and said to stay torch's
        if len(args) != 3 or not isinstance(node_value(args[2]), torch.Tensor):
            return None
        return MatmulMatch(args[1], args[2], None, None, False, unrouted=BADDBMM)
    if target in matmul or name in ("matmul", "__matmul__"):
        if kwargs:  # out=: met and left to torch (said)
            return MatmulMatch(args[0], args[1], None, None, False, unrouted=unrouted) if len(args) == 2 else None
        if len(args) != 2:
            return None
        x, y = tensors
        if x.dim() == 2 and y.dim() == 2:
            return MatmulMatch(args[0], args[1], None, None, False)
        if x.dim() > 2 and y.dim() == 2:
            return MatmulMatch(args[0], args[1], None, tuple(x.shape[:-1]), False,
                               unrouted="" if folds_traced(x, y) else UNFOLDED)
        if x.dim() == 3 and y.dim() == 3 and x.shape[0] == y.shape[0]:
            return MatmulMatch(args[0], args[1], None, None, False)
        if x.dim() == y.dim() > 3 and tuple(x.shape[:-2]) == tuple(y.shape[:-2]):
            # attention's q @ k^T: the leading dims (no broadcast) are one bmm's batch
            return MatmulMatch(args[0], args[1], None, None, False, tuple(x.shape[:-2]))
        # met, and said to stay torch's
        if x.dim() == 2 and y.dim() > 2:
            unrouted = MATRIX_BY_BATCH
        elif x.dim() == 1 or y.dim() == 1:
            unrouted = VECTOR
        else:
            unrouted = BROADCAST
        return MatmulMatch(args[0], args[1], None, None, False, unrouted=unrouted)
    return None


def folds_traced(x, weight) -> bool:
    """Whether torch's matmul of a traced N-D `x` by a 2-D `weight` runs one mm of x's rows
    (problem.matmul_folds; api/problems.folds_as_torch reads real strides), a dim of size 1
    left out: its stride in a traced value need not be the run's (after SDPA's transpose a
    fake view's differs from torch's own). A run whose size-1 dim's stride does stop the
    fold is then posed as the mm of its rows, not the bmm torch runs: the same values."""
    if x.dim() <= 2:
        return True
    dims = [(size, stride) for size, stride in zip(x.shape[:-1], x.stride()[:-1]) if concrete(size) != 1]
    rows_fold = all(outer == inner * size for (_, outer), (size, inner) in zip(dims, dims[1:]))
    return matmul_folds(bool(weight.requires_grad), rows_fold)


def is_static(*tensors) -> bool:
    """Whether every size and stride of `tensors` (None: absent) is a number."""
    return all(t is None or all(isinstance(s, int) for s in (*t.shape, *t.stride())) for t in tensors)


def records_gradients(node, *operands) -> bool:
    """Whether autograd records `node`: its traced output requires grad. The grad mode is the
    graph's at that node (an enable_grad region called under no_grad records), not the one
    the graph is compiled under; `operands` decide where the node has no traced value."""
    want = node_value(node)
    if want is not None and hasattr(want, "requires_grad"):
        return bool(want.requires_grad)
    return needs_gradients(*operands)


@dataclass
class Site:
    """A matmul node of a graph, as a GEMM's operands (the values of the matrices it
    multiplies: A folded, B transposed, leading dims batched), or why it is left alone."""

    node: Any
    op: str  # mm, addmm, bmm or scaled_mm
    match: MatmulMatch | None
    scaled: ScaledMatch | None
    a: Any = None
    b: Any = None
    bias: Any = None
    values: tuple = ()  # scaled_mm: a, b, scale_a, scale_b, bias
    skip: str = ""  # why it stays the compiler's ("" where it may be routed)
    outer: bool = False  # K = 1: left to the compiler as a broadcast multiply (backend.py)
    static: bool = True
    dynamic_m: bool = False  # only A's rows (M) are dynamic: routed per call (dynamic.py)
    plan: Any = None  # a dynamic M's (problem at its hint, M values tuned), or why not
    operands: list = field(default_factory=list)  # the node's operand nodes as matched, in order

    def __post_init__(self) -> None:
        self.operands = _operand_nodes(self.node)

    def refresh(self) -> None:
        """Point the match at the operand nodes the graph holds now: a rewrite before this
        one may have replaced one of them (a matmul that feeds this one, routed)."""
        now = dict(zip(map(id, self.operands), _operand_nodes(self.node)))

        def current(n):
            return now.get(id(n), n) if n is not None else None

        if self.match is not None:
            self.match = replace(self.match, a=current(self.match.a), b=current(self.match.b),
                                 bias=current(self.match.bias))
        if self.scaled is not None:
            self.scaled = replace(self.scaled, **{name: current(getattr(self.scaled, name))
                                                  for name in ("a", "b", "scale_a", "scale_b", "bias")})
        self.operands = _operand_nodes(self.node)


def _operand_nodes(node) -> list:
    """The nodes among `node`'s arguments, in order (a replaced one keeps its place)."""
    from torch.fx.node import map_arg

    found: list = []
    map_arg((node.args, node.kwargs), found.append)
    return found


UNROUTED_ARGUMENTS = "arguments our ops do not take"
MATRIX_BY_BATCH = "a matrix times a batch (2-D @ N-D), not read by routing"
UNFOLDED = ("a matmul torch runs as a bmm over the input's batch (rows that do not fold without a copy, "
            "times a weight that needs no grad), not read by routing")
BADDBMM = "a baddbmm (a batched product added to a tensor), not read by routing"
VECTOR = "a product with a vector (1-D operand), not read by routing"
BROADCAST = "a matmul whose batch dims broadcast, not read by routing"
OTHER_KIND = "a product routing does not read"
FUSED = "matmuls inside one op of torch's (an attention or encoder layer), not read by routing"
EINSUM = "an einsum that is not one matmul, left to the compiler"
OUTER = "K = 1: an outer product, run as a broadcast multiply the compiler fuses"
NEEDS_GRADIENTS = "needs gradients (our kernels have no backward)"
AUTOCAST = "under autocast: it runs in another dtype than its operands' (torch's op casts them)"
MIXED_DTYPES = "operands of two dtypes outside autocast (torch's op refuses them)"
MIXED_DTYPES_MARK = "autotune_mixed_dtypes"  # node.meta key: autocast.py marks such a matmul
# what the graphs AOTAutograd makes of a training step leave (training.py)
PADDED = "a winner with padded output rows, not routed in a training step's graphs"
CHECKPOINTED = "a matmul inside an activation-checkpointed region, not read by routing"
DECOMPOSED = "made pointwise work by the compiler's decompositions: no GEMM in the step's graphs"
ADDMM_SCALED = f"{UNROUTED_ARGUMENTS} (an addmm's beta=, alpha=)"
DYNAMIC_IN_STEP = "a dynamic shape (per call only where M or K alone is dynamic, in a matrix product)"


def short_k(k: int) -> str:
    """Why a product of a step's graphs over fewer than MIN_GEMM_K terms is left to the
    compiler: not a GEMM (problem.MIN_GEMM_K), as Dynamo's graph and `record` leave it."""
    return f"K = {k}: an {'outer' if k == 1 else 'empty'} product, left to the compiler"


def matmul_sites(graph):
    """Every matmul node of `graph` (see the module) as a Site, in graph order."""
    from ..problem import MIN_GEMM_K

    import torch

    fused = {getattr(torch, name): name for name in FUSED_OPS if hasattr(torch, name)}
    fused[torch.nn.functional.multi_head_attention_forward] = "multi_head_attention"  # Dynamo keeps it whole
    einsums = einsum_targets()
    others = other_targets()
    for node in graph.nodes:
        other = other_kind(node, others)
        if other is not None:
            yield Site(node, other, None, None, static=False, skip=f"{OTHER_KIND} ({other})")
            continue
        if node.op == "call_function" and node.target in einsums:  # met, and said to stay the compiler's
            yield Site(node, "einsum", None, None, static=False, skip=EINSUM)
            continue
        kind = fused_kind(node, fused)
        if kind is not None:
            yield Site(node, kind, None, None, static=False, skip=FUSED)
            continue
        scaled = match_scaled(node)
        if scaled is not None:
            values = tuple(node_value(x) for x in (scaled.a, scaled.b, scaled.scale_a, scaled.scale_b, scaled.bias))
            static = is_static(*values)
            skip = "" if static else "a dynamic shape"
            if records_gradients(node, *values):
                static, skip = False, NEEDS_GRADIENTS
            yield Site(node, "scaled_mm", None, scaled, values=values, static=static, skip=skip)
            continue
        match = match_matmul(node)
        if match is None:
            continue
        x, w = node_value(match.a), node_value(match.b)
        bias = None if match.bias_apart else node_value(match.bias)
        op = "addmm" if bias is not None else "bmm" if (x.dim() == 3 and match.fold is None) or match.batch \
            else "mm"
        if match.unrouted:  # read no further: its operands need not make a GEMM problem
            yield Site(node, op, match, None, static=False, skip=match.unrouted)
            continue
        want = node_value(node)
        cast = want is not None and any(t is not None and t.dtype != want.dtype
                                        for t in (x, w, node_value(match.bias)))  # a bias apart too
        grads = records_gradients(node, x, w, bias)
        if grads or not is_static(x, w, bias):
            if concrete(x.shape[-1]) == 1:  # a multiply serves any shapes, and has a backward
                yield Site(node, op, match, None, static=False, skip=OUTER, outer=True)
            elif grads:
                yield Site(node, op, match, None, static=False, skip=NEEDS_GRADIENTS)
            elif cast:
                yield Site(node, op, match, None, static=False, skip=_cast_reason(node))
            elif is_static(w, bias) and (bias is None or _row_bias(bias)) and match.batch is None \
                    and concrete(x.shape[-1]) is not None:
                a = x.reshape(-1, concrete(x.shape[-1])) if match.fold is not None else x
                yield Site(node, op, match, None, a, w.t() if match.transpose_b else w, bias, static=False,
                           dynamic_m=True)
            else:
                yield Site(node, op, match, None, static=False, skip="a dynamic shape")
            continue
        a = x.reshape(-1, x.shape[-1]) if match.fold is not None else x
        b = w.t() if match.transpose_b else w
        if match.batch is not None:
            a, b = x.reshape(-1, *x.shape[-2:]), w.reshape(-1, *w.shape[-2:])
        skip, outer = "", False
        if a.shape[-1] == 1:
            skip, outer = OUTER, True
        elif cast:
            skip = _cast_reason(node)
        elif bias is not None and match.fold is not None and not _row_bias(bias):
            skip = "a linear's bias of two dims"
        elif a.shape[-1] < MIN_GEMM_K:
            skip = f"K = {a.shape[-1]}: an empty product, left to the compiler"
        yield Site(node, op, match, None, a, b, bias, skip=skip, outer=outer)


def _cast_reason(node) -> str:
    """Why a matmul whose operands' dtypes are not its own is not routed: autocast's, or
    two dtypes the user's program mixed (autocast.py marks those)."""
    return MIXED_DTYPES if node.meta.get(MIXED_DTYPES_MARK) else AUTOCAST


def _row_bias(bias) -> bool:
    """A bias the folded rows all add: [N], or [1, N] (at::linear fuses it, squeezed)."""
    return bias.dim() == 1 or (bias.dim() == 2 and concrete(bias.shape[0]) == 1)


def concrete(size) -> int | None:
    """A size as an int: an int, or a symbolic size torch has fixed to one; else None."""
    if isinstance(size, int):
        return size
    node = getattr(size, "node", None)
    value = node.maybe_as_int() if node is not None and hasattr(node, "maybe_as_int") else None
    return int(value) if value is not None else None
