"""triton::mm_persistent_tma (mm and addmm): a persistent Triton GEMM whose operand tiles
come in through TMA tensor descriptors, rendered from jinja.

Which TMA API. Triton has had device-side descriptors (`tl.make_tensor_descriptor`, the
kernel builds them in a global scratch buffer it gets through `triton.set_allocator`) and
host-side ones (`triton.tools.tensor_descriptor.TensorDescriptor`) since 3.4; 3.3 had only
`tl._experimental_make_tensor_descriptor`. Both exist in 3.6 (the GPU host) and 3.9 (CI), and
both run under 3.9's interpreter. We use the device-side form, as Inductor's persistent TMA
template and Triton's persistent-matmul tutorial do: the kernel takes plain tensors, so one
argument list serves launch and `warmup`, and nothing is encoded on the host per launch.
The price is the allocator, which the kernel sets before each launch (`set_allocator` sets a
ContextVar, i.e. per thread). The interpreter needs no scratch memory.

NUM_SMS. The grid is one program per SM (fewer when there are fewer tiles), and program p
takes tiles p, p + NUM_SMS, ... where NUM_SMS, a constexpr, is the device's SM count, not the
grid's size: with fewer tiles than SMs each program takes one tile and the stride ends its
loop, so the binary depends on the device only and every problem shares it (the compile
pool builds it once). Neither the heuristic nor `full_params` sees the device, and the params
need not: the SM count is part of the fingerprint that guards every cache entry, so params +
fingerprint fix the kernel, and the same params stay valid on a GPU with another SM count.
`build` (in the worker, on the device) reads the count from torch; under the interpreter it
is INTERPRETER_SMS.

TMA needs compute capability >= 9.0, a contiguous last dimension and 16-byte aligned row
strides and base addresses. A transposed operand is described as stored ([K, M] for A) and
its tiles are transposed after loading, so every layout works when the strides align;
`unavailable_reason` says why not when they do not (e.g. fp16 with K = 777).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from ..problem import GemmProblem
from .base import Operands
from .launch import Launcher
from .registry import register_template
from .kernel_files import load_kernel
from .triton_base import (TILE_SCHEMA, ZERO_ONE, Step, TritonKernel, TritonTemplate, bias_arguments, interpreting,
                          output_tiles)

TEMPLATE_FILE = Path(__file__).with_name("triton_persistent_tma.py.jinja")
DEFAULTS = {"FLATTEN": 1}  # tuned too, but optional in a config
INTERPRETER_SMS = 4  # programs under the interpreter: enough for each to own several tiles
MIN_TRITON = (3, 4)  # the first release with tl.make_tensor_descriptor and set_allocator
TMA_ALIGN = 16  # bytes: base address and every stride but the last


# -- what this Triton and this device can do --------------------------------------------------

def _imported(name: str):
    """The module if this process has imported it already, else None (nothing is imported)."""
    return sys.modules.get(name)


def installed_triton_version() -> tuple[int, int] | None:
    """The installed Triton's (major, minor), read from the package's metadata without
    importing it; None where none is installed."""
    for name in ("triton", "pytorch-triton"):
        try:
            text = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        match = re.match(r"(\d+)\.(\d+)", text)
        if match:
            return int(match.group(1)), int(match.group(2))
    return None


@lru_cache(maxsize=1)
def descriptor_api_problem() -> str | None:
    """Why this Triton cannot build device-side tensor descriptors, or None if it can.
    Asks the module itself when triton is already imported (a worker), else the installed
    version, so that the parent process need not import triton to prune."""
    language = _imported("triton.language")
    if language is not None:
        triton = _imported("triton")
        if hasattr(language, "make_tensor_descriptor") and hasattr(triton, "set_allocator"):
            return None
        version = getattr(triton, "__version__", "?")
        return f"triton {version} lacks tl.make_tensor_descriptor / triton.set_allocator (needs >= 3.4)"
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed"
    version = installed_triton_version()
    if version is not None and version < MIN_TRITON:
        return (f"triton {version[0]}.{version[1]} lacks tl.make_tensor_descriptor "
                f"(needs >= {MIN_TRITON[0]}.{MIN_TRITON[1]})")
    return None


@lru_cache(maxsize=1)
def interpreter_descriptor_problem() -> str | None:
    """Why Triton's interpreter cannot run tensor descriptors, or None if it can (it can
    since the release that made them public, 3.4)."""
    problem = descriptor_api_problem()
    if problem:
        return problem
    interpreter = _imported("triton.runtime.interpreter")
    if interpreter is not None:
        builder = getattr(interpreter, "InterpreterBuilder", None)
        if builder is not None and not hasattr(builder, "create_make_tensor_descriptor"):
            return "this Triton's interpreter cannot run tensor descriptors"
    return None


def tma_device_problem(device) -> str | None:
    """Why TMA descriptors cannot run on this device (Triton's API, the interpreter, an
    NVIDIA GPU of compute capability 9.0 or later), or None: every TMA template asks this."""
    api = descriptor_api_problem()
    if api:
        return api
    if device.device_type == "cpu":
        return interpreter_descriptor_problem()
    if device.device_type != "cuda":
        return f"no TMA on device type {device.device_type!r}"
    if device.is_amd:
        return "TMA descriptors are an NVIDIA feature"
    capability = device.compute_capability
    if capability is None:
        return "TMA needs compute capability >= 9.0; the device's is unknown"
    if capability < (9, 0):
        return f"TMA needs compute capability >= 9.0, the device has {device.capability}"
    return None


def misaligned_rows(problem: GemmProblem) -> list[str]:
    """The stored matrices whose row stride is not a multiple of 16 bytes. Rows are as
    stored: a transposed A is [K, M], so its rows are M elements long."""
    size = problem.dtype_size
    rows = {
        "A": problem.m if problem.a_transposed else problem.k,
        "B": problem.k if problem.b_transposed else problem.n,
        "C": problem.n,
    }
    return [f"{name} rows are {count * size} B" for name, count in rows.items()
            if (count * size) % TMA_ALIGN]


# -- the template -----------------------------------------------------------------------------

class TritonPersistentTMATemplate(TritonTemplate):
    uid = "triton::mm_persistent_tma"
    ops = ("mm", "addmm")
    tile_model = "prunes"  # choices.tile_model_stage
    rows_in_m_slot = True  # choices.decode_stage
    template_file = TEMPLATE_FILE
    defaults = DEFAULTS
    params_schema = {**TILE_SCHEMA, "FLATTEN": ZERO_ONE}

    def unavailable_reason(self, problem: GemmProblem, device) -> str | None:
        why = tma_device_problem(device)
        if why:
            return why
        bad = misaligned_rows(problem)
        if bad:
            return ("TMA needs row strides that are multiples of 16 bytes: "
                    + ", ".join(bad) + f" ({problem.dtype}, layout {problem.layout})")
        return None

    def render(self, problem: GemmProblem, params: dict[str, Any]) -> str:
        return self.render_with(
            problem, params, FLATTEN=bool(params["FLATTEN"]),
            A_TRANSPOSED=problem.a_transposed, B_TRANSPOSED=problem.b_transposed,
        )

    def build(self, problem: GemmProblem, params: dict[str, Any], kernel_dir: str) -> PersistentKernel:
        kernel = load_kernel(self.source_for_build(problem, params), kernel_dir)
        m, n, k = problem.m, problem.n, problem.k
        a_t, b_t = problem.a_transposed, problem.b_transposed
        bias_strides_n = problem.op == "addmm" and problem.bias == "n"

        def arguments(ops: Operands) -> tuple:
            a, b, c = ops.a, ops.b, ops.out
            stride_a = _row_stride(a, a_t, "A")
            stride_b = _row_stride(b, b_t, "B")
            stride_c = _row_stride(c, False, "out")
            bias, bias_args = bias_arguments(ops, bias_strides_n)
            return (a, b, c, bias, m, n, k, stride_a, stride_b, stride_c, *bias_args)

        return PersistentKernel(kernel, params, problem.device, output_tiles(problem, params), arguments)


class PersistentKernel(TritonKernel):
    """A persistent kernel with device-side TMA descriptors: one program per SM (`programs`,
    fewer where there are fewer tiles), launched with `arguments(ops)` and then NUM_SMS, the
    device's SM count (see the module). Triton's allocator (the descriptors' global scratch
    memory) is set before every launch: `set_allocator` sets a ContextVar, so a thread that
    did not build the kernel may launch it. No bound launch and no launch parts: a launch
    that does not set the allocator would fail."""

    def __init__(self, kernel, params: dict[str, Any], device_type: str, tiles: int,
                 arguments: Callable[[Operands], tuple]) -> None:
        self.sms = device_sm_count(device_type)
        self.programs = max(1, min(self.sms, tiles))
        self.grid = (self.programs,)
        self.launcher = Launcher(kernel, params["num_warps"], params["num_stages"])
        self.arguments = arguments
        self.allocator = None if device_type == "cpu" or interpreting() else _scratch_allocator()

    def steps(self, ops: Operands) -> tuple[Step, ...]:
        return ((self.launcher, self.grid, (*self.arguments(ops), self.sms)),)  # NUM_SMS: the last argument

    def before_launch(self, ops: Operands) -> None:
        if self.allocator is not None:
            import triton

            triton.set_allocator(self.allocator)


_assumed_sm_count: int | None = None  # set in a compile process that never brings CUDA up


def assume_sm_count(count: int) -> None:
    """Build for a GPU with `count` SMs without asking CUDA (runner/offline_compile.py: a
    compile process knows the device from the main process's probe)."""
    global _assumed_sm_count
    _assumed_sm_count = count


def device_sm_count(device_type: str) -> int:
    """Programs of the persistent grid: the current GPU's SM count, or INTERPRETER_SMS."""
    if device_type == "cpu" or interpreting():
        return INTERPRETER_SMS
    if _assumed_sm_count is not None:
        return _assumed_sm_count
    import torch

    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def _scratch_allocator():
    """Global memory for the descriptors the kernel builds (128 B each per program)."""
    import torch

    def allocate(size: int, alignment: int, stream):
        return torch.empty(size, dtype=torch.int8, device="cuda")

    return allocate


def _row_stride(tensor, transposed: bool, name: str) -> int:
    """The stride between rows of `tensor` as stored, checking what TMA needs: a contiguous
    last dimension, a 16-byte aligned base and row stride."""
    rows, cols = (1, 0) if transposed else (0, 1)
    if tensor.stride(cols) != 1 and tensor.shape[cols] != 1:
        layout = "column-major" if transposed else "row-major"
        raise ValueError(f"{name} must be {layout} for this kernel, got strides {tuple(tensor.stride())}")
    stride = tensor.stride(rows)
    if tensor.shape[rows] == 1:  # one row: its stride is never used, but must look aligned
        per_align = max(1, TMA_ALIGN // tensor.element_size())
        stride = -(-tensor.shape[cols] // per_align) * per_align
    if tensor.data_ptr() % TMA_ALIGN or (stride * tensor.element_size()) % TMA_ALIGN:
        raise ValueError(f"{name}: TMA needs a 16-byte aligned base and row stride "
                         f"(stride {stride}, {tensor.element_size()} B elements)")
    return stride


register_template(TritonPersistentTMATemplate())
