"""autotune: a GEMM autotuner with a persistent cache.

`from autotune_cli import lookup, mm, addmm, bmm, linear, scaled_mm` uses the cached winners
from Python (see `autotune_cli.api`); `autotune_cli.compile(model, ...)` is torch.compile with the
model's matmuls routed to them (see `autotune_cli.routing`). They load on first use:
importing this package imports neither torch nor triton.
"""

from .version import DISTRIBUTION, __version__

_API = ("lookup", "mm", "addmm", "bmm", "linear", "scaled_mm", "dispatch_info", "AutotuneFallbackWarning")
_COMPILE = ("compile",)
_RECORD = ("record",)

__all__ = ["__version__", "DISTRIBUTION", *_API, *_COMPILE, *_RECORD]


def __getattr__(name: str):
    if name in _API:
        from . import api

        value = getattr(api, name)
        globals()[name] = value  # later accesses skip this function
        return value
    if name in _COMPILE:
        from . import routing

        value = getattr(routing, name)
        globals()[name] = value
        return value
    if name in _RECORD:
        from .api.recorder import record

        globals()[name] = record
        return record
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_API) | set(_COMPILE) | set(_RECORD))


from .hardware.ptxas import use_compilers_ptxas  # noqa: E402 - before any Triton kernel is built here

use_compilers_ptxas()

if __import__("os").environ.get("AUTOTUNE_RECORD"):  # record this process's matmuls (api/recorder.py)
    from .api.recorder import record_from_environment

    record_from_environment()
