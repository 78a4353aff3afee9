"""Matmuls that record gradients, routed in the graphs AOTAutograd makes of a training step.

Our ops have no backward, so in Dynamo's graph a matmul whose output requires grad stays
torch's. Inductor's AOTAutograd then splits the step into a forward graph and a backward
graph of aten ops, where every product is a plain aten.mm, addmm or bmm that records
nothing: the forward's, and the two each one gets in the backward (dA = dC @ B^T and
dB = A^T @ dC, with their own layouts). Each is a GEMM problem of its own, the one `record`
lists for it, and is routed there to its winner through the opaque op.

Dynamo's pass marks those matmuls (`mark`: a key of node.meta["custom"], which AOTAutograd
copies onto the aten nodes it traces from a node, the backward's included); a matmul of
the split graphs met unmarked was routed, or said to stay the compiler's, in Dynamo's
graph already.

An activation-checkpointed region (torch.utils.checkpoint) is a subgraph of Dynamo's graph,
which its pass does not rewrite; AOTAutograd inlines it into the graphs it makes, the
inference graph included, and its recomputation into the backward's. So the region's
matmuls that may be routed are marked too (`checkpointed`), whether they record gradients
or not, and routed there.

A compile that marks one runs without AOTAutograd's own cache: it keys a compiled step by
Dynamo's graph, which holds none of the routing done here, and would hand the routed step to
a compile that routes nothing (and ours a step compiled without it). Inductor's cache of
each split graph still serves: it keys them by their text, routes included.
"""

from __future__ import annotations

import contextlib
from typing import Any

from .dynamic import dynamic_problem, dynamic_route
from .sites import (ADDMM_SCALED, AUTOCAST, BADDBMM, CHECKPOINTED, DECOMPOSED, DYNAMIC_IN_STEP, FUSED,
                    NEEDS_GRADIENTS, concrete, is_static, matmul_sites, short_k)

__all__ = ["TrainingCompile", "checkpointed", "compile_step", "mark", "mark_step", "marked"]

MARK = "autotune"  # the key of node.meta["custom"]
TRAINING = "training"
NUMBER = "autotune_site"  # and the marked matmul's number in its Dynamo graph (`mark`)


def mark(node, marks: list, op: str) -> None:
    """Mark a matmul of Dynamo's graph (its op: mm, addmm or bmm) for the split graphs' pass,
    numbered by its place in `marks` (the graph's marked matmuls' ops)."""
    node.meta["custom"] = {**(node.meta.get("custom") or {}), MARK: TRAINING, NUMBER: len(marks)}
    marks.append(op)


def marked(node) -> bool:
    return (node.meta.get("custom") or {}).get(MARK) == TRAINING


def checkpointed(gm) -> list:
    """The subgraphs of `gm`'s activation-checkpointed regions (Dynamo's
    tag_activation_checkpoint calls), nested ones included, each once (its matmuls are
    marked once, whichever calls run it)."""
    import torch

    target = torch.ops.higher_order.tag_activation_checkpoint
    found: list = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is target and getattr(node.args[0], "op", "") == "get_attr":
            body = getattr(gm, node.args[0].target)
            found += [b for b in (body, *checkpointed(body)) if all(b is not f for f in found)]
    return found


def unfused(site) -> bool:
    """Whether a site is F.multi_head_attention_forward: one node in Dynamo's graph, which
    AOTAutograd traces into plain aten matmuls (the projections, the two attention bmms),
    each marked with it and routed there (torch's fused attention op, its inference fast
    path, stays one op there too and is left whole)."""
    return site.skip == FUSED and site.op == "multi_head_attention"


def mark_step(backend, gm, sites: list) -> tuple[list, list]:
    """(the `sites` of Dynamo's graph `gm` routed there, the marked matmuls' ops): with
    Inductor, those that record gradients are marked, and so is each matmul of `gm`'s
    activation-checkpointed regions that may be routed (under autocast too: AOTAutograd
    traces it in the dtype it runs in); the regions' others, and every one under another
    compiler, are said in `backend.routes` to stay the compiler's."""
    from ..api import Dispatch

    marks: list[str] = []
    inductor = backend.inner == "inductor"
    if inductor:
        for site in sites:
            if (site.skip == NEEDS_GRADIENTS and site.match is not None) or unfused(site):
                mark(site.node, marks, site.op)
        sites = [site for site in sites if not marked(site.node)]
    for body in checkpointed(gm):
        for site in matmul_sites(body.graph):
            if inductor and site.match is not None and site.skip in ("", NEEDS_GRADIENTS, AUTOCAST):
                mark(site.node, marks, site.op)
            else:
                backend.routes.append(Dispatch(site.op, f"torch.{site.op}", None, fallback=True,
                                               reason=site.skip or CHECKPOINTED))
    return sites, marks


def compile_step(backend, gm, example_inputs, config: dict, marks: list) -> tuple[Any, str]:
    """Inductor's compile of Dynamo's graph `gm`, whose `marks` (`mark_step`) are routed in
    the graphs AOTAutograd makes of it (`TrainingCompile`), without AOTAutograd's cache (see
    the module); each marked matmul no graph held as a GEMM is said in `backend.routes`.
    Returns the compiled graph and which graphs its one line counts (" in the forward and
    the backward" where the backward was compiled with the forward, else "")."""
    from torch._inductor.compile_fx import compile_fx

    training = TrainingCompile(backend)
    with without_autograd_cache():
        compiled = compile_fx(gm, example_inputs, inner_compile=training, config_patches=config)
    training.lazy = True
    backend.routes += training.unmet(marks)
    return compiled, " in the forward and the backward" if training.backward_with_forward else ""


def without_autograd_cache():
    """AOTAutograd's cache off (see the module)."""
    import torch._functorch.config as functorch

    return functorch.patch(enable_autograd_cache=False)


class TrainingCompile:
    """Inductor's inner compile (compile_fx's `inner_compile`) for a graph with marked matmuls:
    in the graphs AOTAutograd makes of it, route them (see the module), then compile as
    Inductor does. `backend`: the routing backend, whose dispatcher, tuning and
    `routes` serve here as in Dynamo's graph.

    A backward compiled at its first run says its own line; one compiled with the forward
    (a dynamic shape saved for it) is in the line Dynamo's graph says (`lazy` False until
    compile_fx returns), so that no matmul is counted twice. `met`: the numbers of the
    marked matmuls the forward (or inference) graph holds as GEMMs (see `unmet`)."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.lazy = False  # set by the backend once compile_fx has returned
        self.backward_with_forward = False  # a backward compiled before compile_fx returned
        self.met: set[int] = set()

    def unmet(self, marks: list) -> list:
        """A Dispatch for each of `marks` (`mark`) that the forward graph held no GEMM of:
        Inductor's decompositions, applied as AOTAutograd traces, made it pointwise work
        (a row by a column, K = 1, and under coordinate-descent tuning M or N = 1)."""
        from ..api import Dispatch

        return [Dispatch(op, f"torch.{op}", None, fallback=True, reason=DECOMPOSED)
                for number, op in enumerate(marks) if number not in self.met]

    def __call__(self, gm, example_inputs, **kwargs):
        from torch._inductor.compile_fx import compile_fx_inner

        from .report import summary

        before = len(self.backend.routes)
        # the forward's or an inference graph's (a checkpointed region's) marked matmuls are met
        route_marked(self.backend, gm, None if kwargs.get("is_backward") else self.met)
        compiled = compile_fx_inner(gm, example_inputs, **kwargs)
        if kwargs.get("is_backward") and self.lazy:  # compiled at the first backward, after the forward's line
            summary(self.backend.routes[before:], graph=" in the backward")  # not read as a graph break
        elif kwargs.get("is_backward"):  # counted in the forward's line, which says so
            self.backward_with_forward = True
        return compiled


def _aten_matmuls() -> dict:
    import torch

    aten = torch.ops.aten
    return {aten.mm.default: "mm", aten.addmm.default: "addmm", aten.bmm.default: "bmm"}


def _value(arg):
    return arg.meta.get("val") if hasattr(arg, "meta") else None


def _operands(node, op: str) -> tuple:
    """A matmul node's operand nodes: bias (None), a, b."""
    return (None, *node.args[:2]) if op != "addmm" else (node.args[0], *node.args[1:3])


def route_marked(backend, gm, met: set | None = None) -> None:
    """Replace each marked aten matmul of `gm` (a forward or backward graph) that has a
    winner by the opaque op; report every one in `backend.routes`. `met` gets the number
    (`mark`) of each."""
    import warnings

    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from ..api import AutotuneFallbackWarning, Dispatch
    from ..problem import MIN_GEMM_K

    targets = _aten_matmuls()
    found: list[tuple[Any, str, tuple]] = []  # (node, op, its operands' values): bias, a, b
    dynamic: list[tuple[Any, str, tuple, tuple]] = []  # and the plan of a dynamic M (dynamic.py)
    baddbmm = torch.ops.aten.baddbmm.default  # a marked attention's masked scores (multi_head_attention)
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is baddbmm and marked(node):
            backend.routes.append(Dispatch("baddbmm", "torch.baddbmm", None, fallback=True, reason=BADDBMM))
            continue
        op = targets.get(node.target) if node.op == "call_function" else None
        if op is None or not marked(node):
            continue
        if met is not None:
            met.add(node.meta["custom"].get(NUMBER))
        values = tuple(None if n is None else _value(n) for n in _operands(node, op))  # bias, a, b
        skip = ""
        if op == "addmm" and (len(node.args) > 3 or any(node.kwargs.get(k, 1) != 1 for k in ("beta", "alpha"))):
            skip = ADDMM_SCALED
        elif not all(isinstance(v, torch.Tensor) for v in values[1:]):
            skip = DYNAMIC_IN_STEP
        elif (k := concrete(values[1].shape[-1])) is not None and k < MIN_GEMM_K:  # M dynamic or not
            skip = short_k(k)  # a one-row step's weight gradients, a one-column output's input gradient
        elif not is_static(*values):  # a batch's rows alone (M, or a weight gradient's K): routed per call
            plan = DYNAMIC_IN_STEP if op == "bmm" else dynamic_problem(
                backend.dispatcher, values[1], values[2], values[0], k_too=not is_static(*values[::2]))
            if isinstance(plan, str):
                skip = plan
            else:
                dynamic.append((node, op, values, plan))
                continue
        if skip:
            backend.routes.append(Dispatch(op, f"torch.{op}", None, fallback=True, reason=skip))
            continue
        found.append((node, op, values))
    if not found and not dynamic:
        return
    backend.tune_problems([backend.dispatcher.problem_for(a, b, bias) for _, _, (bias, a, b) in found]
                          + [problem for *_, plan in dynamic for problem in plan.problems()])
    routed = _route_dynamic(backend, gm, dynamic)
    for node, op, values in found:
        bias, a, b = values
        with unset_fake_temporarily(), warnings.catch_warnings():
            warnings.simplefilter("ignore", AutotuneFallbackWarning)  # reported in `routes`
            route = backend.opaque_route(a, b, bias)
        if route is None:
            continue
        _replace(gm, node, op, *route, values)
        routed += 1
    if routed:
        gm.graph.lint()
        gm.recompile()


def _route_dynamic(backend, gm, dynamic: list) -> int:
    """Replace each matmul of `dynamic` ((node, op, values, plan)) that a winner serves at one
    of its M values by the opaque op over a DynamicCall (dynamic.dynamic_route); how many."""
    from .ops import register_ops

    gemm = register_ops()["gemm"]
    routed = 0
    for node, op, values, plan in dynamic:
        name = dynamic_route(backend.dispatcher, backend.routes, op, plan)
        if name is None:
            continue
        _replace(gm, node, op, gemm, name, values)
        routed += 1
    return routed


def _replace(gm, node, op: str, gemm, name: str, values: tuple) -> None:
    """Replace a matmul node by `gemm` (our op) over route `name`; `values`: its operands'
    (bias, a, b), on which the new node's value is made in their own fake mode (Inductor
    reads it)."""
    bias, a, b = values
    operands = _operands(node, op)  # read now: one routed before may feed it (replaced in its args)
    with gm.graph.inserting_before(node):
        out = gm.graph.call_function(gemm, (operands[1], operands[2], operands[0], name))
    mode = getattr(a, "fake_mode", None)
    with mode if mode is not None else contextlib.nullcontext():
        out.meta = {**node.meta, "val": gemm(a, b, bias, name)}
    node.replace_all_uses_with(out)
    gm.graph.erase_node(node)
