"""triton::mm_splitk (mm and addmm): split-K for problems with few output tiles and a long K,
rendered from jinja.

When M·N is small, a plain tiled GEMM has fewer tiles than the GPU has SMs and each program
walks all of K alone. Split-K cuts K into SPLIT_K slices and gives each (tile, slice) its own
program (grid axis 1), so SPLIT_K times more programs share the work.

The partial sums are float32 and are combined in one of two ways (the ATOMIC_ADD param):
  0 (default): each slice writes its own [M, N] plane of a [SPLIT_K, M, N] workspace, and a
     second small kernel sums the planes in slice order, adds the bias once, rounds to the
     output dtype and writes C. Deterministic: the same inputs give the same bits.
  1: every slice atomically adds into one [M, N] float32 buffer, zeroed before the launch,
     and the same second kernel (with one plane) adds the bias and rounds. Fewer bytes, but
     the order of the additions varies from run to run, and so does the rounding.
The workspace is allocated on the first run and kept by the runnable (it is at most
SPLIT_K·M·N·4 bytes; the heuristic keeps that small). Strides are runtime arguments, so one
kernel serves every layout; C may have any strides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..problem import GemmProblem
from .base import Operands, Runnable
from .registry import register_template
from .triton_base import TILE_KEYS, TritonTemplate, bias_arguments, jinja_template, load_kernels

TEMPLATE_FILE = Path(__file__).with_name("triton_splitk.py.jinja")
CONFIG_KEYS = TILE_KEYS + ("SPLIT_K",)
DEFAULTS = {"ATOMIC_ADD": 0}
REDUCE_BLOCK = 1024
REDUCE_WARPS = 4
MAX_WORKSPACE_ELEMENTS = 2**31 - 1  # the kernels index the workspace with 32-bit offsets


def k_per_split(k: int, split_k: int, block_k: int) -> int:
    """The length of each slice of K: K / SPLIT_K rounded up to a multiple of BLOCK_K (the
    last slice may be shorter, or empty)."""
    per = -(-k // split_k)
    return -(-per // block_k) * block_k


class TritonSplitKTemplate(TritonTemplate):
    template_file = TEMPLATE_FILE
    config_keys = CONFIG_KEYS
    defaults = DEFAULTS

    def extra_params(self, problem: GemmProblem, params: dict[str, Any]) -> None:
        if params["SPLIT_K"] < 1:
            raise ValueError(f"{self.uid}: SPLIT_K must be at least 1, got {params['SPLIT_K']}")
        params["EVEN_K"] = problem.k % (params["BLOCK_K"] * params["SPLIT_K"]) == 0

    def render(self, problem: GemmProblem, params: dict[str, Any]) -> str:
        context = self.render_context(problem, params)
        atomic = bool(params["ATOMIC_ADD"])
        return self.finish(jinja_template(self.template_file).render(
            **context,
            reduce_name=f"{self.uid.split('::')[1]}_reduce_{context['digest']}",
            EVEN_K=params["EVEN_K"],
            K_PER_SPLIT=k_per_split(problem.k, params["SPLIT_K"], params["BLOCK_K"]),
            ATOMIC_ADD=atomic, PARTS=1 if atomic else params["SPLIT_K"], REDUCE_BLOCK=REDUCE_BLOCK,
        ))

    def build(self, problem: GemmProblem, params: dict[str, Any], kernel_dir: str) -> Runnable:
        if problem.op not in self.ops:
            raise ValueError(f"{self.uid} does not serve {problem.op}")
        source = self.render(problem, params)
        partial, reduce = load_kernels(source, kernel_dir, count=2)
        num_warps, num_stages = params["num_warps"], params["num_stages"]
        bm, bn, split_k = params["BLOCK_M"], params["BLOCK_N"], params["SPLIT_K"]
        atomic = bool(params["ATOMIC_ADD"])
        m, n, k = problem.m, problem.n, problem.k
        planes = 1 if atomic else split_k
        if planes * m * n > MAX_WORKSPACE_ELEMENTS:
            raise ValueError(f"a {planes}x{m}x{n} workspace is too large for 32-bit offsets")
        grid = (-(-m // bm) * -(-n // bn), split_k)
        reduce_grid = (-(-(m * n) // REDUCE_BLOCK),)
        bias_strides_n = problem.op == "addmm" and problem.bias == "n"
        workspaces: dict[Any, Any] = {}

        def workspace(device):
            ws = workspaces.get(device)
            if ws is None:
                import torch

                ws = workspaces[device] = torch.empty((planes, m, n), dtype=torch.float32, device=device)
            return ws

        def arguments(ops: Operands) -> tuple[tuple, tuple]:
            a, b, c = ops.a, ops.b, ops.out
            ws = workspace(c.device)
            bias, bias_args = bias_arguments(ops, bias_strides_n)
            first = (a, b, ws, m, n, k, *a.stride(), *b.stride())
            second = (ws, c, bias, m, n, *c.stride(), *bias_args)
            return first, second

        def run(ops: Operands) -> None:
            first, second = arguments(ops)
            if atomic:
                first[2].zero_()
            partial[grid](*first, num_warps=num_warps, num_stages=num_stages)
            reduce[reduce_grid](*second, num_warps=REDUCE_WARPS, num_stages=1)

        def warmup(ops: Operands) -> list:
            """Compile both kernels for these operands without launching; returns them
            (none under the interpreter)."""
            if not hasattr(partial, "warmup"):
                return []
            first, second = arguments(ops)
            return [partial.warmup(*first, grid=grid, num_warps=num_warps, num_stages=num_stages),
                    reduce.warmup(*second, grid=reduce_grid, num_warps=REDUCE_WARPS, num_stages=1)]

        run.warmup = warmup  # type: ignore[attr-defined]
        return run


register_template(TritonSplitKTemplate("triton::mm_splitk", ("mm", "addmm")))
