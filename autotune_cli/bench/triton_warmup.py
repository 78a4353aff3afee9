"""A one-element Triton kernel the timing process launches once, right after it reports
ready: its first Triton launch in life then happens while the compile pool builds the first
problem's kernels, not at the first candidate's. Triton's one-time work in a process (its
compiler and runtime modules, the CUDA driver's utilities, a first module load) then lands
in that idle stretch. The kernel is compiled once per Triton cache, like any other.

Imported only on CUDA: it imports triton.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _add_one(x):
    tl.store(x, tl.load(x) + 1)


def warm(torch, device: str = "cuda") -> None:
    """Compile (or load) and launch the kernel once on `device` (the current GPU; "cpu"
    under Triton's interpreter), and wait for it."""
    x = torch.zeros(1, dtype=torch.int32, device=device)
    _add_one[(1,)](x)
    if device == "cuda":
        torch.cuda.synchronize()
    if int(x.item()) != 1:
        raise RuntimeError("the warm-up kernel did not run")
