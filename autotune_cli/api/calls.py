"""A winner's built kernel -> a function with torch's signature, cheap to call.

Everything but the tensors is fixed when the function is made (one per plan: shapes,
strides, dtypes, device): the output's allocator, how the tensors are adapted, the device
guard. The kernel's first call goes its ordinary way (Triton compiles or finds its binary);
the call then binds it to that call's layout (templates/base.bound): a Triton launch with
its arguments worked out once goes straight to the compiled kernel, the alignment templates'
copies are bound launches too, and B's copy is skipped while B is an unchanged weight.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

from ..problem import GemmProblem
from .problems import ALIGN_BYTES, Adapt


@dataclass(frozen=True)
class Built:
    """A winner's kernel as planned for one call signature: the problem, how the tensors
    are adapted to it, the built runnable (the planning thread's, for a template that keeps
    buffers), and the output's row pitch (None: contiguous)."""

    problem: GemmProblem
    how: Adapt
    kernel: Callable
    pitch: int | None
    keeps_buffers: bool
    whole_rows: bool = True  # the output's last row padded too (Template.out_writes_padding)


class Torch:
    """What the hot path needs from torch, read once."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.float32 = torch.float32
        # torch.backends.cuda.matmul.allow_tf32 reads this getter through a Python
        # __getattr__ that costs ~1.5 us; call the getter itself where it exists.
        getter = getattr(torch._C, "_get_cublas_allow_tf32", None)
        self.allow_tf32 = getter if callable(getter) else (lambda: torch.backends.cuda.matmul.allow_tf32)
        self.ops = {"mm": torch.mm, "addmm": torch.addmm, "bmm": torch.bmm}
        self.compiling = torch.compiler.is_compiling  # traced by torch.compile: torch's op, as written
        current = getattr(torch._C, "_cuda_getDevice", None)  # torch.cuda.current_device, minus its Python
        self.current_device = current if callable(current) else torch.cuda.current_device


def _alias(t):
    """A new tensor object on `t`'s memory with its shape and strides: a bound launch tells
    the call's tensors apart by identity (mm(x, x) passes one object twice)."""
    return None if t is None else t.as_strided(t.shape, t.stride(), t.storage_offset())


def lazily_bound(kernel: Callable, reuse_b: bool) -> Callable[[Any, Any, Any, Any], None]:
    """`launch(a, b, out, bias)`: the first call runs `kernel` on its Operands, then binds it
    to that call's layout (templates/base.bound); later calls run the bound launch."""
    from ..templates.base import Operands, bound

    go = None

    def launch(a, b, out, bias) -> None:
        nonlocal go
        if go is not None:
            go(a, b, out, bias)
            return
        kernel(Operands(a, b, out, bias))
        go = bound(kernel, Operands(_alias(a), _alias(b), _alias(out), _alias(bias)), reuse_b=reuse_b)

    return launch


def per_caller(first: Callable, make: Callable[[], Callable], stream_of: Callable[[], Any]) -> Callable:
    """A call of a kernel that keeps buffers (`Template.keeps_buffers`): `first` (the planning
    thread's, on its stream) or one `make()` gives once per calling thread and, on the GPU,
    per current stream (`stream_of`): two callers would otherwise write one padded copy of
    their operands at once. Calls from one thread on one stream are ordered, on the GPU too;
    a kernel built for a stream fills its buffers on that stream first."""
    local = threading.local()
    local.calls = {stream_of(): first}

    def call(*args) -> None:
        calls = getattr(local, "calls", None)
        if calls is None:
            calls = local.calls = {}
        stream = stream_of()
        go = calls.get(stream)
        if go is None:
            go = calls[stream] = make()
        go(*args)

    return call


def needs_gradients(*tensors) -> bool:
    """Whether, under grad mode, one of `tensors` (None for an absent one) requires grad: our
    kernels have no backward, so such an op keeps torch's (a call here, a graph's node in
    routing/)."""
    import torch

    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def torch_runs(torch, a, b, bias=None) -> str:
    """Why a call with these tensors runs torch's op whatever its winner ("" where it runs
    the winner): kernel_call's checks at each call (inlined there: they are its hot path),
    said in words (dispatch_info)."""
    if needs_gradients(a, b, bias):
        return "needs gradients (the kernels have no backward)"
    if torch.is_autocast_enabled(a.device.type):
        return "under torch.autocast (torch's op casts the operands)"
    if (a.data_ptr() | b.data_ptr() | (0 if bias is None else bias.data_ptr())) % ALIGN_BYTES:
        return "a view whose data starts off a 16-byte boundary"
    return ""


def kernel_call(op: str, problem: GemmProblem, how: Adapt, launch: Callable[[Any, Any, Any, Any], None],
                pitch: int | None, torch_op, t: Torch, device, whole_rows: bool = True) -> Callable:
    """A function with torch's signature for `op` that runs `launch` (lazily_bound or
    per_caller), for operands on `device`, into an output with the row pitch its template
    asked for (`pitch`; None: contiguous; `whole_rows`: see out_allocator). Tensors that
    need gradients go to `torch_op`, and so do views (a bias too) whose data starts off a
    16-byte boundary (the winner was tuned on aligned operands, its launch bound to
    aligned addresses, and TMA's loads take no other) and
    calls under torch.autocast on the operands' device (torch's op computes in the dtype
    autocast gives it; the winner was tuned for the operands' own)."""
    from ..templates.base import out_allocator, torch_dtype

    torch = t.torch
    grad_enabled = torch.is_grad_enabled
    # the plan's tensors all have one dtype and device (both in its key)
    new_out = out_allocator(problem.out_shape(), pitch, whole_rows)
    dtype, device = torch_dtype(problem.dtype), torch.device(device)
    copy_a, copy_b, bias_row = how.copy_a, how.copy_b, how.bias_row
    on_cuda = problem.device == "cuda"
    current_device = t.current_device if on_cuda else None
    index = device.index if on_cuda else None
    device_guard = torch.cuda.device if on_cuda else None
    adapt = copy_a or copy_b or bias_row
    autocast = torch.is_autocast_enabled
    device_type = device.type

    # mm/bmm and addmm spelled out alike, each one frame: a call is the key, the checks, an
    # allocation and the launch
    if op == "addmm":
        def call(bias, a, b):
            if (a.requires_grad or b.requires_grad or bias.requires_grad) and grad_enabled():
                return torch_op(bias, a, b)
            if (a.data_ptr() | b.data_ptr() | bias.data_ptr()) % ALIGN_BYTES or autocast(device_type):
                return torch_op(bias, a, b)
            if adapt:
                if copy_a:
                    a = a.contiguous()
                if copy_b:
                    b = b.contiguous()
                if bias_row:
                    bias = bias[0]
            out = new_out(dtype, device)
            if on_cuda and current_device() != index:
                with device_guard(index):  # Triton launches on the current device
                    launch(a, b, out, bias)
            else:
                launch(a, b, out, bias)
            return out
    else:
        def call(a, b):
            if (a.requires_grad or b.requires_grad) and grad_enabled():
                return torch_op(a, b)
            if (a.data_ptr() | b.data_ptr()) % ALIGN_BYTES or autocast(device_type):
                return torch_op(a, b)
            if adapt:
                if copy_a:
                    a = a.contiguous()
                if copy_b:
                    b = b.contiguous()
            out = new_out(dtype, device)
            if on_cuda and current_device() != index:
                with device_guard(index):  # Triton launches on the current device
                    launch(a, b, out, None)
            else:
                launch(a, b, out, None)
            return out
    return call


def scaled_kernel_call(problem: GemmProblem, kernel, t: Torch, device) -> Callable:
    """torch._scaled_mm's operands (a, b, scale_a, scale_b, bias) run through a built kernel
    into a fresh output of the problem's output dtype."""
    from ..templates.base import Operands, out_allocator, torch_dtype

    torch = t.torch
    new_out = out_allocator(problem.out_shape(), None)
    dtype, device = torch_dtype(problem.result_dtype), torch.device(device)
    on_cuda = problem.device == "cuda"
    current_device = t.current_device if on_cuda else None
    index = device.index if on_cuda else None

    def call(a, b, scale_a, scale_b, bias):
        out = new_out(dtype, device)
        ops = Operands(a, b, out, bias, scale_a, scale_b)
        if on_cuda and current_device() != index:
            with torch.cuda.device(index):  # Triton launches on the current device
                kernel(ops)
        else:
            kernel(ops)
        return out

    return call
