"""The torch.compile backend that routes a graph's matmuls (see the package)."""
import operator
import warnings  # no `from __future__ import annotations`: torch.library reads the ops' annotations
from dataclasses import replace
from typing import Any, Sequence

from ..api import AutotuneFallbackWarning, Dispatch, Dispatcher
from .autocast import cast_autocast_operands
from .dynamic import dynamic_problem, dynamic_route
from .composite import lower_products
from .einsum import lower_einsums
from .eager import launch_parts, warmed_call
from .gqa import fold_attention
from .groups import Group, find_groups, place_side_by_side, real_values, rewrite_group, worth_grouping
from .report import GROUPED, summary
from .ops import Route, contiguous, keep_route, register_ops, route_name
from .outer import rewrite_outer
from .padded import rows_whole_for_strict_users
from .pdl import pdl_form
from .graph_edits import fill_example_values
from .scaled import rewrite_scaled
from .sites import PADDED, Site, matmul_sites, node_value
from .training import compile_step, mark_step

__all__ = ["routing_backend"]


# -- the backend ---------------------------------------------------------------------------------

class routing_backend:
    """A torch.compile backend: route the graph's matmuls to cached winners (see the module),
    then compile with `inner` ("inductor", another registered backend's name, or a backend
    function), `mode` and `options` taken as torch.compile takes them. `routes`: a list that
    gets the Dispatch of every matmul routed. `group_linears`, `fold_gqa`, `split_keys`: see
    `compile`."""

    def __init__(self, dispatcher: Dispatcher, inner: Any = "inductor", mode: str | None = None,
                 options: dict | None = None, routes: list | None = None, tune: Any = None,
                 group_linears: bool | None = None, fold_gqa: bool = True, split_keys: bool | None = None) -> None:
        self.dispatcher = dispatcher
        self.inner = inner
        self.mode = mode
        self.options = {key.replace("-", "_"): value for key, value in (options or {}).items()}  # as torch.compile
        self.routes = routes if routes is not None else []
        self.tune = tune
        self.group_linears = group_linears
        self.fold_gqa = fold_gqa
        self.split_keys = split_keys
        self.pdl = False  # Inductor's PDL, read from its config at each graph (inductor_pdl)
        # another backend takes them as torch.compile passes them: keywords of its call
        self.inner_kwargs = {} if inner == "inductor" else {
            **({"mode": mode} if mode and mode != "default" else {}), **({"options": options} if options else {})}
        self._check_compiler(options or {})

    def _check_compiler(self, options: dict) -> None:
        """A mode, option or backend name that torch does not know is said now, as
        torch.compile says it (at the call, not at the first forward inside Dynamo's error)."""
        import torch

        if self.inner != "inductor":
            if isinstance(self.inner, str):
                torch._dynamo.lookup_backend(self.inner)  # InvalidBackend
            return
        from torch._inductor import config, list_mode_options

        if self.mode:
            list_mode_options(self.mode)  # "Unrecognized mode=..."
        known = config.get_config_copy()
        for key in options:  # named as given
            if key.replace("-", "_") not in known:  # torch's message lists every option: this one names where
                raise RuntimeError(f"Unexpected optimization option {key} (see torch._inductor.list_options())")

    def __deepcopy__(self, memo) -> "routing_backend":
        """Itself: a backend is the compile's settings, the shared dispatcher (its lock, its
        cache reads) and the caller's `routes`; a deep copy of a compiled model compiles
        through the same one, as a copy of torch.compile(model) does through its backend."""
        return self

    def inductor_config(self) -> dict:
        """The config patches Inductor compiles with (the mode's options, then `options`);
        empty for another inner backend."""
        if self.inner != "inductor":
            return {}
        from torch._inductor import list_mode_options

        return {**(list_mode_options(self.mode) if self.mode else {}), **self.options}

    def pins_aten(self) -> bool:
        """Whether an aten winner is pinned through the opaque op (under Inductor's GEMM
        tuning, which would otherwise choose again), rather than left as torch's call."""
        config = self.inductor_config()
        return bool(config.get("max_autotune") or config.get("max_autotune_gemm"))

    def __call__(self, gm, example_inputs):
        import torch

        routed_before = len(self.routes)  # this graph's Dispatches follow
        config = self.inductor_config()
        pin_aten = self.pins_aten()
        self.pdl = self.inductor_pdl(config)
        dynamos = set(gm.graph.nodes)  # Dynamo's own nodes: fill_example_values leaves them alone
        folds = fold_attention(gm.graph, self.split_keys) if self.fold_gqa else []  # recompiled in _rewrite
        lowered, einsums_left = lower_einsums(gm.graph)  # the others are matmuls now, met as any
        lowered += lower_products(gm.graph)  # inner, tensordot, multi_dot: the mm calls torch runs
        if cast_autocast_operands(gm.graph) or lowered:  # under autocast: met in the dtype they run in
            gm.recompile()
        # those that record gradients are routed in the training step's graphs (training.py)
        sites, marks = mark_step(self, gm, list(matmul_sites(gm.graph)))
        for site in sites:
            site.skip = einsums_left.get(site.node, site.skip)
            if site.dynamic_m:
                site.plan = dynamic_problem(self.dispatcher, site.a, site.b, site.bias)
                if isinstance(site.plan, str):
                    site.skip = site.plan
        graphs = bool(config.get("triton.cudagraphs"))  # replayed as CUDA graphs
        groups = (find_groups(sites, real_values(gm, example_inputs), self._problem)
                  if self.group_linears is not False else [])
        if self.group_linears is None:  # on a GPU, where CUDA graphs replay them (see `compile`)
            groups = [g for g in groups if graphs and g.weights[0].device.type == "cuda"]
        self._tune_missing(sites, [g.problem for g in groups])
        routed_groups = [(g, *route) for g in groups for route in [self._route_group(g, graphs)]
                         if route is not None]
        self._rewrite(gm, pin_aten, sites, routed_groups, folds, dynamos)
        graph = ""  # which graphs the line below counts, where not Dynamo's alone
        try:
            if self.inner == "inductor" and marks:
                compiled, graph = compile_step(self, gm, example_inputs, config, marks)
            elif self.inner == "inductor":
                from torch._inductor.compile_fx import compile_fx

                compiled = compile_fx(gm, example_inputs, config_patches=config)
            else:
                inner = self.inner if callable(self.inner) else torch._dynamo.lookup_backend(self.inner)
                compiled = inner(gm, example_inputs, **self.inner_kwargs)
        except BaseException:
            # the graph is not compiled (an error, or a restart of Dynamo's analysis that
            # calls the backend again): its routes are not the compile's
            del self.routes[routed_before:]
            raise
        summary(self.routes[routed_before:], len(routed_groups), len(folds), sum(f.splits is not None for f in folds),
                graph)
        for group, *_ in routed_groups:  # after the compile, which traced them where they were (groups.py)
            place_side_by_side(group.weights, group.biases)
        return compiled

    def inductor_pdl(self, config: dict) -> bool:
        """Whether Inductor launches the graph's kernels as programmatic dependent launches
        (its `triton.enable_pdl`, from `options` or TORCHINDUCTOR_ENABLE_PDL=1): then our
        GEMVs are launched so too (`pdl_form`)."""
        if self.inner != "inductor":
            return False
        if "triton.enable_pdl" in config:
            return bool(config["triton.enable_pdl"])
        import torch._inductor.config as inductor

        return bool(getattr(inductor.triton, "enable_pdl", False))

    def _problem(self, site: Site):
        if site.scaled is not None:
            return self.dispatcher.scaled_problem_for(*site.values, site.scaled.out_dtype, site.scaled.fast_accum)
        return self.dispatcher.problem_for(site.a, site.b, site.bias)

    def _tune_missing(self, sites: list[Site], group_problems: list | None = None) -> None:
        """Tune, in one tuner, the problems of `sites` and `group_problems` (the groups' one
        GEMMs) that have no winner here (see tuning.py; in a torch.distributed job the ranks share
        them): `tune` True or a TuneSettings, or None where they are on a GPU."""
        # every problem the graph routes, cached or not: the same list on every rank of a job
        problems = []
        for site in sites:
            if site.skip:
                continue
            if site.dynamic_m:  # its plan: the problem at its hint, the M values to tune
                problems += site.plan.problems()
            else:
                problems.append(self._problem(site))
        self.tune_problems(problems + list(group_problems or []))

    def tune_problems(self, problems: list) -> None:
        """Tune, in one tuner, those of `problems` (None: not a problem) that have no winner
        here, where `tune` asks for it (see `_tune_missing`)."""
        if self.tune is False:
            return
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        from .tuning import settings_for, tune_graph

        # on the CPU, only when asked: Triton runs there under the interpreter alone
        wanted = {p: None for p in problems if p is not None and (self.tune is not None or p.device == "cuda")}
        if not wanted:
            return
        device = next(iter(wanted)).device
        with unset_fake_temporarily():
            missing = tune_graph(list(wanted), self.dispatcher.lookup_entry,
                                 settings_for(self.tune, device, self.dispatcher.cache_dir))
        if missing:
            self.dispatcher.reset()  # plans made before the tune said "nothing cached"

    def _rewrite(self, gm, pin_aten: bool, sites: list[Site] | None = None,
                 groups: Sequence[tuple[Group, str, Dispatch]] = (), folds: Sequence = (),
                 dynamos: set | None = None) -> None:
        """Replace the graph's matmuls by our ops: `groups` ((Group, route name, Dispatch)) by
        one op each, the other `sites` one by one (`folds`: the attentions gqa.py rewrote;
        `dynamos`: the nodes Dynamo made, by default those there now)."""
        import torch
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        graph = gm.graph
        dynamos = set(graph.nodes) if dynamos is None else dynamos
        sites = list(matmul_sites(graph)) if sites is None else sites
        changed = bool(groups) or bool(folds)
        grouped = set()
        for group, name, info in groups:
            for site in group.sites:
                site.refresh()
            self._rewrite_group(graph, group, name, info)
            grouped.update(site.node for site in group.sites)
        for site in sites:
            if site.node in grouped:
                continue
            site.refresh()
            node, match = site.node, site.match
            if site.skip:
                if site.outer:
                    rewrite_outer(graph, site)
                    changed = True
                self.routes.append(Dispatch(site.op, f"torch.{site.op}", self._problem(site) if site.static else None,
                                            fallback=True, reason=site.skip))
                continue
            if site.scaled is not None:
                changed |= rewrite_scaled(self, graph, node, site.scaled, pin_aten)
                continue
            if site.dynamic_m:
                changed |= self._rewrite_dynamic(graph, site)
                continue
            a, b, bias = site.a, site.b, site.bias
            with unset_fake_temporarily(), warnings.catch_warnings():
                warnings.simplefilter("ignore", AutotuneFallbackWarning)  # reported in `routes`
                route = self._route(a, b, bias, pin_aten)
            if route is None:
                continue
            op, name, padded = route
            with graph.inserting_before(node):
                a_node, b_node = match.a, match.b
                if match.fold is not None:
                    a_node = graph.call_function(torch.reshape, (a_node, (a.shape[0], a.shape[1])))
                if match.batch is not None:
                    a_node = graph.call_function(torch.reshape, (a_node, tuple(a.shape)))
                    b_node = graph.call_function(torch.reshape, (b_node, tuple(b.shape)))
                if match.transpose_b:
                    b_node = graph.call_function(torch.t, (b_node,))
                out = graph.call_function(op, (a_node, b_node, None if match.bias_apart else match.bias, name))
                if match.fold is not None:
                    out = graph.call_function(torch.reshape, (out, (*match.fold, b.shape[-1])))
                if match.batch is not None:
                    out = graph.call_function(torch.reshape, (out, (*match.batch, a.shape[-2], b.shape[-1])))
                if match.bias_apart:
                    out = graph.call_function(operator.add, (out, match.bias))
            node.replace_all_uses_with(out)
            product = node_value(node)
            graph.erase_node(node)
            if padded:
                rows_whole_for_strict_users(graph, out, product)
            changed = True
        if changed:
            fill_example_values(graph, dynamos)  # AOTAutograd's cache reads them
            graph.lint()
            gm.recompile()

    def _route_group(self, group: Group, graphs: bool) -> tuple[str, Dispatch] | None:
        """(route name, Dispatch) of `group`'s one GEMM (`group.problem`), where its winner's time beats
        the sum of its parts' (groups.py) and it runs from the opaque op; else None (the parts go
        one by one). `graphs`: the compiled graph replays as CUDA graphs (its op may not place
        weights)."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        from ..settings import MeasurePolicy, TuneSettings

        problems = [group.problem] + [self._problem(site) for site in group.sites]
        found = [None if p is None else self.dispatcher.lookup_entry(p) for p in problems]
        if any(f is None or f[1].winner is None for f in found):
            return None
        one_ms, *part_ms = (entry.winner.ms for _, entry in found)
        policy = self.tune.measure if isinstance(self.tune, TuneSettings) else MeasurePolicy
        if not worth_grouping(part_ms, one_ms, policy.vendor_margin):
            return None
        with unset_fake_temporarily(), warnings.catch_warnings():
            warnings.simplefilter("ignore", AutotuneFallbackWarning)
            call, info, built = self.dispatcher.route(group.a, group.b, group.bias)
            if info.fallback or info.problem is None or (built is not None and built.pitch is not None):
                return None
            if self.pdl:
                info, built = pdl_form(self.dispatcher, info, built, group.a.device)
            shape = info.problem.out_shape()
            name = route_name(info, contiguous(shape), "group in graphs" if graphs else "group", built)
            keep_route(name, lambda: Route(
                info, call if built is None else warmed_call(self.dispatcher, info, built, group.a, group.b,
                                                             group.bias),
                tuple(shape), contiguous(shape), built, None, places=not graphs))
        return name, info

    def _rewrite_group(self, graph, group: Group, name: str, info: Dispatch) -> None:
        """Replace a group's linears by our one op (groups.rewrite_group); each linear's
        Dispatch names the one GEMM."""
        for site in group.sites:
            self.routes.append(replace(info, problem=self._problem(site),
                                       reason=f"{GROUPED}{info.problem.describe()}, with "
                                       f"{len(group.sites) - 1} other linear(s) of its input"))
        rewrite_group(graph, group, register_ops()["gemm_group"], name)

    def _rewrite_dynamic(self, graph, site: Site) -> bool:
        """Replace a matmul whose M is dynamic by our opaque op over a DynamicCall (see
        dynamic.py), where a winner is cached at one of its tuned M values at least."""

        import torch

        name = dynamic_route(self.dispatcher, self.routes, site.op, site.plan)
        if name is None:
            return False
        ops = register_ops()
        problem = site.plan[0]
        match, node = site.match, site.node
        with graph.inserting_before(node):
            a_node, b_node = match.a, match.b
            if match.fold is not None:
                a_node = graph.call_function(torch.reshape, (a_node, (-1, problem.k)))
            if match.transpose_b:
                b_node = graph.call_function(torch.t, (b_node,))
            out = graph.call_function(ops["gemm"], (a_node, b_node, None if match.bias_apart else match.bias, name))
            if match.fold is not None:  # back to A's leading dims, whatever their sizes
                sizes = graph.call_method("size", (match.a,))
                lead = graph.call_function(operator.getitem, (sizes, slice(None, -1)))
                shape = graph.call_function(operator.add, (lead, (problem.n,)))
                out = graph.call_function(torch.reshape, (out, shape))
            if match.bias_apart:
                out = graph.call_function(operator.add, (out, match.bias))
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        return True

    def opaque_route(self, a, b, bias):
        """(the opaque op, route name) for a matmul of a graph that is past AOTAutograd
        (training.py: the Triton op is traced by AOTAutograd, which has run), or None to leave
        it to the compiler. A winner with padded rows is left too: the graph's views and its
        saved tensors were traced with contiguous rows."""
        route = self._route(a, b, bias, self.pins_aten(), opaque=True)
        return None if route is None else route[:2]

    def _route(self, a, b, bias, pin_aten: bool, opaque: bool = False):
        """(op, route name, whether its output rows are padded) for this matmul, or None to
        leave it to the compiler. `opaque`: the opaque op, never the Triton op; no padded
        winner (see `opaque_route`)."""
        call, info, built = self.dispatcher.route(a, b, bias)
        if info.fallback or info.problem is None:
            self.routes.append(info)
            return None
        if opaque and built is not None and built.pitch is not None:
            self.routes.append(replace(info, uid=f"torch.{info.op}", fallback=True, reason=PADDED))
            return None
        if self.pdl:
            info, built = pdl_form(self.dispatcher, info, built, a.device)
        ops = register_ops()
        problem = info.problem
        shape = problem.out_shape()
        pitch = built.pitch if built is not None else None
        if pitch is None:
            strides = contiguous(shape)
        else:
            strides = contiguous((*shape[:-1], pitch))[:-1] + (1,)
        parts = launch_parts(built)
        triton_ok = (not opaque and parts is not None and "triton_gemm" in ops and not built.keeps_buffers
                     and pitch is None and tuple(getattr(parts[0], "arg_names", ()))[:4] == ("A", "B", "C", "BIAS"))
        if built is None and not pin_aten:
            self.routes.append(info)
            return None  # torch's own op is the winner: the compiler's ATen choice runs it
        name = route_name(info, tuple(strides), "triton" if triton_ok else "opaque", built)
        warmed = built is not None and not triton_ok
        keep_route(name, lambda: Route(
            info, warmed_call(self.dispatcher, info, built, a, b, bias) if warmed else call,
            tuple(shape), tuple(strides), built, parts if triton_ok else None))
        self.routes.append(info)
        return (ops["triton_gemm"] if triton_ok else ops["gemm"]), name, pitch is not None
