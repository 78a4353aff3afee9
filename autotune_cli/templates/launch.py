"""Launching a Triton kernel again, cheaply.

`kernel[grid](*args)` goes through JITFunction.run on every call: it binds the arguments,
works out their specialization (dtypes, 16-byte alignment, ints equal to 1 or divisible by
16), hashes a cache key and finds the compiled kernel, tens of microseconds of Python per
launch. A `Launcher` makes the first launch that way and keeps the compiled kernel it
returns; a later call with the same grid, the same non-tensor arguments, tensors of the
same dtypes and 16-byte aligned pointers (so the same specialization) on the same device
calls the compiled kernel's launcher directly, with the current stream. Every kernel here
takes its tensors first: only such kernels (the tensors a leading run of the arguments) are
launched directly, so that the rest is one slice to compare. Anything else
(other values, a misaligned pointer, launch hooks installed by a profiler, Triton's
interpreter, a Triton whose launcher takes other arguments) goes the JITFunction way.

`Launcher.bind(grid, tail)` fixes the grid and every argument after the tensors, for a caller
whose calls differ only in their tensors' addresses (the Python API's plan for one problem,
its shapes and strides fixed): its launch builds no key and hashes nothing; it checks the
hooks, the device, the tensors' dtypes and 16-byte alignment, and calls the compiled kernel.

Imports nothing at import time; triton and torch are read on the first launch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Launcher"]

ALIGN = 16  # the pointer alignment Triton specializes on


def _direct_launch_support():
    """(torch.cuda.current_device, the raw-stream getter, triton's runtime knobs) when this
    Triton's compiled kernels are launched as `run(gx, gy, gz, stream, function, packed
    metadata, launch metadata, enter hook, exit hook, *every bound argument)` (3.3 and
    later) and kernels run on a GPU; else None."""
    import os

    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return None
    try:
        import torch
        import triton
        from triton import knobs

        version = tuple(int(part) for part in triton.__version__.split(".")[:2])
        stream = torch._C._cuda_getCurrentRawStream
    except Exception:  # noqa: BLE001 - another torch or Triton: the plain launch
        return None
    if version < (3, 3):
        return None
    current = getattr(torch._C, "_cuda_getDevice", None)  # torch.cuda.current_device, minus its Python
    return (current if callable(current) else torch.cuda.current_device), stream, knobs.runtime


def _hooks_active(runtime) -> bool:
    for hook in (runtime.launch_enter_hook, runtime.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):  # a function, or a non-empty chain
            return True
    return False


_WRAPPER_CALL = ("self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid, "
                 "self.launch_pdl, global_scratch, profile_scratch, *args)")


def _unwrapped(run) -> tuple | None:
    """(the C launch function, the arguments it takes after the function handle and before
    the packed metadata) of a compiled kernel's `run`, where `run` is Triton's CudaLauncher
    whose `__call__` only works out two scratch buffers and passes them on (3.5 and 3.6),
    and this kernel needs neither (so both are None): calling its C launch directly saves a
    Python frame and two closures per launch. None otherwise (the wrapper is called)."""
    try:
        if run.global_scratch_size or run.profile_scratch_size or not _plain_wrapper(type(run)):
            return None
        launch, extra = run.launch, (run.launch_cooperative_grid, run.launch_pdl, None, None)
    except Exception:  # noqa: BLE001 - another Triton's launcher: the wrapper is called
        return None
    return (launch, extra) if callable(launch) else None


_WRAPPERS: dict[type, bool] = {}


def _plain_wrapper(cls: type) -> bool:
    """Whether `cls.__call__` is the wrapper `_unwrapped` knows (read once per class)."""
    known = _WRAPPERS.get(cls)
    if known is None:
        import inspect

        try:
            lines = [line.strip() for line in inspect.getsource(cls.__call__).splitlines()]
        except (OSError, TypeError):
            lines = []
        known = _WRAPPERS[cls] = bool(
            lines and lines[0] == "def __call__(self, gridX, gridY, gridZ, stream, function, *args):"
            and _WRAPPER_CALL in " ".join(lines).replace("( ", "(").replace(" )", ")"))
    return known


class Launcher:
    """`launcher(grid, *args)` is `kernel[grid](*args, num_warps=…, num_stages=…)`, the
    compiled kernel launched directly once it is known (see the module). `args` are every
    argument of the kernel, positionally, constexprs included."""

    __slots__ = ("kernel", "options", "_support", "_tensors", "_fast")
    # _tensors: how many leading arguments are tensors (None: not known yet)

    def __init__(self, kernel, num_warps: int, num_stages: int, launch_pdl: bool = False) -> None:
        self.kernel = kernel
        self.options = {"num_warps": num_warps, "num_stages": num_stages}
        if launch_pdl:  # a programmatic dependent launch: compiled into the kernel's metadata
            self.options["launch_pdl"] = True
        self._support: Any = False  # False: not looked at yet; None: direct launch unavailable
        self._tensors: int | None = None
        # (device, grid, non-tensor args) -> (run, function, packed metadata, tensor dtypes)
        self._fast: dict[tuple, tuple] = {}

    def __call__(self, grid: tuple, *args) -> None:
        fast = self._fast
        if fast:
            current, stream, runtime = self._support
            device = current()
            tensors = self._tensors
            try:
                entry = fast.get((device, grid, args[tensors:]))
            except TypeError:  # an unhashable argument
                entry = None
            if entry is not None and not _hooks_active(runtime):
                run, function, metadata, dtypes = entry
                aligned = True
                for t, dtype in zip(args, dtypes):
                    if t.dtype is not dtype or t.data_ptr() % ALIGN:
                        aligned = False
                        break
                if aligned:
                    g0, g1, g2 = grid if len(grid) == 3 else (*grid, 1, 1)[:3]
                    run(g0, g1, g2, stream(device), function, metadata, None, None, None, *args)
                    return
        compiled = self.kernel[grid](*args, **self.options)
        self._remember(grid, args, compiled)

    def _remember(self, grid: tuple, args: tuple, compiled) -> None:
        """Keep `compiled` for direct launches where that is sound (see the module)."""
        if self._support is False:
            self._support = _direct_launch_support()
        if self._support is None or compiled is None:
            return
        if hasattr(compiled, "result"):  # a compile still under way
            return
        if getattr(self.kernel, "pre_run_hooks", None) or len(args) != len(getattr(self.kernel, "arg_names", ())):
            return  # hooks to run, or defaulted arguments JITFunction would bind
        if not all(hasattr(compiled, name) for name in ("run", "function", "packed_metadata")):
            return
        lead = 0
        while lead < len(args) and hasattr(args[lead], "data_ptr"):
            lead += 1
        if any(hasattr(a, "data_ptr") for a in args[lead:]):
            return  # a tensor after a scalar: not the shape this fast path compares
        if self._tensors is None:
            self._tensors = lead
        elif lead != self._tensors:
            return
        if any(t.data_ptr() % ALIGN for t in args[:lead]):
            return  # compiled for a misaligned pointer: aligned calls get their own binary
        try:
            run = compiled.run  # loads the binary (its function handle) on first access
            function = compiled.function
            metadata = compiled.packed_metadata
        except Exception:  # noqa: BLE001 - not loaded here: the plain launch
            return
        current, _, _ = self._support
        key = (current(), grid, args[lead:])
        try:
            hash(key)
        except TypeError:
            return
        if len(self._fast) >= 64:  # a kernel called with ever new sizes: keep the newest
            self._fast.pop(next(iter(self._fast)))
        self._fast[key] = (run, function, metadata, tuple(t.dtype for t in args[:lead]))

    def bind(self, grid: tuple, tail: tuple, trusted: tuple[int, ...] = ()):
        """`go(*tensors)`: `self(grid, *tensors, *tail)` for a caller whose tensors keep their
        dtypes from call to call (a plan's, the dtypes in its key). Once a JIT launch on this
        device has left the compiled kernel for those dtypes and 16-byte aligned pointers, `go`
        launches it directly; any other launch (a misaligned pointer, hooks, the interpreter)
        is the ordinary call. `trusted`: the positions of tensors the caller made itself,
        aligned by their allocator (an output, a padded buffer), whose alignment is not checked.
        A direct launch passes the pointers as ints: Triton's C launch takes an int as the
        pointer itself, where for a tensor it calls data_ptr() and asks the driver whether the
        pointer is a device's (a plan's key says the tensors are on this GPU)."""
        tail = tuple(tail)
        g0, g1, g2 = (*grid, 1, 1)[:3] if len(grid) < 3 else grid
        known: dict = {}  # device -> (launch, function, the arguments between it and the tensors)
        jit = self.__call__
        trusted_set = set(trusted)

        def learn(tensors: tuple) -> None:
            device = self._support[0]()
            entry = self._fast.get((device, grid, tail)) if self._tensors == len(tensors) else None
            if entry is not None and entry[3] == tuple(t.dtype for t in tensors):
                run, function, metadata = entry[:3]
                raw = _unwrapped(run)
                # what follows the function handle: the C launch's own arguments, or run's
                known[device] = (raw[0], function, (*raw[1], metadata, None, None, None)) if raw is not None else (
                    run, function, (metadata, None, None, None))
                checked[:] = [i for i in range(len(tensors)) if i not in trusted_set]

        checked: list[int] = []

        as_ints = True  # pointers handed to the C launch as ints (it then asks nothing of the driver)

        def go(*tensors) -> None:
            nonlocal as_ints
            if known:
                current, stream, runtime = self._support
                device = current()
                entry = known.get(device)
                if entry is not None and not _hooks_active(runtime):
                    pointers = [t.data_ptr() for t in tensors]
                    for i in checked:
                        if pointers[i] % ALIGN:
                            break
                    else:
                        run, function, lead = entry
                        if as_ints:
                            try:
                                run(g0, g1, g2, stream(device), function, *lead, *pointers, *tail)
                                return
                            except TypeError:  # a launcher that takes only objects with data_ptr()
                                as_ints = False
                        run(g0, g1, g2, stream(device), function, *lead, *tensors, *tail)
                        return
            jit(grid, *tensors, *tail)
            if self._support and self._support[0]() not in known:
                learn(tensors)

        return go
