"""The eager calls a route runs where Inductor cannot launch the kernel itself (padded
copies, a split-K workspace, a plugin's callable): each made once and run once on zeros as
the graph compiles, so that what it keeps is allocated outside any CUDA graph's pool."""
from typing import Callable

from ..api import Built, Dispatch, Dispatcher
from ..templates.kernel import Kernel

__all__ = ["launch_parts", "warmed_call", "warmed_scaled_call"]


def launch_parts(built: Built | None):
    """The built kernel's launch parts (a Triton kernel that one launch runs), for a route
    through torch.compile's wrap_triton; None for torch's op, a plugin's callable, or a
    kernel that offers none."""
    return built.kernel.launch_parts if built is not None and isinstance(built.kernel, Kernel) else None


def warmed_call(dispatcher: Dispatcher, info: Dispatch, built: Built, a, b, bias) -> Callable:
    """The eager call of `built`'s one kernel (not one per stream, as eager code gets),
    run once here on zeros: what the kernel keeps (padded copies, a split-K workspace)
    is allocated now, outside any CUDA graph pool, and a graph captured later (Inductor's
    cudagraphs) uses it in place. The compiled graph orders its calls on its stream, so
    one set of buffers serves it; two threads running one compiled model at once on two
    streams would share them."""
    import torch

    from ..api.calls import kernel_call
    from ..templates.base import Operands

    t = dispatcher._torch()
    device = a.device
    kernel = built.kernel

    def launch(a, b, out, bias) -> None:  # not bound: the compiled graph's strides are its own
        kernel(Operands(a, b, out, bias))

    call = kernel_call(info.op, built.problem, built.how, launch, built.pitch, t.ops[info.op], t, device,
                       built.whole_rows)
    real = [None if x is None else
            torch.empty_strided(tuple(x.shape), x.stride(), dtype=x.dtype, device=device).zero_()
            for x in (a, b, bias)]
    if bias is None:
        call(real[0], real[1])
    else:
        call(real[2], real[0], real[1])
    return call


def warmed_scaled_call(dispatcher: Dispatcher, built: Built, tensors) -> Callable:
    """As `warmed_call`, for torch._scaled_mm's operands (a, b, scale_a, scale_b, bias)."""
    import torch

    from ..api.calls import scaled_kernel_call

    device = tensors[0].device
    call = scaled_kernel_call(built.problem, built.kernel, dispatcher._torch(), device)
    real = [None if x is None else
            torch.empty_strided(tuple(x.shape), x.stride(), dtype=x.dtype, device=device).zero_()
            for x in tensors]
    call(*real)
    return call
