"""Settings travel as one object, built once by the CLI (or a caller) and passed down."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path


# Bounds of what a caller may ask for: more worker processes than this is a typo, not a
# machine; a seed is a torch.Generator seed that every device takes (32 bits).
MAX_WORKERS = 256
MAX_SEED = 2**32 - 1


# AUTOTUNE_WARM_TRITON: how a CUDA timing process takes Triton's one-time work before its
# first candidate (runner/warmup.py), or "0" for not at all.
WARM_MODES = ("steps", "kernel", "0")


def warm_mode(environ=None) -> str:
    """AUTOTUNE_WARM_TRITON's value (default "steps"); a value it does not know is a UserError
    (the executor checks it before any worker starts)."""
    from .errors import UserError

    mode = (os.environ if environ is None else environ).get("AUTOTUNE_WARM_TRITON", "steps")
    if mode not in WARM_MODES:
        raise UserError(f"AUTOTUNE_WARM_TRITON must be one of {', '.join(WARM_MODES)}, not {mode!r}")
    return mode


def check_seconds(name: str, value: float) -> None:
    """A duration must be a finite positive number: NaN compares false with every bound, so
    a NaN timeout or budget would never run out."""
    from .errors import UserError

    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise UserError(f"{name} must be a positive number of seconds, got {value}")


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
    """How many runs to time. Budgets are per candidate, in milliseconds."""

    warmup: int = 1
    min_runs: int = 10
    max_runs: int = 100
    budget_ms: float = 40.0
    flush_l2: bool = True
    # "events": CUDA events around each run, L2 flushed before it. "graph": a CUDA graph
    # of launches over rotating copies of the operands (more bytes than the L2 holds),
    # for problems so small that launch overhead would otherwise pick the winner.
    mode: str = "events"

    @classmethod
    def for_device(cls, device: str) -> "TimingPolicy":
        if device == "cpu":  # the interpreter: a run costs up to a second
            return cls(warmup=0, min_runs=1, max_runs=5, budget_ms=400.0, flush_l2=False)
        return cls()

    def more_runs(self, factor: float = 4.0) -> "TimingPolicy":
        """The policy for re-timing close contenders."""
        from dataclasses import replace

        return replace(self, min_runs=int(self.min_runs * factor),
                       max_runs=int(self.max_runs * factor), budget_ms=self.budget_ms * factor)

    def sustained(self) -> "TimingPolicy":
        """Runs adding up to 200 ms of kernel time or more (up to 400: the side-by-side's
        are 50-300 in 200 ms), against the tune's 10-100 in 40 ms; the L2 is still flushed
        before each. The confirmation of a kernel that would beat cuBLAS
        (search/base.confirm_against_vendor)."""
        from dataclasses import replace

        return replace(self, warmup=max(self.warmup, 3), min_runs=max(self.min_runs, 50),
                       max_runs=max(self.max_runs * 4, 400), budget_ms=max(self.budget_ms * 5, 200.0))

    def screening(self) -> "TimingPolicy":
        """Few runs: enough to rank a large field, not to pick the winner."""
        from dataclasses import replace

        return replace(self, warmup=1, min_runs=3, max_runs=10, budget_ms=min(self.budget_ms, 10.0))


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
    start_method: str | None = None  # worker processes: "forkserver" (default) or "spawn"
    budget_s: float | None = None  # bound on one problem's whole tune
    # Time by CUDA graph when the problem's floor is below this. At 10 us, 40-us decode
    # kernels were timed by events and Triton's launch gap decided between near-equals
    # (H200: the tuner's pick was 25% slower than torch.mm when re-timed in another process).
    graph_below_us: float = 50.0
    retime_within: float = 0.03  # contenders this close to the best are re-timed (in passes)
    # Passes of that re-time, the contenders' order reversed every other pass (None: 4 on a
    # GPU, 1 on the CPU, where an interpreter run costs up to a second).
    retime_rounds: int | None = None
    # passes of the confirmation against cuBLAS (None: 4 on a GPU, 0 on the CPU; fewer than 2: off)
    confirm_rounds: int | None = None
    timing: TimingPolicy | None = None
    # Scale out (scaleout/): devices to spread problems over (on the CPU, worker groups that
    # stand in for devices), the executor ("local" or "ray") and the Ray cluster's address.
    gpus: int = 1
    executor: str = "local"
    ray_address: str | None = None

    @property
    def timing_policy(self) -> TimingPolicy:
        return self.timing or TimingPolicy.for_device(self.device)

    @property
    def retime_passes(self) -> int:
        if self.retime_rounds is not None:
            return max(1, self.retime_rounds)
        return 1 if self.device == "cpu" else 4

    @property
    def confirm_passes(self) -> int:
        if self.confirm_rounds is not None:
            return max(0, self.confirm_rounds)
        return 0 if self.device == "cpu" else 4

    @property
    def kernel_dir(self) -> Path:
        return Path(self.cache_dir) / "kernels"
