"""aten::_scaled_mm: torch._scaled_mm, cuBLASLt's FP8 GEMM on the GPU (torch's own kernel on
the CPU), with the problem's scales, bias and output dtype; one config, the library's pick.

Its accumulation is the problem's (`fast_accum`: torch's use_fast_accum), as the user's call asks.
"""

from __future__ import annotations

from typing import Any

from ..problem import GemmProblem
from .base import Operands, Runnable, Template
from .registry import register_template

# cuBLASLt's FP8 GEMM, as torch._scaled_mm checks on CUDA: K and N multiples of 16.
CUDA_ALIGN = 16


class AtenScaledMMTemplate(Template):
    backend = "aten"
    vendor = True  # cuBLAS (search.pick)
    uid = "aten::_scaled_mm"
    ops = ("scaled_mm",)
    params_schema: dict = {}  # one config: torch's own call takes no params

    def source_text(self) -> str:
        # The kernel is the library's: its identity is torch's version, already in the fingerprint.
        return "aten::_scaled_mm v1"

    def unavailable_reason(self, problem: GemmProblem, device) -> str | None:
        if problem.scale == "block":
            return self._blockwise_unavailable(device)
        if device.device_type != "cuda":
            return None
        if problem.k % CUDA_ALIGN or problem.n % CUDA_ALIGN:
            return (f"torch._scaled_mm on CUDA needs K and N multiples of {CUDA_ALIGN} "
                    f"(K={problem.k}, N={problem.n})")
        if problem.scale == "row" and problem.out_dtype != "bfloat16":
            return "torch._scaled_mm's rowwise scaling on CUDA writes bfloat16 only"
        return None

    @staticmethod
    def _blockwise_unavailable(device) -> str | None:
        """torch._scaled_mm takes 1x128 x 128x128 scales through cuBLASLt on Hopper (sm_90);
        torch's CPU kernel takes tensorwise and rowwise scales only, its ROCm build none."""
        if device.device_type != "cuda":
            return "torch._scaled_mm on the CPU takes tensorwise and rowwise scales only"
        if device.is_amd:
            return "torch._scaled_mm's 1x128/128x128 blockwise scaling is cuBLASLt's, not ROCm's"
        if (device.compute_capability or (0, 0))[0] != 9:
            return (f"torch._scaled_mm's 1x128/128x128 blockwise scaling is cuBLASLt's on Hopper "
                    f"(compute capability 9.x), the device has {device.capability or 'an unknown one'}")
        return None

    def build(self, problem: GemmProblem, params: dict[str, Any], kernel_dir: str) -> Runnable:
        import torch

        from .base import torch_dtype

        scaled_mm = torch._scaled_mm
        out_dtype = torch_dtype(problem.result_dtype)
        fast = problem.fast_accum

        def run(ops: Operands) -> None:
            scaled_mm(ops.a, ops.b, scale_a=ops.scale_a, scale_b=ops.scale_b, bias=ops.bias,
                      out_dtype=out_dtype, use_fast_accum=fast, out=ops.out)

        return run


register_template(AtenScaledMMTemplate())
