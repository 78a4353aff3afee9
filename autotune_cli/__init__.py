"""autotune: a GEMM autotuner with a persistent cache."""

__version__ = "0.1.0"
