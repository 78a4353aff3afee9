"""The command line: parse, build objects, call, format. Nothing else lives here.

torch and triton are imported lazily inside the commands that need them; `autotune cache
show` imports neither. User errors print one line and exit 2; data goes to stdout and
progress to stderr, so `--json` pipes cleanly.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

try:  # typer >= 0.29 carries its own copy of click
    from typer._click import exceptions as click_errors
except ImportError:  # older typer runs on click itself
    from click import exceptions as click_errors
from .errors import UserError

# -h as well as --help, on every command (subcommands inherit the context settings)
HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(
    name="autotune", add_completion=False, no_args_is_help=True, rich_markup_mode=None,
    pretty_exceptions_enable=False, context_settings=HELP_OPTIONS,
    help="Find the fastest GEMM kernels for your shapes on your GPU, and remember them.",
)
cache_app = typer.Typer(help="See and manage what autotune has learned.", no_args_is_help=True,
                        rich_markup_mode=None, context_settings=HELP_OPTIONS)
app.add_typer(cache_app, name="cache")


def _print_version(value: bool) -> None:
    if value:
        from . import DISTRIBUTION, __version__

        print(f"autotune {__version__} ({DISTRIBUTION})")
        raise typer.Exit()


@app.callback()
def _main_options(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                 help="Print the version and exit."),
) -> None:
    """Find the fastest GEMM kernels for your shapes on your GPU, and remember them."""

def _console(stderr: bool) -> Console:
    """Tables stay readable when piped: without a terminal, draw 160 columns, not 80."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or os.environ.get("COLUMNS") else 160
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=width)


out = _console(stderr=False)
err = _console(stderr=True)


class Device(str, Enum):
    cuda = "cuda"
    cpu = "cpu"


class Search(str, Enum):
    default = "default"
    exhaustive = "exhaustive"


class ExecutorKind(str, Enum):
    local = "local"
    ray = "ray"


class BiasShape(str, Enum):
    n = "n"
    mn = "mn"


def driver_present() -> bool:
    """NVIDIA's driver files are here: a GPU may be (known without importing torch)."""
    return Path("/dev/nvidiactl").exists() or shutil.which("nvidia-smi") is not None


def gpu_present(remembered_in: Optional[Path] = None) -> bool:
    """Cheap check first (no driver files: no GPU), then ask the driver (or torch, where the
    driver cannot be read); `remembered_in`: where its answers may be remembered."""
    if not driver_present():
        return False
    from .fingerprint import cuda_device_count

    return cuda_device_count(remembered_in) > 0


def likely_device(device: Optional[Device]) -> str:
    """The device a run will likely use, known without importing torch."""
    if device is not None:
        return device.value
    return "cuda" if driver_present() else "cpu"


def resolve_device(device: Optional[Device], remembered_in: Optional[Path] = None) -> str:
    if device is not None:
        return device.value
    if gpu_present(remembered_in):
        return "cuda"
    err.print("note: no GPU found; running on the CPU through Triton's interpreter "
              "(--device cpu). Timings there only rank kernels for the interpreter.")
    return "cpu"


def build_settings(device: str, *, search: Search = Search.default, space: Optional[Path] = None,
                   templates: Optional[str] = None, workers: Optional[int] = None,
                   timeout: float = 120.0, cache_dir: Optional[Path] = None, force: bool = False,
                   seed: int = 0, plugin: Optional[List[str]] = None,
                   interpreter_budget: float = 30.0, budget: Optional[float] = None,
                   compile_workers: Optional[int] = None, gpus: Optional[str] = None,
                   executor: str = "local", ray_address: Optional[str] = None):
    from .settings import MAX_SEED, MAX_WORKERS, TuneSettings, check_seconds, default_cache_dir

    if workers is not None and not 1 <= workers <= MAX_WORKERS:
        raise UserError(f"--workers must be between 1 and {MAX_WORKERS}, got {workers}")
    check_seconds("--timeout", timeout)
    check_seconds("--interpreter-budget", interpreter_budget)
    if budget is not None:
        check_seconds("--budget", budget)
    if compile_workers is not None and not 0 <= compile_workers <= MAX_WORKERS:
        raise UserError(f"--compile-workers must be between 0 and {MAX_WORKERS}, got {compile_workers}")
    if not 0 <= seed <= MAX_SEED:
        raise UserError(f"--seed must be between 0 and {MAX_SEED}, got {seed}")
    if space is not None and not space.is_file():
        raise UserError(f"space file not found: {space}")
    uids = tuple(t.strip() for t in templates.split(",") if t.strip()) if templates else None
    return TuneSettings(
        device=device, search=search.value, space_file=str(space) if space else None,
        templates=uids, workers=workers, timeout_s=timeout,
        cache_dir=cache_dir if cache_dir is not None else default_cache_dir(), force=force,
        seed=seed, plugins=tuple(plugin or ()), interpreter_budget_s=interpreter_budget,
        budget_s=budget, compile_workers=compile_workers,
        gpus=_gpu_count(gpus, executor),
        executor=executor, ray_address=ray_address,
    )


def _gpu_count(gpus: Optional[str], executor: str) -> int:
    """`--gpus`, or its default: 1, or with Ray all of the cluster's devices. (scaleout/ is
    imported only when asked: it brings the tuner, which a cache hit does without.)"""
    if gpus is None and executor == "local":
        return 1
    from .scaleout.common import parse_gpus

    return parse_gpus(gpus if gpus is not None else "all")


def _default_cache_dir() -> Path:
    from .settings import default_cache_dir

    return default_cache_dir()


FROM_HELP = (
    "Tune a list of problems in one process (one worker pool, one table of winners) instead "
    "of --m/--n/--k: a JSON file holding a list of objects (or {\"problems\": [...]}), one per "
    "problem, with the fields of this command's flags: m, n, k (required), batch, dtype, "
    "layout, bias (true or false), bias_shape (n or mn), allow_tf32 (true or false); e.g. "
    "[{\"m\": 1, \"n\": 4096, \"k\": 4096, \"dtype\": \"bfloat16\", \"layout\": \"nt\"}, "
    "{\"m\": 4096, \"n\": 4096, \"k\": 1024, \"bias\": true}]. Problems already in the "
    "cache are answered from it, so an interrupted list resumes where it stopped.")


# Options shared by the tuning commands.
DeviceOpt = typer.Option(None, "--device", help="cuda (default with a GPU) or cpu (Triton interpreter).")
SearchOpt = typer.Option(Search.default, "--search", help="Config space: the default list or exhaustive.")
SpaceOpt = typer.Option(None, "--space", help="JSON file of Triton configs to try instead of the defaults.")
TemplatesOpt = typer.Option(None, "--templates", help="Comma-separated uids or backends, e.g. aten or triton::mm.")
WorkersOpt = typer.Option(None, "--workers", help="Benchmark worker processes (default: 1 per GPU, or per CPU core).")
TimeoutOpt = typer.Option(120.0, "--timeout", help="Seconds one candidate may take before it is killed.")
def _cache_dir_arg(text: str) -> Path:
    """--cache-dir as given: an empty one would be the current directory (Path("") is ".")."""
    if not text.strip():
        raise typer.BadParameter("an empty path; give a folder")
    return Path(text)


CacheDirOpt = typer.Option(None, "--cache-dir", parser=_cache_dir_arg,
                           help="Cache folder (default: $AUTOTUNE_CACHE_DIR or the user cache dir).")
ForceOpt = typer.Option(False, "--force", help="Re-tune even if the cache has a winner.")
JsonOpt = typer.Option(False, "--json", help="Print one JSON document instead of tables.")
PluginOpt = typer.Option(None, "--plugin", help="A module or .py file that registers more templates (repeatable).")
BudgetOpt = typer.Option(30.0, "--interpreter-budget", help="On the CPU, prune Triton configs the interpreter would take longer than this (s).")
SeedOpt = typer.Option(0, "--seed", help="Seed of the random inputs.")
TuneBudgetOpt = typer.Option(None, "--budget", help="Bound on one problem's whole tune, in seconds; what is left unmeasured is recorded as skipped.")
CompileWorkersOpt = typer.Option(None, "--compile-workers", help="Compile-pool processes on CUDA (default: up to 8; 0 compiles in the timing worker).")


@app.command()
def mm(
    m: Optional[int] = typer.Option(None, "--m", help="Rows of A and of the output (required, unless --from)."),
    n: Optional[int] = typer.Option(None, "--n", help="Columns of B and of the output."),
    k: Optional[int] = typer.Option(None, "--k", help="The reduction dimension."),
    batch: Optional[int] = typer.Option(None, "--batch", "-b", help="Batch size: makes the problem a bmm."),
    bias: bool = typer.Option(False, "--bias", help="Add a bias: makes the problem an addmm."),
    bias_shape: BiasShape = typer.Option(BiasShape.n, "--bias-shape", help="n: a row vector (like nn.Linear); mn: a full matrix."),
    dtype: str = typer.Option("float16", "--dtype", help="float16, bfloat16, float32 or float8_e4m3fn (a scaled mm: needs --scale)."),
    layout: Optional[str] = typer.Option(None, "--layout", help="nn, nt, tn or tt: A and B row-major (n) or transposed (t); default nn (float8: nt, its only layout)."),
    allow_tf32: bool = typer.Option(False, "--allow-tf32", help="float32 only: let the matrix units round inputs to tf32."),
    scale: Optional[str] = typer.Option(None, "--scale", help="float8 only: fp32 scales per tensor, or per row of A and column of B (tensor|row)."),
    out_dtype: Optional[str] = typer.Option(None, "--out-dtype", help="float8 only: the output's dtype (default bfloat16)."),
    fast_accum: bool = typer.Option(False, "--fast-accum", help="float8 only: as torch._scaled_mm(use_fast_accum=True), the matrix units' own accumulation (faster, less precise)."),
    device: Optional[Device] = DeviceOpt,
    search: Search = SearchOpt,
    space: Optional[Path] = SpaceOpt,
    templates: Optional[str] = TemplatesOpt,
    workers: Optional[int] = WorkersOpt,
    timeout: float = TimeoutOpt,
    cache_dir: Optional[Path] = CacheDirOpt,
    force: bool = ForceOpt,
    json_out: bool = JsonOpt,
    top: int = typer.Option(10, "--top", help="Rows in the candidate table."),
    plugin: Optional[List[str]] = PluginOpt,
    interpreter_budget: float = BudgetOpt,
    seed: int = SeedOpt,
    budget: Optional[float] = TuneBudgetOpt,
    compile_workers: Optional[int] = CompileWorkersOpt,
    from_file: Optional[Path] = typer.Option(None, "--from", help=FROM_HELP),
) -> None:
    """Tune one matrix multiply: mm, addmm (--bias), bmm (--batch) or a float8 scaled_mm
    (--scale); or a list of them (--from FILE) in one process."""
    from .hits import cached
    from .problem import make_problem
    from .report import ProgressReporter, dumps, outcome_json, outcome_summary, outcome_table

    if from_file is not None:
        given = [flag for flag, value, default in (
            ("--m", m, None), ("--n", n, None), ("--k", k, None), ("--batch", batch, None),
            ("--bias", bias, False), ("--bias-shape", bias_shape, BiasShape.n),
            ("--dtype", dtype, "float16"), ("--layout", layout, None), ("--allow-tf32", allow_tf32, False),
            ("--scale", scale, None), ("--out-dtype", out_dtype, None), ("--fast-accum", fast_accum, False),
            ("--top", top, 10)) if value != default]
        if given:
            raise UserError(f"--from takes each problem's fields from the file; {given[0]} goes there")
        from .cli_list import tune_list
        from .shapes_file import read_problems

        problems = read_problems(from_file, device.value if device else "cpu")  # bad file: said first
        dev = resolve_device(device, remembered_in=cache_dir or _default_cache_dir())
        settings = build_settings(dev, search=search, space=space, templates=templates, workers=workers,
                                  timeout=timeout, cache_dir=cache_dir, force=force, seed=seed,
                                  plugin=plugin, interpreter_budget=interpreter_budget,
                                  budget=budget, compile_workers=compile_workers)
        code = tune_list(from_file, [p.with_device(dev) for p in problems], settings, json_out)
        if code:
            raise typer.Exit(code=code)
        return
    for flag, value in (("--m", m), ("--n", n), ("--k", k)):
        if value is None:
            raise UserError(f"missing option '{flag}' (or give a list of problems: --from FILE)")
    # Validate the problem before anything slow happens (finding the device may import torch).
    problem = make_problem(m=m, n=n, k=k, batch=batch, dtype=dtype, layout=layout,
                           bias=bias_shape.value if bias else None, allow_tf32=allow_tf32,
                           device=device.value if device else "cpu", scale=scale, out_dtype=out_dtype,
                           fast_accum=fast_accum)
    dev = resolve_device(device, remembered_in=cache_dir or _default_cache_dir())
    problem = problem.with_device(dev)
    settings = build_settings(dev, search=search, space=space, templates=templates, workers=workers,
                              timeout=timeout, cache_dir=cache_dir, force=force, seed=seed,
                              plugin=plugin, interpreter_budget=interpreter_budget,
                              budget=budget, compile_workers=compile_workers)
    reporter = ProgressReporter(err, enabled=True)
    # A hit is answered from the cache alone: no worker started, torch not imported.
    outcome = cached(settings, problem, reporter)
    if outcome is None:
        from .runner.processes import prestart_workers
        from .tuner import Tuner

        prestart_workers(dev)  # the workers' imports run beside the choices being made
        with stopped_by_signal(reporter.finished), Tuner(settings, reporter) as tuner:
            outcome = tuner.tune(problem)
    if json_out:
        out.print(dumps(outcome_json(outcome)), markup=False)
    else:
        out.print(outcome_table(outcome, top=top))
        out.print(outcome_summary(outcome))
    if outcome.winner is None:
        raise typer.Exit(code=1)


class Stopped(Exception):
    """Ctrl-C or SIGTERM during a command's work, carried past typer (which turns a
    KeyboardInterrupt into a silent exit 130) to `main`, which prints its one line."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@contextmanager
def stopped_by_signal(before=None):
    """Ctrl-C (SIGINT) or SIGTERM inside: `before(None)` (a progress bar to stop), then
    Stopped with the tuner's line (what was saved, how to resume) or a plain one."""
    from .errors import Interrupted, Terminated

    try:
        yield
    except KeyboardInterrupt as exc:
        if before is not None:
            before(None)
        if isinstance(exc, Interrupted):
            raise Stopped(exc.message, exc.code) from None
        terminated = isinstance(exc, Terminated)
        raise Stopped(f"interrupted ({'SIGTERM' if terminated else 'SIGINT'})",
                      143 if terminated else 130) from None


def aten_ms(entry: dict) -> float | None:
    """The cuBLAS baseline of a tuned entry: the fastest plain vendor call on the operands as
    given (results.VENDOR_UIDS), what the model runs untuned. Other aten candidates
    (aten::mm_aligned copies into padded buffers) are wins over it, not it."""
    from .results import VENDOR_UIDS

    times = [c["ms"] for c in entry.get("candidates", [])
             if c.get("status") == "ok" and c.get("uid") in VENDOR_UIDS and c.get("ms")]
    return min(times) if times else None


def saved_ms(baseline_ms: float | None, winner: dict | None, count: int) -> float | None:
    """Milliseconds per forward pass the winner saves over the baseline, for `count` calls
    (None when either time is unknown)."""
    if baseline_ms is None or not winner or not winner.get("ms"):
        return None
    return (baseline_ms - winner["ms"]) * count


class _Clock:
    """Seconds since the command started at which each stage ended (for --json readers)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.stages: dict[str, float] = {}

    def mark(self, stage: str) -> None:
        self.stages[stage] = round(time.perf_counter() - self.started, 3)


def plan_rows(found) -> list[dict]:
    """One row per distinct problem found in a model: what `--plan` shows and `model` tunes."""
    from .model import plan_flops_share

    shares = plan_flops_share(found)
    return [{"problem": f.problem.to_dict(), "describe": f.problem.describe(), "count": f.count,
             "gflop": f.problem.flops / 1e9, "share": share, "sources": list(f.sources),
             "hint": f.hint} for f, share in zip(found, shares)]


def result_row(item, planned: dict, outcome, clock: _Clock, slot=0, device_name=None, host=None,
               error=None, span=None) -> dict:
    """A plan row with what tuning its problem gave (or why it failed)."""
    winner = outcome.winner if outcome else None
    aten = aten_ms(outcome.entry) if outcome else None
    saved = saved_ms(aten, winner, item.count)
    if outcome is not None and device_name is None:
        device_name = outcome.entry.get("fingerprint", {}).get("device_name")
    row = {**planned, "key": outcome.key if outcome else None,
           "from_cache": outcome.from_cache if outcome else False,
           "winner": winner, "aten_ms": aten, "saved_ms": saved,
           "slot": slot, "device": device_name,
           "tune_seconds": outcome.entry.get("tune_seconds") if outcome and not outcome.from_cache else None}
    if span is not None:  # seconds since the command started: when its tune began and ended
        row["span_s"] = [round(t - clock.started, 3) for t in span]
    if host is not None:
        row["host"] = host
    if error is not None:
        row["error"] = error
    return row


def tune_found(tuner, found, plan: list[dict], scaled: bool, clock: _Clock) -> list[dict]:
    """Tune every problem found: one after another on one device, or spread by a scaled
    tuner (`tune_all`) over several."""
    if scaled:
        results = tuner.tune_all([item.problem for item in found])
        return [result_row(item, planned, result.outcome, clock, result.slot, result.device,
                           result.host, result.error, result.span)
                for item, planned, result in zip(found, plan, results)]
    rows = []
    for item, planned in zip(found, plan):
        began = time.perf_counter()
        outcome = tuner.tune(item.problem)
        rows.append(result_row(item, planned, outcome, clock, span=(began, time.perf_counter())))
    return rows


@app.command()
def model(
    path: Path = typer.Argument(..., help="A TorchScript file (torch.jit.save) or a torch.export program (.pt2)."),
    input_shape: Optional[List[str]] = typer.Option(None, "--input-shape", help="TorchScript: an example input, e.g. 8x128x768:float16 (repeat, in order)."),
    hint: Optional[List[str]] = typer.Option(None, "--hint", help="Dynamic dims: values to tune at, e.g. x.0=1,16,128 (input x, dim 0), s77=1,16 (the symbol) or batch=1,16 (where there is one dynamic dim); repeatable."),
    trust_torchscript: bool = typer.Option(False, "--trust-torchscript", help="Read a TorchScript file: that loads and runs its code, so only for files you trust (a .pt2 never runs code)."),
    allow_tf32: bool = typer.Option(False, "--allow-tf32", help="float32 matmuls may use tf32."),
    plan_only: bool = typer.Option(False, "--plan", help="Only list the matmuls found; tune nothing."),
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
    gpus: Optional[str] = typer.Option(None, "--gpus", help="Spread the problems over N GPUs of this host, or all (default 1; with --executor ray, all of the cluster's). On the CPU, N worker groups."),
    executor: ExecutorKind = typer.Option(ExecutorKind.local, "--executor", help="local (this host) or ray (one actor per GPU of a Ray cluster; pip install 'gemm-autotune[ray]')."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", envvar="RAY_ADDRESS", help="The Ray cluster to join (default: $RAY_ADDRESS, else a local one)."),
) -> None:
    """Find every matmul in a saved model and tune each distinct problem."""
    from .model import check_model, find_gemms, parse_hints, parse_input_shape
    from .report import ModelProgress, dumps, model_summary_table, plan_table
    from .scaleout import make_scaled_tuner
    from .scaleout.local import local_devices
    from .tuner import Tuner

    clock = _Clock()
    shapes = [parse_input_shape(text) for text in input_shape or []]
    hints = parse_hints(hint or [])
    # not a saved model, or untrusted TorchScript: said now, before anything starts
    check_model(path, trust_torchscript=trust_torchscript)
    if executor == ExecutorKind.local and not plan_only:
        from .runner.processes import prestart_workers

        prestart_workers(likely_device(device))  # their imports run beside ours
    dev = resolve_device(device)
    settings = build_settings(dev, search=search, space=space, templates=templates, workers=workers,
                              timeout=timeout, cache_dir=cache_dir, force=force, seed=seed,
                              plugin=plugin, interpreter_budget=interpreter_budget,
                              budget=budget, compile_workers=compile_workers, gpus=gpus,
                              executor=executor.value, ray_address=ray_address)
    scaled = settings.executor == "ray" or settings.gpus != 1
    if settings.executor == "ray" and not plan_only:
        try:
            import ray  # noqa: F401
        except ImportError:
            raise UserError("--executor ray needs Ray: pip install 'gemm-autotune[ray]'") from None
    notes: list[str] = []
    found = find_gemms(path, input_shapes=shapes or None, hints=hints or None, device=dev,
                       allow_tf32=allow_tf32, trust_torchscript=trust_torchscript, notes=notes)
    for note in notes:
        err.print(f"note: {note}", markup=False, highlight=False)
    clock.mark("found")
    plan = plan_rows(found)
    if plan_only:
        if json_out:
            out.print(dumps({"model": str(path), "plan": plan}), markup=False)
        else:
            out.print(plan_table(plan))
        return
    # Bad tuning options (--plugin, --templates, --device cuda without a GPU) fail here,
    # before the plan is shown, so that the error is the only line on stderr. The tuner's
    # processes start with the first problem that is not in the cache (none for a model
    # tuned before; starting them while the model was read gained nothing measurable and
    # cost ~2 s on cached runs and on models that fail to read).
    from .fingerprint import probe_device
    from .plugins import load_plugins
    from .templates import check_template_names

    load_plugins(settings.plugins)
    check_template_names(settings.templates)
    clock.mark("checked")
    if settings.executor == "local":  # Ray's actors probe their own devices
        probe_device(dev)
        if scaled:  # --gpus N: that many visible
            local_devices(settings)
    clock.mark("probed")
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
            err.print(f"failed: {row['describe']}: {row['error']}", markup=False, highlight=False)
    total_saved = sum(r["saved_ms"] for r in rows if r["saved_ms"] is not None)
    total_aten = sum(r["aten_ms"] * r["count"] for r in rows if r["aten_ms"])
    if json_out:
        out.print(dumps({"model": str(path), "problems": rows, "saved_ms_per_pass": total_saved,
                         "aten_ms_per_pass": total_aten, "stages_s": clock.stages}), markup=False)
    else:
        out.print(model_summary_table(rows))
        out.print(f"estimated GEMM time per forward pass: aten {total_aten:.4f} ms, "
                  f"tuned {total_aten - total_saved:.4f} ms (saves {total_saved:.4f} ms)")
    if any(r["winner"] is None for r in rows):
        raise typer.Exit(code=1)


# -- cache commands ------------------------------------------------------------------------
# They live in cli_cache.py and register themselves on cache_app.

from . import cli_cache  # noqa: E402,F401


def run() -> None:
    """The `autotune` command: main(), then the forkserver is stopped (it holds the command's
    stdout and stderr open: runner/processes.stop_forkserver) before the process exits."""
    import signal

    def terminate(signum, frame):  # SIGTERM stops the command as Ctrl-C does (errors.Terminated)
        from .errors import Terminated

        raise Terminated()

    signal.signal(signal.SIGTERM, terminate)
    try:
        code = main()
    finally:
        processes = sys.modules.get("autotune_cli.runner.processes")
        if processes is not None:  # not imported: no worker, no forkserver was started
            processes.stop_forkserver()
    sys.exit(code)


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point: one line and exit 2 for usage errors and bad input."""
    try:
        result = app(args=argv, prog_name="autotune", standalone_mode=False)
    except UserError as exc:
        err.print(f"autotune: error: {exc}", markup=False)
        return 2
    except Stopped as exc:
        err.print(f"autotune: {exc}", markup=False, highlight=False)
        return exc.code
    except click_errors.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare command: show its help
            out.print(exc.format_message(), markup=False)
            return 0
        err.print(f"autotune: error: {exc.format_message()}", markup=False)
        return 2
    except typer.Abort:
        err.print("aborted")
        return 1
    except click_errors.ClickException as exc:
        err.print(f"autotune: error: {exc.format_message()}", markup=False)
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130
    return result if isinstance(result, int) else 0
