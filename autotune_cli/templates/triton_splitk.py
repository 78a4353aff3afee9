"""triton::mm_splitk (mm and addmm): split-K for problems with few output tiles and a long K,
rendered from jinja.

When M·N is small, a plain tiled GEMM has fewer tiles than the GPU has SMs and each program
walks all of K alone. Split-K cuts K into SPLIT_K slices and gives each (tile, slice) its own
program (grid axis 1), so SPLIT_K times more programs share the work.

The partial sums are float32 and are combined in one of three ways (the ATOMIC_ADD and
FUSED_REDUCE params):
  ATOMIC_ADD=0, FUSED_REDUCE=0 (default): each slice writes its own [M, N] plane of a
     [SPLIT_K, M, N] workspace, and a second small kernel sums the planes in slice order,
     adds the bias once, rounds to the output dtype and writes C. Deterministic: the same
     inputs give the same bits.
  ATOMIC_ADD=1: every slice atomically adds into one [M, N] float32 buffer, zeroed before
     the launch, and the same second kernel (with one plane) adds the bias and rounds. Fewer
     bytes, but the order of the additions varies from run to run, and so does the rounding.
  FUSED_REDUCE=1 (with ATOMIC_ADD=0 only): one launch. Each slice writes its plane as in the
     default mode, then counts itself in on an int32 arrival counter of its tile (one per
     output tile, kept with the workspace). The program that arrives last sums the tile's
     planes in slice order 0..SPLIT_K-1, adds the bias, rounds and writes C: the same
     additions in the same order as the second kernel, so the same bits, without the second
     launch (a few microseconds, a real share of a memory-bound decode GEMM's ~10 µs). The
     arrival is an acq_rel atomic after a barrier (every thread of the program has stored
     its part of the plane before the count releases it); the last program reads the other
     planes through L2 (`.cg`), not through its SM's L1, which is not coherent with the
     other SMs' stores. It then sets its counter back to 0, so the next call needs no
     memset (and a CUDA graph of one call replays correctly). The price of no memset: two
     launches of one runnable overlapping (two streams, or one captured graph replayed on
     two) leave a counter off, and every later call of that runnable then sums its tile at
     the wrong arrival, wrong with no error; a candidate is only ever run on one stream, and
     the API builds such a kernel per thread and stream. The fused mode did not beat
     triton::mm on the suite's decode shapes (bench/README.md, "Kernel speed").
The workspace (and the counters) are allocated on the first run and kept by the runnable (it
is at most SPLIT_K·M·N·4 bytes; the heuristic keeps that small): the runnable holds state that
every call writes, so two threads or streams must not share one (`keeps_buffers`). Strides
are runtime arguments, so one kernel serves every layout; C may have any strides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..problem import GemmProblem
from .base import Operands, Runnable
from .launch import Launcher
from .params import Bool, Int
from .registry import register_template
from .triton_base import (TILE_KEYS, TILE_SCHEMA, ZERO_ONE, TritonTemplate, bias_arguments, jinja_template,
                          load_kernels, output_tiles)

TEMPLATE_FILE = Path(__file__).with_name("triton_splitk.py.jinja")
CONFIG_KEYS = TILE_KEYS + ("SPLIT_K",)
DEFAULTS = {"ATOMIC_ADD": 0, "FUSED_REDUCE": 0}
REDUCE_BLOCK = 1024
REDUCE_WARPS = 4
MAX_WORKSPACE_ELEMENTS = 2**31 - 1  # the kernels index the workspace with 32-bit offsets


def k_per_split(k: int, split_k: int, block_k: int) -> int:
    """The length of each slice of K: K / SPLIT_K rounded up to a multiple of BLOCK_K (the
    last slice may be shorter, or empty)."""
    per = -(-k // split_k)
    return -(-per // block_k) * block_k


class TritonSplitKTemplate(TritonTemplate):
    uid = "triton::mm_splitk"
    ops = ("mm", "addmm")
    # plain tiles over slices of K: a decode problem's rows sit in the M slot
    # (choices.decode_stage; triton::gemv splits K for those)
    rows_in_m_slot = True
    template_file = TEMPLATE_FILE
    config_keys = CONFIG_KEYS
    defaults = DEFAULTS
    params_schema = {**TILE_SCHEMA, "SPLIT_K": Int(1, 1024), "ATOMIC_ADD": ZERO_ONE, "FUSED_REDUCE": ZERO_ONE,
                     "EVEN_K": Bool()}
    # The workspace and the arrival counters are written by every call: one runnable per
    # calling thread and stream (in every mode; the workspace alone is shared state).
    keeps_buffers = True

    def extra_params(self, problem: GemmProblem, params: dict[str, Any]) -> None:
        if params["SPLIT_K"] < 1:
            raise ValueError(f"{self.uid}: SPLIT_K must be at least 1, got {params['SPLIT_K']}")
        for key in ("ATOMIC_ADD", "FUSED_REDUCE"):
            if params[key] not in (0, 1):
                raise ValueError(f"{self.uid}: {key} must be 0 or 1, got {params[key]}")
        if params["ATOMIC_ADD"] and params["FUSED_REDUCE"]:
            # the fused reduction sums the slices' planes, which ATOMIC_ADD does not keep
            raise ValueError(f"{self.uid}: FUSED_REDUCE=1 needs ATOMIC_ADD=0")
        params["EVEN_K"] = problem.k % (params["BLOCK_K"] * params["SPLIT_K"]) == 0

    def render(self, problem: GemmProblem, params: dict[str, Any]) -> str:
        context = self.render_context(problem, params)
        atomic = bool(params["ATOMIC_ADD"])
        return self.finish(jinja_template(self.template_file).render(
            **context,
            reduce_name=f"{self.uid.split('::')[1]}_reduce_{context['digest']}",
            EVEN_K=params["EVEN_K"],
            K_PER_SPLIT=k_per_split(problem.k, params["SPLIT_K"], params["BLOCK_K"]),
            ATOMIC_ADD=atomic, FUSED_REDUCE=bool(params["FUSED_REDUCE"]), SPLIT_K=params["SPLIT_K"],
            PARTS=1 if atomic else params["SPLIT_K"], REDUCE_BLOCK=REDUCE_BLOCK,
        ))

    def build(self, problem: GemmProblem, params: dict[str, Any], kernel_dir: str) -> Runnable:
        source = self.source_for_build(problem, params)
        fused = bool(params["FUSED_REDUCE"])
        if fused:  # one kernel: the last slice of each tile reduces
            (partial,), reduce = load_kernels(source, kernel_dir, count=1), None
        else:
            partial, reduce = load_kernels(source, kernel_dir, count=2)
        num_warps, num_stages = params["num_warps"], params["num_stages"]
        split_k = params["SPLIT_K"]
        atomic = bool(params["ATOMIC_ADD"])
        m, n, k = problem.m, problem.n, problem.k
        planes = 1 if atomic else split_k
        if planes * m * n > MAX_WORKSPACE_ELEMENTS:
            raise ValueError(f"a {planes}x{m}x{n} workspace is too large for 32-bit offsets")
        tiles = output_tiles(problem, params)
        grid = (tiles, split_k)
        reduce_grid = (-(-(m * n) // REDUCE_BLOCK),)
        bias_strides_n = problem.op == "addmm" and problem.bias == "n"
        workspaces: dict[Any, Any] = {}

        def workspace(device):
            """(workspace, arrival counters) for `device`, made on its first call; the
            counters start at zero and the fused kernel leaves them at zero."""
            kept = workspaces.get(device)
            if kept is None:
                import torch

                ws = torch.empty((planes, m, n), dtype=torch.float32, device=device)
                counters = torch.zeros((tiles,), dtype=torch.int32, device=device) if fused else None
                kept = workspaces[device] = (ws, counters)
            return kept

        def arguments(ops: Operands) -> tuple[tuple, tuple]:
            a, b, c = ops.a, ops.b, ops.out
            ws, counters = workspace(c.device)
            bias, bias_args = bias_arguments(ops, bias_strides_n)
            if fused:
                first = (a, b, ws, c, bias, counters, m, n, k, *a.stride(), *b.stride(),
                         *c.stride(), *bias_args)
                return first, ()
            first = (a, b, ws, m, n, k, *a.stride(), *b.stride())
            second = (ws, c, bias, m, n, *c.stride(), *bias_args)
            return first, second

        launch_partial = Launcher(partial, num_warps, num_stages)
        launch_reduce = Launcher(reduce, REDUCE_WARPS, 1) if reduce is not None else None

        def run(ops: Operands) -> None:
            first, second = arguments(ops)
            if atomic:
                first[2].zero_()
            launch_partial(grid, *first)
            if not fused:
                launch_reduce(reduce_grid, *second)

        def warmup(ops: Operands) -> list:
            """Compile the kernel(s) `run` launches, with the arguments it passes, without
            launching; returns them (none under the interpreter)."""
            if not hasattr(partial, "warmup"):
                return []
            first, second = arguments(ops)
            kernels = [partial.warmup(*first, grid=grid, num_warps=num_warps, num_stages=num_stages)]
            if not fused:
                kernels.append(reduce.warmup(*second, grid=reduce_grid, num_warps=REDUCE_WARPS, num_stages=1))
            return kernels

        def bind(sample: Operands, reuse_b: bool = False):
            """run, for operands laid out as `sample` (see base.bound): both kernels'
            arguments worked out once, their launches bound."""
            first, second = arguments(sample)
            ws, counters = workspace(sample.out.device)
            if fused:
                go = launch_partial.bind(grid, first[6:])
                if sample.bias is None:
                    return lambda a, b, out, bias: go(a, b, ws, out, out, counters)
                return lambda a, b, out, bias: go(a, b, ws, out, bias, counters)
            go_partial = launch_partial.bind(grid, first[3:])
            go_reduce = launch_reduce.bind(reduce_grid, second[3:])
            zero = ws.zero_ if atomic else None
            no_bias = sample.bias is None

            def go(a, b, out, bias) -> None:
                if zero is not None:
                    zero()
                go_partial(a, b, ws)
                go_reduce(ws, out, out if no_bias else bias)

            return go

        run.warmup = warmup  # type: ignore[attr-defined]
        run.bind = bind  # type: ignore[attr-defined]
        run.workspaces = workspaces  # type: ignore[attr-defined]  (device -> (workspace, counters): for tests)
        return run


register_template(TritonSplitKTemplate())
