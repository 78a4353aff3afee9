"""Scale out: one `Tuner` per device, on this host's GPUs (local.py) or on a Ray cluster
(ray.py, imported only for `--executor ray`); common.py holds what both use. ranks.py is
the ranks of a torch.distributed job sharing autotune_cli.compile's tuning.

Both are `ScaledTuner`s: they spread whole problems over devices, never one problem's
candidates, and each device's candidates run through that device's own executor
(runner.Executor). `--executor` names where the tuners run, not an Executor."""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

from ..problem import GemmProblem
from ..settings import TuneSettings
from ..tune.tuner import TuneListener
from .common import ProblemResult
from .local import MultiDeviceTuner


class ScaledTuner(Protocol):
    """A tuner over several devices: MultiDeviceTuner (this host's) or RayTuner (a cluster's)."""

    def tune_all(self, problems: Sequence[GemmProblem],
                 on_result: Callable[[ProblemResult], None] | None = None) -> list[ProblemResult]:
        """Tune every problem: one result each, tuned or failed with why."""
        ...

    def close(self) -> None: ...


def make_scaled_tuner(settings: TuneSettings, listener: TuneListener | None = None) -> ScaledTuner:
    """The tuner for `settings.executor` and `settings.gpus`. Ray is imported only here, and
    only for `--executor ray`."""
    if settings.executor == "ray":
        from .ray import RayTuner

        return RayTuner(settings, listener)
    return MultiDeviceTuner(settings, listener)
