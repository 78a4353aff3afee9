"""Triton's one-time work in a timing process, done right after it reports ready: while the
compile pool builds the first problem's kernels, not at the first candidate's launch.

A timing process's first Triton candidate pays Triton's once-per-process work (a hundred
times a later candidate's; bench/README.md, "Cold tuning"), mostly `triton_key()`: a hash of
its own compiler sources and of libtriton's shared library, computed once per process for
the cache key of every compile or cache lookup. Two ways to take that off the first candidate
(AUTOTUNE_WARM_TRITON chooses; 0 turns both off):
  steps   no kernel: that hash, Triton's compiler modules, the CUDA driver's utilities
          (loaded; on a Triton cache that has never had them, built: a small C module),
          the backend's hashes (`ptxas --version`, libdevice);
  kernel  launching a one-element kernel: everything a first launch does, but on a cold
          Triton cache it compiles that kernel in the timing process, with the pool busy
          beside it, which delays the first results by as much.

Imported only on CUDA (and by a test under the interpreter): it imports triton.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _add_one(x):
    tl.store(x, tl.load(x) + 1)


def warm_kernel(torch, device: str = "cuda") -> None:
    """Compile (or load) and launch the kernel once on `device` (the current GPU; "cpu"
    under Triton's interpreter), and wait for it."""
    x = torch.zeros(1, dtype=torch.int32, device=device)
    _add_one[(1,)](x)
    if device == "cuda":
        torch.cuda.synchronize()
    if int(x.item()) != 1:
        raise RuntimeError("the warm-up kernel did not run")


def warm_steps() -> list[str]:
    """The steps without a kernel, each on its own (Triton's internals differ between versions):
    returns the names of those that ran."""
    done = []
    try:
        from triton.runtime.driver import driver

        active = driver.active
        active.utils  # noqa: B018  (the driver's C utilities)
        done.append("driver")
        from triton.compiler.compiler import make_backend

        backend = make_backend(active.get_current_target())
        done.append("backend")
        backend.hash()
        done.append("backend hash")
        backend.parse_options({}).hash()
        done.append("options hash")
        _triton_key()()
        done.append("triton key")
    except Exception:  # noqa: BLE001 - best effort: the first candidate does what is left
        pass
    return done


def _triton_key():
    """Triton's hash of itself (memoized in the process): where this Triton keeps it."""
    try:
        from triton.runtime.cache import triton_key
    except ImportError:
        from triton.compiler.compiler import triton_key
    return triton_key


def warm(torch, mode: str = "steps", device: str = "cuda") -> None:
    """One of settings.WARM_MODES other than "0" (the worker does not call this for "0")."""
    if mode == "kernel":
        warm_kernel(torch, device)
    elif mode == "steps":
        warm_steps()
    else:
        from ..settings import WARM_MODES

        raise ValueError(f"AUTOTUNE_WARM_TRITON: one of {WARM_MODES}, not {mode!r}")
