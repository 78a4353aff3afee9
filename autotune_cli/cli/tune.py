"""`autotune mm` and `autotune model`: parse, build the problem and the settings, tune (or
answer from the cache), print. torch and triton are imported inside the commands, and only
on the way to a tune."""

from __future__ import annotations

import time
from pathlib import Path
from typing import List, Optional

import typer

from .app import (
    _default_cache_dir,
    app,
    BiasShape,
    BudgetOpt,
    build_settings,
    CacheDirOpt,
    CompileWorkersOpt,
    Device,
    DeviceOpt,
    err,
    ExecutorKind,
    file_arg,
    ForceOpt,
    FROM_HELP,
    JsonOpt,
    likely_device,
    out,
    PluginOpt,
    resolve_device,
    say_notes,
    Search,
    SearchOpt,
    SeedOpt,
    SpaceOpt,
    stopped_by_signal,
    TemplatesOpt,
    TimeoutOpt,
    TuneBudgetOpt,
    WorkersOpt,
)
from ..errors import UserError
from .rows import StageClock, failed_line, pass_estimates, pass_totals, plan_rows, result_row


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether the command line gave the parameter `name` (its default does not count)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


@app.command(short_help="Tune one mm, addmm, bmm or float8 scaled_mm, or a list (--from).")
def mm(
    ctx: typer.Context,
    m: Optional[int] = typer.Option(None, "--m", help="Rows of A and of the output (required, unless --from)."),
    n: Optional[int] = typer.Option(None, "--n", help="Columns of B and of the output."),
    k: Optional[int] = typer.Option(None, "--k", help="The reduction dimension."),
    batch: Optional[int] = typer.Option(None, "--batch", "-b", help="Batch size: makes the problem a bmm."),
    bias: bool = typer.Option(False, "--bias", help="Add a bias: makes the problem an addmm."),
    bias_shape: Optional[BiasShape] = typer.Option(None, "--bias-shape", help="With --bias. n: a row vector (like "
                                                   "nn.Linear, the default); mn: a full matrix."),
    dtype: str = typer.Option("float16", "--dtype", help="float16, bfloat16, float32 or float8_e4m3fn (a scaled mm: "
                              "needs --scale)."),
    layout: Optional[str] = typer.Option(None, "--layout", help="nn, nt, tn or tt: A and B row-major (n) or transposed "
                                         "(t); default nn (float8: nt, its only layout)."),
    allow_tf32: bool = typer.Option(False, "--allow-tf32", help="float32 only: let the matrix units round inputs to "
                                    "tf32."),
    scale: Optional[str] = typer.Option(None, "--scale", help="float8 only: fp32 scales per tensor, per row of A and "
                                        "column of B, or per block (1x128 of A, 128x128 of B) (tensor|row|block)."),
    out_dtype: Optional[str] = typer.Option(None, "--out-dtype", help="float8 only: the output's dtype (default "
                                            "bfloat16)."),
    fast_accum: bool = typer.Option(False, "--fast-accum", help="float8 only: as "
                                    "torch._scaled_mm(use_fast_accum=True), the matrix units' own accumulation "
                                    "(faster, less precise)."),
    device: Optional[Device] = DeviceOpt,
    search: Search = SearchOpt,
    space: Optional[Path] = SpaceOpt,
    templates: Optional[str] = TemplatesOpt,
    workers: Optional[int] = WorkersOpt,
    timeout: float = TimeoutOpt,
    cache_dir: Optional[Path] = CacheDirOpt,
    force: bool = ForceOpt,
    json_out: bool = JsonOpt,
    top: int = typer.Option(10, "--top", help="Rows in the candidate table (not with --from: its table has a "
                            "row per problem, its winner)."),
    plugin: Optional[List[str]] = PluginOpt,
    interpreter_budget: float = BudgetOpt,
    seed: int = SeedOpt,
    budget: Optional[float] = TuneBudgetOpt,
    compile_workers: Optional[int] = CompileWorkersOpt,
    from_file: Optional[Path] = typer.Option(None, "--from", metavar="FILE", parser=file_arg, help=FROM_HELP),
    profile: bool = typer.Option(False, "--profile", help="Say where each tune's seconds went (stderr; --json has them "
                                 "as 'phases')."),
) -> None:
    """Tune one matrix multiply: mm, addmm (--bias), bmm (--batch) or a float8 scaled_mm
    (--scale); or a list of them (--from FILE) in one process."""
    from ..store.phases import process_age_s

    command = StageClock()
    command.stages["process_age"] = process_age_s()  # the interpreter's start and the imports
    from ..tune.hits import cached
    from ..problem import make_problem
    from ..tune.report import ProgressReporter, dumps, outcome_json, outcome_summary
    from .tables import outcome_table

    if from_file is not None:
        from .from_list import tune_list
        from ..model.shapes_file import FIELDS, read_listed

        # A problem option given with --from, even at its default value, is refused: the file says.
        given = [name for name in FIELDS if name in ctx.params and _given(ctx, name)]
        if given:
            raise UserError(f"--from takes each problem's fields from the file; --{given[0].replace('_', '-')} "
                            f"goes there (field {given[0]!r})")
        if _given(ctx, "top"):
            raise UserError("--top does not apply to --from: its table has one row per problem, its winner")

        counted = read_listed(from_file, device.value if device else "cpu")  # bad file: said first
        dev, notes = resolve_device(device, remembered_in=cache_dir or _default_cache_dir())
        settings = build_settings(dev, search=search, space=space, templates=templates, workers=workers,
                                  timeout=timeout, cache_dir=cache_dir, force=force, seed=seed,
                                  plugin=plugin, interpreter_budget=interpreter_budget,
                                  budget=budget, compile_workers=compile_workers)
        code = tune_list(from_file, [p.with_device(dev) for p, _, _ in counted], settings, json_out,
                         profile=profile, clock=command, counts=[count for _, count, _ in counted],
                         groups=[group for _, _, group in counted], notes=notes)
        if code:
            raise typer.Exit(code=code)
        return
    for flag, value in (("--m", m), ("--n", n), ("--k", k)):
        if value is None:
            raise UserError(f"missing option '{flag}' (or give a list of problems: --from FILE)")
    if bias_shape is not None and not bias:
        raise UserError(f"--bias-shape {bias_shape.value} needs --bias (an addmm)")
    if top < 1:
        raise UserError(f"--top must be at least 1, got {top}")
    # Validate the problem before anything slow happens (finding the device may import torch).
    problem = make_problem(m=m, n=n, k=k, batch=batch, dtype=dtype, layout=layout,
                           bias=(bias_shape or BiasShape.n).value if bias else None, allow_tf32=allow_tf32,
                           device=device.value if device else "cpu", scale=scale, out_dtype=out_dtype,
                           fast_accum=fast_accum)
    dev, notes = resolve_device(device, remembered_in=cache_dir or _default_cache_dir())
    problem = problem.with_device(dev)
    settings = build_settings(dev, search=search, space=space, templates=templates, workers=workers,
                              timeout=timeout, cache_dir=cache_dir, force=force, seed=seed,
                              plugin=plugin, interpreter_budget=interpreter_budget,
                              budget=budget, compile_workers=compile_workers)
    # the notes go before the reporter's first line, after the tuner's own checks of the input
    reporter = ProgressReporter(err, enabled=True, preamble=notes)
    # A hit is answered from the cache alone: no worker started, torch not imported. With
    # --space the tuner answers: it lists that space's configs to compare with the entry's.
    outcome = cached(settings, problem, reporter) if settings.space_file is None else None
    command.mark("looked_up")
    if outcome is None:
        from ..runner.processes import prestart_workers
        from ..tune.tuner import Tuner

        prestart_workers(dev, settings.measure.switches.start_method)  # their imports run beside the choices
        with stopped_by_signal(reporter.finished), Tuner(settings, reporter) as tuner:
            command.mark("tuner_ready")
            outcome = tuner.tune(problem)
            command.mark("tuned")
        command.mark("closed")
    if profile:
        from ..store.phases import summary_line

        fields = outcome.entry.phase_fields()
        if not outcome.from_cache:
            line = summary_line(fields)
        else:  # this command only read the cache: the seconds of the tune that answers it
            line = "phases: a cache hit"
            if fields.get("phases"):
                line += f"; when it was tuned, {summary_line(fields)}"
        err.print(line, markup=False, highlight=False)
        err.print("command (s since its start): " + ", ".join(
            f"{name} {value:.2f}" for name, value in command.stages.items() if value is not None),
            markup=False, highlight=False)
    if json_out:
        document = outcome_json(outcome)
        document["command_s"] = command.stages
        out.print(dumps(document), markup=False, soft_wrap=True)
        if outcome.winner is None:  # the exit status's reason, where a script's stderr shows it
            err.print(f"autotune: {outcome_summary(outcome)}", markup=False, highlight=False)
    else:
        out.print(outcome_table(outcome, top=top))
        out.print(outcome_summary(outcome))
    if outcome.winner is None:
        raise typer.Exit(code=1)


def tune_found(tuner, found, plan: list[dict], scaled: bool, clock: StageClock) -> list[dict]:
    """Tune every problem found: one after another on one device, or spread by a scaled
    tuner (`tune_all`) over several."""
    problems = list(dict.fromkeys(item.problem for item in found))  # a group's one GEMM may be a linear's too
    if scaled:
        results = dict(zip(problems, tuner.tune_all(problems)))
        return [result_row(item, planned, result.outcome, clock, result.slot, result.device,
                           result.host, result.error, result.span)
                for item, planned in zip(found, plan) for result in [results[item.problem]]]
    rows = []
    for item, planned in zip(found, plan):
        began = time.perf_counter()
        outcome = tuner.tune(item.problem)  # a problem found twice is tuned once
        rows.append(result_row(item, planned, outcome, clock, span=(began, time.perf_counter())))
    return rows


def refuse_what_does_not_fit(pending, devices, input_shapes: bool) -> None:
    """Every problem to be tuned (`pending`: no cache entry answers it) checked against each
    device's memory before the first tune starts: one that cannot fit is refused now, in one
    line that says which sizes to change, rather than after the others' tunes with no table.
    Ray's devices are known to its actors alone: there a problem that does not fit is failed."""
    from ..tune.tuner import does_not_fit

    refused = []
    for item in pending:
        why = next(filter(None, (does_not_fit(item.problem, device) for device in devices)), None)
        if why:
            refused.append((item, why))
    if not refused:
        return
    item, why = refused[0]
    more = f"; so do {len(refused) - 1} more of the model's problems" if len(refused) > 1 else ""
    if item.hint:
        at = ", ".join(f"{name}={value}" for name, value in item.hint.items())
        way = f"; it is read at {at}: give the dynamic dims smaller values with --hint (--plan lists the problems)"
    elif input_shapes:
        way = "; give a smaller --input-shape (--plan lists the problems)"
    else:
        way = ""
    raise UserError(f"{why}{more}{way}")


@app.command()
def model(
    path: Path = typer.Argument(..., metavar="MODEL", parser=file_arg,
                                help="A TorchScript file (torch.jit.save) or a torch.export program (.pt2)."),
    input_shape: Optional[List[str]] = typer.Option(None, "--input-shape", metavar="SHAPE", help="An example "
                                                    "input, e.g. "
                                                    "8x128x768:float16 (repeat, in order; TorchScript: needed, float32 "
                                                    "without a dtype; .pt2: the sizes its dynamic dims take)."),
    hint: Optional[List[str]] = typer.Option(None, "--hint", metavar="DIM=VALUES", help="Dynamic dims: "
                                             "values to tune at, the dim named as <input>.<dim>, the forward "
                                             "argument's name and the dim's index (dim 0 of an input named "
                                             "input: input.0=1,16,128), or by torch's symbol (s77=1,16); --plan "
                                             "shows each dim by a name this takes; repeatable."),
    trust_torchscript: bool = typer.Option(False, "--trust-torchscript", help="Read a TorchScript file: that loads and "
                                           "runs its code, so only for files you trust (a .pt2 never runs code)."),
    allow_tf32: bool = typer.Option(False, "--allow-tf32", help="float32 matmuls may use tf32."),
    plan_only: bool = typer.Option(False, "--plan", help="Only list the matmuls found; tune nothing."),
    groups: bool = typer.Option(False, "--groups", help="torch.export: also the one GEMM of the linears that read one "
                                "input (q, k, v), which autotune_cli.compile runs in their place."),
    device: Optional[Device] = DeviceOpt,
    search: Search = SearchOpt,
    space: Optional[Path] = SpaceOpt,
    templates: Optional[str] = TemplatesOpt,
    workers: Optional[int] = WorkersOpt,
    timeout: float = TimeoutOpt,
    cache_dir: Optional[Path] = CacheDirOpt,
    force: bool = ForceOpt,
    json_out: bool = JsonOpt,
    plugin: Optional[List[str]] = PluginOpt,
    interpreter_budget: float = BudgetOpt,
    seed: int = SeedOpt,
    budget: Optional[float] = TuneBudgetOpt,
    compile_workers: Optional[int] = CompileWorkersOpt,
    gpus: Optional[str] = typer.Option(None, "--gpus", help="Spread the problems over N GPUs of this host, or all "
                                       "(default 1; with --executor ray, all of the cluster's). On the CPU, N worker "
                                       "groups."),
    executor: ExecutorKind = typer.Option(ExecutorKind.local, "--executor", help="local (this host) or ray (one actor "
                                          "per GPU of a Ray cluster; pip install 'gemm-autotune[ray]')."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", envvar="RAY_ADDRESS", help="The Ray cluster to "
                                              "join (default: $RAY_ADDRESS, else a local one)."),
) -> None:
    """Find every matmul in a saved model and tune each distinct problem."""
    from ..model import check_model, find_gemms, parse_hints, parse_input_shape
    from ..tune.report import ModelProgress, dumps
    from .tables import model_summary_table, plan_table
    from ..scaleout import make_scaled_tuner
    from ..scaleout.local import local_devices
    from ..settings import Switches
    from ..tune.tuner import Tuner

    clock = StageClock()
    shapes = [parse_input_shape(text) for text in input_shape or []]
    hints = parse_hints(hint or [])
    # not a saved model, or untrusted TorchScript: said now, before anything starts
    check_model(path, trust_torchscript=trust_torchscript)
    switches = Switches.from_environment()  # read once: the workers started now and later take them
    if executor == ExecutorKind.local and not plan_only:
        from ..runner.processes import prestart_workers

        prestart_workers(likely_device(device), switches.start_method)  # their imports run beside ours
    dev, device_notes = resolve_device(device)
    settings = build_settings(dev, search=search, space=space, templates=templates, workers=workers,
                              timeout=timeout, cache_dir=cache_dir, force=force, seed=seed,
                              plugin=plugin, interpreter_budget=interpreter_budget,
                              budget=budget, compile_workers=compile_workers, gpus=gpus,
                              executor=executor.value, ray_address=ray_address, switches=switches)
    scaled = settings.executor == "ray" or settings.gpus != 1
    if scaled and settings.executor == "local" and not plan_only:
        local_devices(settings)  # a --gpus this host cannot give: its one line before the model is read
    if settings.executor == "ray" and not plan_only:
        try:
            import ray  # noqa: F401
        except ImportError:
            raise UserError("--executor ray needs Ray: pip install 'gemm-autotune[ray]'") from None
    notes: list[str] = []
    not_tuned: list = []  # model.NotTuned: the work no listed problem stands for, by kind
    scenarios: list[dict[str, int]] = []  # the dynamic dims' values each forward pass runs at
    found = find_gemms(path, input_shapes=shapes or None, hints=hints or None, device=dev,
                       allow_tf32=allow_tf32, trust_torchscript=trust_torchscript, groups=groups, notes=notes,
                       not_tuned=not_tuned, scenarios=scenarios)
    untuned = [item.to_dict() for item in not_tuned]
    say_notes(notes)
    clock.mark("found")
    plan = plan_rows(found)
    if plan_only:
        if json_out:
            out.print(dumps({"model": str(path), "plan": plan, "not_tuned": untuned, "notes": notes}),
                      markup=False, soft_wrap=True)
        else:
            out.print(plan_table(plan))
        return
    # Bad tuning options (--plugin, --templates, --device cuda without a GPU) fail here,
    # before the plan is shown, so that the error is the only line on stderr. The tuner's
    # processes start with the first problem that is not in the cache (none for a model
    # tuned before; starting them while the model was read gained nothing measurable and
    # cost ~2 s on cached runs and on models that fail to read).
    from ..hardware.device import probe_device
    from ..plugins import load_plugins
    from ..templates import check_template_names

    load_plugins(settings.plugins)
    check_template_names(settings.templates)
    clock.mark("checked")
    if settings.executor == "local":  # Ray's actors probe their own devices
        here = probe_device(dev)
        from ..settings import check_writable_folder
        from ..store.cache import Cache
        from ..tune.hits import to_tune

        looked_up = Cache(settings.cache_dir)
        pending = [item for item in found if to_tune(looked_up, item.problem, here, settings)]
        if pending:
            refuse_what_does_not_fit(pending, local_devices(settings) if scaled else [here], bool(shapes))
            check_writable_folder(settings.cache_dir)  # before the plan: the error is the one line
        device_notes = device_notes + looked_up.notices  # told once: here, not by the tuner
    clock.mark("probed")
    say_notes(device_notes)
    if not json_out:  # the plan precedes the work (stderr)
        err.print(plan_table(plan))
    progress = ModelProgress(err, total=len(found))
    rows = []
    try:
        with make_scaled_tuner(settings, progress) if scaled else Tuner(settings, progress) as tuner:
            clock.mark("devices")
            with stopped_by_signal():
                rows = tune_found(tuner, found, plan, scaled, clock)
            clock.mark("tuned")
    finally:
        progress.close()
    clock.mark("closed")
    for row in rows:
        if row.get("error"):
            err.print(failed_line(row), markup=False, highlight=False)
    if json_out:
        # a pass runs at one set of hint values: one total each ("passes"); the single
        # figures only where there is one pass
        passes = pass_totals(rows, scenarios)
        one = passes[0] if len(passes) == 1 else {}
        out.print(dumps({"model": str(path), "problems": rows, "not_tuned": untuned, "notes": notes + device_notes,
                         "passes": passes,
                         "saved_ms_per_pass": one.get("saved_ms"), "aten_ms_per_pass": one.get("aten_ms"),
                         "stages_s": clock.stages}), markup=False, soft_wrap=True)
    else:
        out.print(model_summary_table(rows))
        for line in pass_estimates(rows, scenarios):
            out.print(line)
    if any(r["winner"] is None for r in rows):
        raise typer.Exit(code=1)
