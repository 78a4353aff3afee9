"""The typer app every command registers on, and what the commands share: the consoles,
the option declarations, the device and settings they resolve, and the signal handling.
Imports neither torch nor triton (a cache hit and `cache show` run on this alone)."""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

from ..errors import UserError
from .console import err, out  # noqa: F401  (the commands take their consoles from here)

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
        from ..version import DISTRIBUTION, __version__

        print(f"autotune {__version__} ({DISTRIBUTION})")
        raise typer.Exit()


@app.callback()
def _main_options(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                 help="Print the version and exit."),
) -> None:
    """Find the fastest GEMM kernels for your shapes on your GPU, and remember them."""


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
    from ..hardware.device import cuda_device_count

    return cuda_device_count(remembered_in) > 0


def likely_device(device: Optional[Device]) -> str:
    """The device a run will likely use, known without importing torch."""
    if device is not None:
        return device.value
    return "cuda" if driver_present() else "cpu"


CPU_NOTE = ("no GPU found; running on the CPU through Triton's interpreter (--device cpu). "
            "Timings there only rank kernels for the interpreter.")


def resolve_device(device: Optional[Device], remembered_in: Optional[Path] = None) -> tuple[str, list[str]]:
    """(the device a command works for, the notes to print once its input has passed its
    checks: a bad input's error stays the one line on stderr)."""
    if device is not None:
        return device.value, []
    if gpu_present(remembered_in):
        return "cuda", []
    return "cpu", [CPU_NOTE]


def say_notes(notes: List[str]) -> None:
    from ..tune.report import say_notes as say

    say(err, notes)


def build_settings(device: str, *, search: Search = Search.default, space: Optional[Path] = None,
                   templates: Optional[str] = None, workers: Optional[int] = None,
                   timeout: float = 120.0, cache_dir: Optional[Path] = None, force: bool = False,
                   seed: int = 0, plugin: Optional[List[str]] = None,
                   interpreter_budget: float = 30.0, budget: Optional[float] = None,
                   compile_workers: Optional[int] = None, gpus: Optional[str] = None,
                   executor: str = "local", ray_address: Optional[str] = None, switches=None):
    """The settings of a tune from the command's options, checked. `switches`: the
    environment's (settings.Switches) where the command has read them already, else read now."""
    from ..settings import MeasurePolicy, TuneSettings, default_cache_dir

    uids = None if templates is None else tuple(t.strip() for t in templates.split(",") if t.strip())
    if uids == ():
        raise UserError("--templates names no template: give uids or backends, e.g. aten or triton::mm")
    settings = TuneSettings(
        device=device, search=search.value, space_file=str(space) if space else None,
        templates=uids, workers=workers, timeout_s=timeout,
        cache_dir=cache_dir if cache_dir is not None else default_cache_dir(), force=force,
        seed=seed, plugins=tuple(plugin or ()), interpreter_budget_s=interpreter_budget,
        budget_s=budget, compile_workers=compile_workers,
        gpus=_gpu_count(gpus, executor),
        executor=executor, ray_address=ray_address, measure=MeasurePolicy.for_device(device, switches),
    )
    from ..tune.checks import check_settings

    check_settings(settings, lambda field: FLAGS.get(field, f"--{field.replace('_', '-')}"))  # by its flag
    return settings


# The flag that sets each checked field of TuneSettings, where the two names differ.
FLAGS = {"timeout_s": "--timeout", "interpreter_budget_s": "--interpreter-budget", "budget_s": "--budget"}


def _gpu_count(gpus: Optional[str], executor: str) -> int:
    """`--gpus`, or its default: 1, or with Ray all of the cluster's devices. (scaleout/ is
    imported only when asked: it brings the tuner, which a cache hit does without.)"""
    if gpus is None and executor == "local":
        return 1
    from ..scaleout.common import parse_gpus

    return parse_gpus(gpus if gpus is not None else "all")


def _default_cache_dir() -> Path:
    from ..settings import default_cache_dir

    return default_cache_dir()


FROM_HELP = (
    "Tune a list of problems in one process (one worker pool, one table of winners) instead "
    "of --m/--n/--k: a JSON file holding a list of objects (or {\"problems\": [...]}), one per "
    "problem, with the fields of this command's flags: m, n, k (required), batch, dtype, "
    "layout, bias (true or false), bias_shape (n or mn), allow_tf32 (true or false), scale, "
    "out_dtype, fast_accum (true or false); and count (calls that ran it, weighing its share) "
    "and group (true: a group's one GEMM), as autotune_cli.record writes them; e.g. "
    "[{\"m\": 1, \"n\": 4096, \"k\": 4096, \"dtype\": \"bfloat16\", \"layout\": \"nt\"}, "
    "{\"m\": 4096, \"n\": 4096, \"k\": 1024, \"bias\": true}]. Those flags themselves, and "
    "--top, do not go with --from: the table has a row per problem, its winner. Problems "
    "already in the cache are answered from it, so an interrupted list resumes where it stopped.")


def _path_arg(what: str):
    """A path parser: an empty path is refused, not read as the current directory (Path("")
    is "."), which would make "" a folder where a file was asked for; a leading ~ is the
    home folder, as in $AUTOTUNE_CACHE_DIR (the shell leaves `--cache-dir=~/x` as it is,
    which made a folder named "~" here)."""
    def parse(text: str) -> Path:
        if not text.strip():
            raise typer.BadParameter(f"an empty path; give a {what}")
        return Path(text).expanduser()
    return parse


_cache_dir_arg = _path_arg("folder")
file_arg = _path_arg("file")  # a file's argument or option: parser=file_arg


# Options shared by the tuning commands.
DeviceOpt = typer.Option(None, "--device", help="cuda (default with a GPU) or cpu (Triton interpreter).")
SearchOpt = typer.Option(Search.default, "--search", help="Config space: the default list or exhaustive.")
SpaceOpt = typer.Option(None, "--space", metavar="FILE", parser=file_arg,
                        help="JSON file of Triton configs to try instead of the defaults: a list "
                             "for every Triton template, or {uid: [configs]}.")
TemplatesOpt = typer.Option(None, "--templates", help="Comma-separated uids or backends, e.g. aten or triton::mm.")
WorkersOpt = typer.Option(None, "--workers", help="Benchmark worker processes (default: 1 per GPU, or per CPU core).")
TimeoutOpt = typer.Option(120.0, "--timeout", help="Seconds one candidate may take before it is killed.")
CacheDirOpt = typer.Option(None, "--cache-dir", parser=_cache_dir_arg, metavar="DIR",
                           help="Cache folder (default: $AUTOTUNE_CACHE_DIR or the user cache dir).")
ForceOpt = typer.Option(False, "--force", help="Re-tune even if the cache has a winner.")
JsonOpt = typer.Option(False, "--json", help="Print one JSON document instead of tables.")
PluginOpt = typer.Option(None, "--plugin", metavar="MODULE",
                         help="A module or .py file that registers more templates (repeatable).")
BudgetOpt = typer.Option(30.0, "--interpreter-budget", help="On the CPU, prune Triton configs the interpreter would "
                         "take longer than this (s).")
SeedOpt = typer.Option(0, "--seed", help="Seed of the random inputs.")
TuneBudgetOpt = typer.Option(None, "--budget", help="Bound on one problem's whole tune, in seconds: at it the "
                             "candidates running are stopped and those left are recorded as skipped; the best "
                             "finished one wins.")
CompileWorkersOpt = typer.Option(None, "--compile-workers", help="Compile-pool processes on CUDA (default: up to 8; 0 "
                                 "compiles in the timing worker).")



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
    from ..errors import Interrupted, Terminated

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
