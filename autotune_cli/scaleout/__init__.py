"""Scale out: one `Tuner` per device, on this host's GPUs (local.py) or on a Ray cluster
(ray.py, imported only for `--executor ray`); common.py holds what both use."""

from __future__ import annotations

from ..settings import TuneSettings
from ..tuner import TuneListener
from .local import MultiDeviceTuner


def make_scaled_tuner(settings: TuneSettings, listener: TuneListener | None = None):
    """The tuner for `settings.executor` and `settings.gpus`: both have `tune_all(problems)`
    and `close()`. Ray is imported only here, and only for the Ray executor."""
    if settings.executor == "ray":
        from .ray import RayTuner

        return RayTuner(settings, listener)
    return MultiDeviceTuner(settings, listener)
