"""runner/: how candidates are built, verified and timed. The `Executor` seam (here) is all
that the tuner, the search and scaleout/ use; `LocalExecutor` (executor.py) is the one behind
it, worker processes on this host (processes.py, worker.py, candidate.py, compile_pool.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

if TYPE_CHECKING:
    from ..candidates.choices import KernelTemplateChoice
    from ..store.results import Candidate
    from ..settings import TimingPolicy

ResultCallback = Callable[[int, "Candidate"], None]


@dataclass(frozen=True)
class ExecutorStats:
    """What an executor did for one problem, for its cache entry: the workers that came up
    (role, seconds to ready), and the kernels its compile pool built for it (perf_counter
    times sent and done, seconds compiling; None: it built none at all), and how that pool
    compiles (CompilePool.describe; None: no pool)."""

    startups: tuple[tuple[str, float], ...] = ()
    compiles: tuple[tuple[float, float, float], ...] | None = None
    compile_pool: dict[str, Any] | None = None


class Executor(Protocol):
    """Everything the tuner, the search and scaleout/ use of an executor. A class that
    subclasses it inherits the defaults of an executor with nothing to start, lend or report:
    it need only `run` and `close`."""

    def start(self) -> None:
        """Start the worker processes now, so that their imports overlap the caller's work."""

    def run(self, choices: Sequence[KernelTemplateChoice], on_result: ResultCallback | None = None,
            policy: TimingPolicy | None = None, deadline: float | None = None,
            shareable: bool = False) -> list[Candidate]:
        """Measure `choices` (`on_result(index, candidate)` as each ends; results in their
        order); `policy` None: MeasurePolicy.timing_for each choice's problem. At `deadline`
        (time.monotonic()) the run ends: what waits or runs is recorded as skipped.
        `shareable`: the results may be measured by another device of the same GPU model (a
        worker `lent` to this run, `borrow`): the search says so for a first timing, which it
        re-times on this device."""
        ...

    def compiles_ahead(self) -> bool:
        """Whether kernels are compiled ahead of their timing (a compile pool), so that
        `prefetch` does something."""
        return False

    def prefetch(self, choices: Sequence[KernelTemplateChoice]) -> int:
        """Have these choices' kernels compiled once nothing else waits (a list's next
        problem, while this one is timed); returns how many were asked for."""
        return 0

    def take_stats(self, since: float) -> ExecutorStats:
        """The workers started and kernels compiled since `since` (time.perf_counter());
        the compile log is forgotten."""
        return ExecutorStats()

    def lendable(self) -> list[Any]:
        """Its timing workers that are idle and alive: what it may lend to another
        executor's shareable run (`borrow`) while it has nothing to do."""
        return []

    def borrow(self, workers: list[Any], give_back: Callable[[list[Any]], None]) -> bool:
        """Take another executor's `lendable` workers for the shareable run in progress: True,
        and `give_back(workers)` is called when that run ends; False (no such run), and they
        stay with their owner."""
        return False

    def close(self) -> None:
        """Stop every process it started."""
