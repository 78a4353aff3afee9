"""The version and the distribution's name: one home, read by pyproject, the CLI and the cache,
imported without the package's lazy API."""

__version__ = "0.1.0"
DISTRIBUTION = "gemm-autotune"  # the name pip installs it by (pyproject's project.name)
