"""What a template's `build` returns: a `Kernel`, which `kernel(ops)` runs on one call's
Operands.

What a kernel offers beyond the call is declared here, each with a default, so that a caller
reads an attribute and never asks whether it is there:

  compiles, warmup(ops)   `warmup` compiles what a call would launch, without launching, and
                          returns the compiled kernels; the compile pool calls it only where
                          `compiles` (a Triton kernel) is true;
  bind(sample, reuse_b)   a launch (a, b, out, bias) for operands laid out as `sample`, its
                          arguments worked out once (templates/base.bound), or None;
  launch_parts            (jit function, grid, arguments, launch options) for a caller that
                          launches the kernel its own way (torch.compile's wrap_triton), or None.

A plugin's `build` may return a plain callable instead; it offers none of these, and the
callers tell the two apart with isinstance. `Operands` (what a kernel is given) and `Copier`
(an alignment template's copy of an operand into its own buffer) live here too, so that
base.py and row_copy.py both import them from below.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable

Launch = Callable[[Any, Any, Any, Any], None]  # (a, b, out, bias) -> None: a bound kernel
# (jit function, grid, arguments(ops) -> every argument, launch options)
LaunchParts = tuple[Any, tuple, Callable[["Operands"], tuple], dict[str, Any]]


@dataclass
class Operands:
    """The tensors of one call: `out` is written by the kernel. A scaled_mm's fp32 scales:
    0-d tensors, or [m, 1] and [1, n] per row (GemmProblem.scale_shapes)."""

    a: Any
    b: Any
    out: Any
    bias: Any = None
    scale_a: Any = None
    scale_b: Any = None


class Kernel(ABC):
    """A built kernel: call it on Operands to run it."""

    compiles: bool = False
    launch_parts: LaunchParts | None = None

    @abstractmethod
    def __call__(self, ops: Operands) -> None:
        """Run on `ops`, writing `ops.out`."""

    def warmup(self, ops: Operands) -> list:
        """Compile for operands like `ops` without launching; the compiled kernels (none
        here: nothing to compile)."""
        return []

    def bind(self, sample: Operands, reuse_b: bool = False) -> Launch | None:
        """A launch for operands laid out as `sample` (only their addresses change), or None
        where the kernel has none (then base.bound calls it with an Operands per call).
        `reuse_b`: a copy of B the kernel keeps may be skipped while B is unchanged."""
        return None


class Copier(ABC):
    """`copy(src)`: the copy of an operand into one destination (padded storage of an
    alignment template's own), for sources of any layout; `copy.fixed(src)` the copy for
    sources laid out as `src` alone (a bound plan's: their shapes and strides fixed)."""

    @abstractmethod
    def __call__(self, src) -> None: ...

    @abstractmethod
    def fixed(self, src) -> Callable[[Any], None]: ...
