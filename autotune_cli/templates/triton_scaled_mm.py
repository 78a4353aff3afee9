"""The float8 Triton templates (scaled_mm), each rendered from jinja, the scales (tensorwise
or rowwise) and the bias applied to the fp32 accumulator in the epilogue:

  triton::scaled_mm_persistent_tma  a persistent GEMM for Hopper whose operand tiles come in
                                    through TMA descriptors (below);
  triton::scaled_mm                 a plain tiled one with pointer loads (triton::mm's
                                    pattern): sm_89 and later, no stride alignment needed.

It follows triton::mm_persistent_tma (templates/triton_persistent_tma.py: device-side
descriptors, the allocator, NUM_SMS as the device's SM count) for the one layout the FP8
matrix units take, A row-major and B column-major. The scale kind and the output dtype are
params, so that two problems differing in them never share a compile-pool job or a cached
config; so is the accumulation (FAST_ACCUM, the problem's `fast_accum`): without it each K
step's products are summed apart and added to the fp32 accumulator (torch's default), which
holds a second BLOCK_M x BLOCK_N accumulator in registers (heuristics/triton_scaled_mm.py
drops the tiles that would spill). On the CPU it runs under Triton's interpreter, which runs float8 `tl.dot` exactly and
tensor descriptors on float8 (checked with triton 3.9).

TMA needs a 16-byte aligned base and row stride: K a multiple of 16 (float8 rows of A and
of B as stored) and the output's rows (N elements of the output dtype) a multiple of 16 bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..problem import DTYPE_SIZE, EPILOGUE_SCALES, OUT_DTYPES, GemmProblem
from .base import Operands
from .params import Bool, Choice
from .registry import register_template
from .kernel_files import load_kernel
from .triton_base import TILE_SCHEMA, ZERO_ONE, OneLaunchKernel, TritonTemplate, jinja_template, output_tiles
from .triton_persistent_tma import TMA_ALIGN, PersistentKernel, _row_stride, tma_device_problem

TEMPLATE_FILE = Path(__file__).with_name("triton_scaled_mm.py.jinja")
TILED_FILE = Path(__file__).with_name("triton_scaled_mm_tiled.py.jinja")
MIN_TILED_CAPABILITY = (8, 9)  # the float8 MMA: Ada and later
# WARP_SPECIALIZE: which loop Triton's automatic warp specialization is asked for on (0: none)
WS_TILE_LOOP, WS_K_LOOP = 1, 2
WARP_SPECIALIZE = (0, WS_TILE_LOOP, WS_K_LOOP)


def misaligned_rows(problem: GemmProblem) -> list[str]:
    """The stored matrices whose row stride is not a multiple of 16 bytes (A [m, k] and B
    stored [n, k] in float8, the output [m, n] in its dtype)."""
    rows = {"A": problem.k * problem.dtype_size, "B": problem.k * problem.dtype_size,
            "C": problem.n * DTYPE_SIZE[problem.result_dtype]}
    return [f"{name} rows are {size} B" for name, size in rows.items() if size % TMA_ALIGN]


def scaled_fields(problem: GemmProblem) -> dict[str, Any]:
    """The params a scaled problem fixes for a tensorwise or rowwise float8 kernel: its
    scales' kind, the output dtype and whether it accumulates fast."""
    return {"SCALE": problem.scale, "OUT_DTYPE": problem.result_dtype, "FAST_ACCUM": problem.fast_accum}


def float8_mma_unavailable(device, kernel: str) -> str | None:
    """Why `kernel`, written for NVIDIA's float8 conversions and MMA (Ada, compute capability
    8.9, and later), cannot run on `device`; None where it can (the CPU: the interpreter)."""
    if device.device_type == "cpu":
        return None
    if device.device_type != "cuda" or device.is_amd:
        return f"{kernel} is written for NVIDIA's float8 MMA"
    capability = device.compute_capability
    if capability is None or capability < MIN_TILED_CAPABILITY:
        return (f"float8 MMA needs compute capability >= 8.9, the device has "
                f"{device.capability or 'an unknown one'}")
    return None


def epilogue_scale_strides(ops: Operands, rowwise: bool) -> tuple[int, int]:
    """The strides the epilogue-scaling kernels read the scales through: scale_a [m, 1]
    along M and scale_b [1, n] along N when `rowwise`; (0, 0) for tensorwise's one value
    each (never used)."""
    return (ops.scale_a.stride(0), ops.scale_b.stride(1)) if rowwise else (0, 0)


def pointer_operands(ops: Operands) -> tuple:
    """(a, b, out, bias) as the float8 kernels with pointer loads take them: A row-major, B
    column-major, a row-major output, a contiguous bias (no bias: the output stands in,
    never read); ValueError for other layouts."""
    a, b, c = ops.a, ops.b, ops.out
    if a.stride(1) != 1 or b.stride(0) != 1 or c.stride(1) != 1:
        raise ValueError("this kernel takes A row-major, B column-major and a row-major output")
    if ops.bias is not None and ops.bias.stride(0) != 1:
        raise ValueError("the bias must be contiguous for this kernel")
    return a, b, c, (ops.bias if ops.bias is not None else c)


class TritonScaledMMTemplate(TritonTemplate):
    uid = "triton::scaled_mm_persistent_tma"
    ops = ("scaled_mm",)
    template_file = TEMPLATE_FILE
    defaults = {"FLATTEN": 1, "WARP_SPECIALIZE": 0, "PROMOTE_IN_DOT": 0}
    params_schema = {**TILE_SCHEMA, "FLATTEN": ZERO_ONE, "WARP_SPECIALIZE": Choice(WARP_SPECIALIZE),
                     "PROMOTE_IN_DOT": ZERO_ONE, "SCALE": Choice(EPILOGUE_SCALES), "OUT_DTYPE": Choice(OUT_DTYPES),
                     "FAST_ACCUM": Bool()}

    def supports(self, problem: GemmProblem) -> bool:
        """Tensorwise and rowwise scales (blockwise: templates/triton_scaled_mm_block.py)."""
        return problem.op in self.ops and problem.scale in EPILOGUE_SCALES

    def unavailable_reason(self, problem: GemmProblem, device) -> str | None:
        why = tma_device_problem(device)
        if why:
            return why
        bad = misaligned_rows(problem)
        if bad:
            return "TMA needs row strides that are multiples of 16 bytes: " + ", ".join(bad)
        return None

    def full_params(self, problem: GemmProblem, config: dict[str, Any]) -> dict[str, Any]:
        return {**super().full_params(problem, config), **scaled_fields(problem)}

    def render(self, problem: GemmProblem, params: dict[str, Any]) -> str:
        context = self.render_context(problem, params)
        ws = params["WARP_SPECIALIZE"]
        context.update(SCALE=params["SCALE"], HAS_BIAS=bool(problem.bias), FLATTEN=bool(params["FLATTEN"]),
                       FAST_ACCUM=bool(params["FAST_ACCUM"]), PROMOTE_IN_DOT=bool(params["PROMOTE_IN_DOT"]),
                       WS_OUTER=ws == WS_TILE_LOOP, WS_INNER=ws == WS_K_LOOP)
        return self.finish(jinja_template(self.template_file).render(**context))

    def build(self, problem: GemmProblem, params: dict[str, Any], kernel_dir: str) -> PersistentKernel:
        kernel = load_kernel(self.source_for_build(problem, params), kernel_dir)
        m, n, k = problem.m, problem.n, problem.k
        rowwise = problem.scale == "row"

        def arguments(ops: Operands) -> tuple:
            a, b, c = ops.a, ops.b, ops.out
            stride_a = _row_stride(a, False, "A")
            stride_b = _row_stride(b, True, "B")
            stride_c = _row_stride(c, False, "out")
            bias = ops.bias if ops.bias is not None else c  # no bias: never read
            if ops.bias is not None and ops.bias.stride(0) != 1:
                raise ValueError("the bias must be contiguous for this kernel")
            return (a, b, c, bias, ops.scale_a, ops.scale_b, m, n, k, stride_a, stride_b, stride_c,
                    *epilogue_scale_strides(ops, rowwise))

        return PersistentKernel(kernel, params, problem.device, output_tiles(problem, params), arguments)


class TritonScaledMMTiledTemplate(TritonTemplate):
    uid = "triton::scaled_mm"
    ops = ("scaled_mm",)
    template_file = TILED_FILE
    params_schema = {**TILE_SCHEMA, "EVEN_K": Bool(), "SCALE": Choice(EPILOGUE_SCALES), "OUT_DTYPE": Choice(OUT_DTYPES),
                     "FAST_ACCUM": Bool()}

    def supports(self, problem: GemmProblem) -> bool:
        """Tensorwise and rowwise scales (blockwise: templates/triton_scaled_mm_block.py)."""
        return problem.op in self.ops and problem.scale in EPILOGUE_SCALES

    def unavailable_reason(self, problem: GemmProblem, device) -> str | None:
        return float8_mma_unavailable(device, "the float8 tiled kernel")

    def full_params(self, problem: GemmProblem, config: dict[str, Any]) -> dict[str, Any]:
        params = super().full_params(problem, config)
        params["EVEN_K"] = problem.k % params["BLOCK_K"] == 0
        return {**params, **scaled_fields(problem)}

    def render(self, problem: GemmProblem, params: dict[str, Any]) -> str:
        context = self.render_context(problem, params)
        context.update(SCALE=params["SCALE"], HAS_BIAS=bool(problem.bias), EVEN_K=params["EVEN_K"],
                       FAST_ACCUM=bool(params["FAST_ACCUM"]))
        return self.finish(jinja_template(self.template_file).render(**context))

    def build(self, problem: GemmProblem, params: dict[str, Any], kernel_dir: str) -> OneLaunchKernel:
        kernel = load_kernel(self.source_for_build(problem, params), kernel_dir)
        m, n, k = problem.m, problem.n, problem.k
        grid = (output_tiles(problem, params),)
        rowwise = problem.scale == "row"

        def arguments(ops: Operands) -> tuple:
            a, b, c, bias = pointer_operands(ops)
            return (a, b, c, bias, ops.scale_a, ops.scale_b, m, n, k, a.stride(0), b.stride(1), c.stride(0),
                    *epilogue_scale_strides(ops, rowwise))

        return OneLaunchKernel(kernel, params, grid, arguments)


register_template(TritonScaledMMTemplate())
register_template(TritonScaledMMTiledTemplate())
