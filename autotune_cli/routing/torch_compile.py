"""`compile`: torch.compile with the routing backend (backend.py) around the compiler."""

from __future__ import annotations

from typing import Any

from ..api import Dispatcher, default_dispatcher
from ..errors import UserError
from .backend import routing_backend

__all__ = ["DEFAULT_MODE", "compile"]

DEFAULT_MODE = "reduce-overhead"  # Inductor with CUDA graphs, as its max-autotune mode runs


def compile(model=None, *, cache_dir=None, backend: Any = "inductor", mode: str | None = None,
            options: dict | None = None, routes: list | None = None, tune: Any = None,
            group_linears: bool | None = None, fold_gqa: bool = True, split_keys: bool | None = None,
            **torch_compile_kwargs):
    """torch.compile(model, ...) with its matmuls routed to this machine's cached winners
    (see the package); without `model`, a decorator, as torch.compile's. `cache_dir`: the
    cache to read (default: the one autotune_cli.mm reads). `backend`, `mode`, `options`
    and every other keyword are torch.compile's; `routes` (a list) collects the Dispatch of
    each matmul met, as graphs compile: the routed ones, and the others with `fallback` True
    and the reason.

    `tune`: the problems a graph meets with no winner here are tuned as it compiles (all of
    a graph in one tuner, progress on stderr, the winners cached): None (the default) where
    they are on a GPU, True also on the CPU (Triton under its interpreter), False never (a
    deployment with a filled cache), or a TuneSettings to tune with (its cache folder is the
    one read: `cache_dir` where given).

    `group_linears`: linears that read one input (attention's q, k and v) run as one GEMM
    where its tuned time beats theirs summed (groups.py): their weights are moved side by
    side into one buffer as the graph compiles (each Parameter a view of it, its values
    unchanged). None (the default): on a GPU where Inductor replays CUDA graphs (the op's host
    work is paid once, at capture); True always; False never (the model's storage is left
    alone).

    `fold_gqa`: an attention that repeats its K and V heads for the query heads sharing them
    (transformers' repeat_kv before scaled_dot_product_attention, at decode) runs over K and V
    once, those query heads folded into its rows (gqa.py), where batch x K/V heads is at
    least gqa.MIN_HEADS: the same sums, without a copy of the cache per step. False leaves
    the attention as written.

    `split_keys`: such an attention at decode (a few rows per K/V head, a static cache) may run
    autotune's split-key kernel (decode_attention.py) at any batch x K/V heads, where SDPA's
    kernels run one program per head over all the keys: None (the default) where it beat the
    form the compile would run otherwise, timed on this GPU as the graph compiles
    (split_choice.py; never off a GPU); True always; False never.

    Where Inductor launches its kernels as programmatic dependent launches (`options=
    {"triton.enable_pdl": True}` or TORCHINDUCTOR_ENABLE_PDL=1; Hopper and later), the routed
    triton::gemv winners of static shape are launched so too (`pdl_form`), so that no
    boundary of a decode step breaks the chain. It is not our default: on a Llama decode
    step it gained 0.7% at batch 1 and lost 11% at batch 8 (bench/README.md, `ours-pdl`).

    With Inductor and no `mode`, the mode is DEFAULT_MODE: CUDA graphs replay the compiled
    model, as under `mode="max-autotune"` (without them a small batch is bound by the
    CPU's launches; bench/model_e2e.py). `mode="default"` (or `options` that set
    "triton.cudagraphs") compiles without them."""
    import torch

    from ..settings import TuneSettings

    if not (tune is None or isinstance(tune, (bool, TuneSettings))):
        raise TypeError(f"tune takes None, True, False or a TuneSettings, not {tune!r}")
    if isinstance(tune, TuneSettings):  # said at the call, not for each problem at the first forward
        _check_tune(tune)
    if routes is not None and not isinstance(routes, list):
        raise TypeError(f"routes takes a list (each Dispatch is appended to it), not {type(routes).__name__}")
    if mode is None and backend == "inductor" and "triton.cudagraphs" not in (options or {}):
        mode = DEFAULT_MODE
    if backend == "inductor":
        # as torch.compile(backend="inductor") does as it wraps: a backend given as a callable
        # would import Inductor at the first call, inside the compile it times
        import torch._inductor.compile_fx  # noqa: F401
    if cache_dir is None and isinstance(tune, TuneSettings):
        cache_dir = tune.cache_dir
    dispatcher = default_dispatcher if cache_dir is None else Dispatcher(cache_dir)
    # what the API's functions read of torch, made now: Dynamo traces autotune_cli.linear and
    # friends into the graph and guards on it; made by the backend in between, it failed them
    default_dispatcher._torch()
    routing = routing_backend(dispatcher, backend, mode, options, routes, tune, group_linears, fold_gqa,
                              split_keys)
    return torch.compile(model, backend=routing, **torch_compile_kwargs)


def _check_tune(tune) -> None:
    """The settings as the command checks its flags (tune/checks.py), and its templates'
    names, a plugin's once its module is loaded: at the call, each in one line."""
    from ..plugins import load_plugins
    from ..tune.checks import check_settings

    check_settings(tune, lambda field: f"tune.{field}")
    load_plugins(tune.plugins)
    _check_templates(tune.templates)


def _check_templates(names: tuple[str, ...] | None) -> None:
    """A name in the settings' templates that is neither a registered uid nor a backend: said
    at the call, in one short line (at the first forward it was said for every problem the
    graph met, each with the whole list of uids)."""
    from ..templates import all_templates, unknown_template_names

    for name in unknown_template_names(names)[:1]:
        backends = sorted({t.backend for t in all_templates()})
        raise UserError(f"tune.templates: unknown template {name!r} (a uid such as triton::mm, or a "
                        f"backend: {', '.join(backends)})")
