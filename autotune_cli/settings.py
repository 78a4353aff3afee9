"""Settings travel as one object, built once by the CLI (or a caller) and passed down."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def default_cache_dir() -> Path:
    override = os.environ.get("AUTOTUNE_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("autotune", appauthor=False))


@dataclass(frozen=True)
class TimingPolicy:
    """How many runs to time. Budgets are per candidate, in milliseconds."""

    warmup: int = 1
    min_runs: int = 10
    max_runs: int = 100
    budget_ms: float = 100.0
    flush_l2: bool = True

    @classmethod
    def for_device(cls, device: str) -> "TimingPolicy":
        if device == "cpu":  # the interpreter: a run costs up to a second
            return cls(warmup=0, min_runs=1, max_runs=5, budget_ms=400.0, flush_l2=False)
        return cls()


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
    timing: TimingPolicy | None = None

    @property
    def timing_policy(self) -> TimingPolicy:
        return self.timing or TimingPolicy.for_device(self.device)

    @property
    def kernel_dir(self) -> Path:
        return Path(self.cache_dir) / "kernels"
