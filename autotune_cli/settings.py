"""Settings travel as one object, built once by the CLI (or a caller) and passed down."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable


# Bounds of what a caller may ask for: more worker processes than this is a typo, not a
# machine; a seed is a torch.Generator seed that every device takes (32 bits).
MAX_WORKERS = 256
MAX_SEED = 2**32 - 1


# A candidate is built, checked and timed in no less than this on any device: a shorter
# --timeout only times every candidate out.
MIN_TIMEOUT_S = 0.01


def check_seconds(name: str, value: float, minimum: float = 0.0) -> None:
    """A duration must be a finite positive number (at least `minimum`): NaN compares false
    with every bound, so a NaN timeout or budget would never run out."""
    from .errors import UserError

    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise UserError(f"{name} must be a positive number of seconds, got {value}")
    if value < minimum:
        raise UserError(f"{name} must be at least {minimum:g} s, got {value:g}")


def check_writable_folder(folder: Path) -> None:
    """The cache folder must take a new file before a tune starts its workers: a tune that
    could not save its winner would be work thrown away. Made if missing; probed with a
    file created and removed (permissions alone do not tell: a read-only mount, root)."""
    import tempfile

    from .errors import UserError
    from .text import printable

    where = printable(str(folder))
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".autotune-write-check.")
    except OSError as exc:
        raise UserError(f"cannot write the cache folder {where}: {exc.strerror or exc}; "
                        "choose another with --cache-dir (cache_dir= in Python) or AUTOTUNE_CACHE_DIR") from None
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:
        pass


def default_cache_dir() -> Path:
    override = os.environ.get("AUTOTUNE_CACHE_DIR")
    if override is not None:
        if not override.strip():  # Path("") is the current directory: never meant
            from .errors import UserError

            raise UserError("AUTOTUNE_CACHE_DIR is set but empty; unset it or name a folder")
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("autotune", appauthor=False))


@dataclass(frozen=True)
class TimingPolicy:
    """How one round times a candidate: what a timing worker is told with each task (runs,
    budget in milliseconds per candidate, the L2 flush, the mode). MeasurePolicy makes them."""

    warmup: int = 1
    min_runs: int = 10
    max_runs: int = 100
    budget_ms: float = 40.0
    flush_l2: bool = True
    # "events": CUDA events around each run, L2 flushed before it. "graph": a CUDA graph
    # of launches over rotating copies of the inputs (more bytes than the L2 holds),
    # for problems so small that launch overhead would otherwise pick the winner.
    mode: str = "events"
    # graph mode: each copy of the inputs gets its own output too (True), or all launches
    # write one output (False), as a compiled caller's allocator hands the same block back at
    # each call. Rotated outputs turned cuBLAS against a Triton tile over by 2-5% on a
    # 128-row chunk (bench/README.md, "The output's address").
    rotate_out: bool = False
    # Give up on a candidate after its first few runs (the timer's estimate) when they are
    # over this many times the best that timing process has measured for the problem in this
    # mode (0: never): it cannot win, and the full runs are spent on kernels that can.
    give_up_over: float = 0.0
    # Where the operands lie: the timing worker makes them anew, at other addresses, when this
    # differs from its kept inputs' (runner/candidate.CandidateRunner.inputs). 0: the first
    # timing's; each pass of the re-time and the confirmation takes a new one
    # (search/base._time_in_passes), so a kernel whose time moves with the addresses (cuBLAS
    # on 256x4096x4096, up to 10%) is read over several (bench/README.md, "Placement").
    placement: int = 0
    # Launches after the timing (outside it), each output NaN-filled before and checked after,
    # beside the checks of the first launch and of the last timed run: a kernel wrong at random
    # on half of its calls (a race) passes all 2 + 20 = 22 checks with odds 2^-22, about one in
    # four million (one wrong on a quarter of its calls: 0.75^22, 0.2%).
    confirm_launches: int = 20


# The interpreter's first timing: a run costs up to a second. It runs a kernel's programs one
# after another, so the race the confirmation launches look for cannot show there: two still
# catch a kernel that goes wrong with what its last call left behind, at a tenth of the cost.
CPU_TIMING = TimingPolicy(warmup=0, min_runs=1, max_runs=5, budget_ms=400.0, flush_l2=False, confirm_launches=2)

# AUTOTUNE_WARM_TRITON: how a CUDA timing process takes Triton's one-time work before its
# first candidate (runner/warmup.py), or "0" for not at all.
WARM_MODES = ("steps", "kernel", "0")
START_METHODS = ("forkserver", "spawn")


@dataclass(frozen=True)
class Switches:
    """The environment's switches for the worker processes, read once in the command's
    process (`from_environment`) and handed to each worker it starts: no worker reads them.

    warm_triton (AUTOTUNE_WARM_TRITON, default "steps"): one of WARM_MODES;
    offline_compile (AUTOTUNE_OFFLINE_COMPILE, "0" turns it off): compile-pool processes
    compile without bringing CUDA up (runner/offline_compile.py);
    start_method (AUTOTUNE_START_METHOD): "forkserver" or "spawn" (None: forkserver where
    the platform has one, runner/processes.worker_context)."""

    warm_triton: str = "steps"
    offline_compile: bool = True
    start_method: str | None = None

    @classmethod
    def from_environment(cls, environ=None) -> "Switches":
        """The switches as `environ` (os.environ) sets them now, unchecked: a value only
        matters where workers start (`check`, worker_context), so a cache hit never fails on one."""
        env = os.environ if environ is None else environ
        return cls(warm_triton=env.get("AUTOTUNE_WARM_TRITON", "steps"),
                   offline_compile=env.get("AUTOTUNE_OFFLINE_COMPILE", "1") != "0",
                   start_method=env.get("AUTOTUNE_START_METHOD") or None)

    def check(self, device_type: str) -> None:
        """A value the workers of `device_type` cannot take is the user's one-line error, said
        before any worker starts (the executor calls this)."""
        from .errors import UserError

        if device_type == "cuda" and self.warm_triton not in WARM_MODES:
            raise UserError(f"AUTOTUNE_WARM_TRITON must be one of {', '.join(WARM_MODES)}, "
                            f"not {self.warm_triton!r}")


@dataclass(frozen=True)
class MeasurePolicy:
    """Every choice of how candidates are timed and compared, in one place: built once (for a
    device, with the environment's switches), carried by TuneSettings.measure, read by the
    tuner, the search steps (search/base.py), the pick (search/pick.py) and the executor.

    The search's rounds: every candidate timed once (`timing`, `timing_for` a problem: CUDA-
    graph timing where the problem's floor is under `graph_below_us`), possibly screened
    first (`screening`); the contenders re-timed in passes (`retiming`); kernels that would
    beat cuBLAS confirmed beside it (`sustained`). The reasons for each number are with it."""

    # A candidate's first timing (CPU_TIMING on the interpreter).
    timing: TimingPolicy = TimingPolicy()
    # Time by CUDA graph when the problem's floor (roofline.floor_seconds) is below this. At
    # 10 us, 40-us decode kernels were timed by events and Triton's launch gap decided between
    # near-equals (bench/README.md, "Kernel speed").
    graph_below_us: float = 50.0
    # Contenders this close to the best are re-timed (search/base.retime_contenders); so is the
    # best plain cuBLAS candidate, and any result a lent worker measured, within
    # vendor_retime_within of it.
    retime_within: float = 0.03
    vendor_retime_within: float = 0.10
    # How many of the best contenders whose template offers one get their FIXED_NK twin
    # timed after the first timing (search/base.time_fixed_twins): one compile each, for up
    # to 3-8% on short-K odd widths (bench/README.md, "Odd widths"). 0 on the CPU,
    # where the interpreter runs both alike.
    fixed_twins: int = 2
    # Passes of that re-time, the contenders' order reversed every other pass (1 on the CPU,
    # where an interpreter run costs up to a second); each pass's runs and budget are
    # retime_runs_factor times the first timing's.
    retime_passes: int = 4
    retime_runs_factor: float = 1.5
    # Passes of the confirmation beside cuBLAS (search/base.confirm_against_vendor; 0 on the
    # CPU; fewer than 2: off), how many kernels each round confirms, and how many rounds.
    confirm_passes: int = 4
    confirm_at_once: int = 2
    confirm_rounds: int = 3
    # How much faster than the vendor library (the best plain cuBLAS candidate) another
    # candidate must be to win (pick.pick_winner). Timings of one kernel move by a few per
    # cent between measurements, so a smaller lead is a tie, and a tie goes to cuBLAS: it
    # needs no JIT and holds no kernel or buffer of ours (aten::mm_aligned, which runs our
    # copy and keeps buffers, is not one of them). 3%, not 2%: smaller leads in a tune came
    # out behind torch.mm side by side, while real wins led by more (bench/README.md,
    # "Kernel speed").
    vendor_margin: float = 0.03
    # A lead over cuBLAS measured in the confirmation (both timed in the same sustained passes
    # of alternating order) needs only this much: the short bursts' misreads above are what
    # that confirmation removes, and with 3% there real wins (decode 8x14336x4096 bf16,
    # triton::mm_swap_ab) went to cuBLAS. 2%: side by side, in sustained passes, the same
    # cuBLAS call reads nearly that far apart, so a smaller lead may be noise.
    confirmed_margin: float = 0.02
    # The rounds whose results may come from another device of the same GPU model (a lent
    # timing worker: the executor's `run(..., shareable=True)`): the first timing of every
    # candidate (and exhaustive's screening and finalists). The re-timing and the confirmation
    # run on the tuning device alone.
    shareable_rounds: tuple[str, ...] = ("screen", "full")
    # The first timing (and the screening) gives up on a candidate whose first runs are over
    # this many times the best of the problem so far (TimingPolicy.give_up_over; 0 on the CPU,
    # where the interpreter's Triton is hundreds of times slower than aten, and off in the
    # re-timing and the confirmation). 1.5: far past the pick's margins (2-3%) and a short
    # burst's misreads; the estimate runs back to back on a warm L2, so it reads a kernel
    # fast, never slow. Most of a cold tune's first-timing seconds went to kernels several
    # times slower than the best (bench/README.md, "Cold tuning").
    give_up_over: float = 1.5
    # A kernel whose lead over the best plain cuBLAS candidate, after the re-time, is this much
    # or more is not confirmed beside it in sustained passes (confirm_against_vendor): the
    # short bursts' misreads the confirmation removes (bench/README.md, "Kernel speed")
    # cannot make such a lead.
    confirm_lead_below: float = 0.15
    switches: Switches = Switches()

    def __post_init__(self) -> None:
        if self.retime_passes < 1 or self.confirm_passes < 0 or self.fixed_twins < 0:
            raise ValueError("retime_passes must be 1 or more, confirm_passes and fixed_twins 0 or more")

    @classmethod
    def for_device(cls, device: str, switches: Switches | None = None, **knobs) -> "MeasurePolicy":
        """The policy for `device` ("cuda" or "cpu"), with `switches` (default: the environment's,
        read now) and any `knobs` (fields) given."""
        if device == "cpu":
            knobs = {"timing": CPU_TIMING, "retime_passes": 1, "confirm_passes": 0, "give_up_over": 0.0,
                     "fixed_twins": 0, **knobs}
        return cls(switches=switches if switches is not None else Switches.from_environment(), **knobs)

    def timing_for(self, problem, device_type: str) -> TimingPolicy:
        """A problem's first timing: CUDA-graph timing where its floor is under
        `graph_below_us` (launch overhead would otherwise pick the winner); one mode for
        every candidate of the problem, so all are timed alike."""
        from .hardware.roofline import floor_seconds

        timing = replace(self.timing, give_up_over=self.give_up_over)
        if device_type == "cuda" and timing.mode == "events":
            if floor_seconds(problem) * 1e6 < self.graph_below_us:
                timing = replace(timing, mode="graph")
        return timing

    def for_problem(self, problem, device_type: str) -> "MeasurePolicy":
        """This policy with `timing` made the problem's (`timing_for`): what a search is given."""
        return replace(self, timing=self.timing_for(problem, device_type))

    def screening(self) -> TimingPolicy:
        """Few runs: enough to rank a large field, not to pick the winner."""
        timing = self.timing
        return replace(timing, warmup=1, min_runs=3, max_runs=10, budget_ms=min(timing.budget_ms, 10.0))

    def retiming(self) -> TimingPolicy:
        """One pass of the re-time of close contenders: `retime_runs_factor` times the runs and
        budget of the first timing."""
        timing, factor = self.timing, self.retime_runs_factor
        return replace(timing, min_runs=int(timing.min_runs * factor), max_runs=int(timing.max_runs * factor),
                       budget_ms=timing.budget_ms * factor, give_up_over=0.0)

    def sustained(self) -> TimingPolicy:
        """Runs adding up to 200 ms of kernel time or more (up to 400: the side-by-side's
        are 50-300 in 200 ms), against the tune's 10-100 in 40 ms; the L2 is still flushed
        before each. The confirmation of a kernel that would beat cuBLAS
        (search/base.confirm_against_vendor)."""
        timing = self.timing
        return replace(timing, warmup=max(timing.warmup, 3), min_runs=max(timing.min_runs, 50),
                       max_runs=max(timing.max_runs * 4, 400), budget_ms=max(timing.budget_ms * 5, 200.0),
                       give_up_over=0.0)


@dataclass(frozen=True)
class TuneSettings:
    device: str = "cuda"
    search: str = "default"  # "default" | "exhaustive"
    space_file: str | None = None
    templates: tuple[str, ...] | None = None  # limit to these uids or backends
    workers: int | None = None  # worker processes (default: 1 per GPU, or the CPU count)
    timeout_s: float = 120.0  # per candidate
    startup_timeout_s: float = 180.0  # per worker start (imports torch and triton)
    cache_dir: Path = field(default_factory=default_cache_dir)
    force: bool = False
    seed: int = 0
    plugins: tuple[str, ...] = ()  # modules or .py files that register templates
    interpreter_budget_s: float = 30.0  # a CPU (interpreter) candidate estimated slower is pruned
    compile_workers: int | None = None  # compile-pool processes on CUDA (default: up to 8)
    budget_s: float | None = None  # bound on one problem's whole tune
    # Scale out (scaleout/): devices to spread problems over (on the CPU, worker groups that
    # stand in for devices), where their tuners run (`--executor`: "local", this host's
    # devices, scaleout.local.MultiDeviceTuner; "ray", a cluster's, scaleout.ray.RayTuner: both
    # are tuners over whole problems, each device's candidates run by its own LocalExecutor)
    # and the Ray cluster's address.
    gpus: int = 1
    executor: str = "local"
    ray_address: str | None = None
    # How candidates are timed and compared, and the workers' switches (None: the device's
    # MeasurePolicy with the environment's switches, made when the settings are).
    measure: MeasurePolicy | None = None

    def __post_init__(self) -> None:
        if self.measure is None:  # the device's policy, the environment's switches read now
            object.__setattr__(self, "measure", MeasurePolicy.for_device(self.device))

    def check(self, name: Callable[[str], str] = lambda field: f"tune.{field}") -> None:
        """UserError, in one line, for a value no tune takes: the same rules wherever the
        settings come from (the command's flags, or autotune_cli.compile's `tune`), each
        value named as its source calls it (`name`: a field's name there). The search's
        name and the space file are checked where those are known (search/, heuristics/)."""
        from .errors import UserError

        if self.device not in ("cuda", "cpu"):
            raise UserError(f"{name('device')} takes cuda or cpu, not {self.device!r}")
        if self.templates is not None and (isinstance(self.templates, str) or not all(
                isinstance(t, str) for t in self.templates)):
            raise UserError(f"{name('templates')} takes a tuple of uids or backends, e.g. ('aten', "
                            f"'triton::mm'), not {self.templates!r}")
        for field_name, low in (("workers", 1), ("compile_workers", 0)):
            value = getattr(self, field_name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not low <= value <= MAX_WORKERS):
                raise UserError(f"{name(field_name)} must be between {low} and {MAX_WORKERS}, got {value!r}")
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or not 0 <= self.gpus <= MAX_WORKERS:
            raise UserError(f"{name('gpus')} must be between 0 (all) and {MAX_WORKERS}, got {self.gpus!r}")
        check_seconds(name("timeout_s"), self.timeout_s, MIN_TIMEOUT_S)
        check_seconds(name("startup_timeout_s"), self.startup_timeout_s)
        check_seconds(name("interpreter_budget_s"), self.interpreter_budget_s)
        if self.budget_s is not None:
            check_seconds(name("budget_s"), self.budget_s)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= MAX_SEED:
            raise UserError(f"{name('seed')} must be between 0 and {MAX_SEED}, got {self.seed!r}")

    @property
    def kernel_dir(self) -> Path:
        return Path(self.cache_dir) / "kernels"
