"""autotune: a GEMM autotuner with a persistent cache.

`from autotune_cli import lookup, mm, addmm, bmm` uses the cached winners from Python (see
`autotune_cli.api`). They load on first use: importing this package imports neither torch
nor triton.
"""

__version__ = "0.1.0"  # pyproject reads it from here
DISTRIBUTION = "gemm-autotune"  # the name pip installs it by (pyproject's project.name)

_API = ("lookup", "mm", "addmm", "bmm", "dispatch_info", "AutotuneFallbackWarning")

__all__ = ["__version__", "DISTRIBUTION", *_API]


def __getattr__(name: str):
    if name in _API:
        from . import api

        value = getattr(api, name)
        globals()[name] = value  # later accesses skip this function
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_API))
