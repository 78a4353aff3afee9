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
     launches of one kernel overlapping (two streams, or one captured graph replayed on
     two) leave a counter off, and every later call of that kernel then sums its tile at
     the wrong arrival, wrong with no error; a candidate is only ever run on one stream, and
     the API builds such a kernel per thread and stream. The fused mode did not beat
     triton::mm on the suite's decode shapes (bench/README.md, "Kernel speed").
The workspace (and the counters) are allocated on the first run and kept by the kernel (it
is at most SPLIT_K·M·N·4 bytes; the heuristic keeps that small): the kernel holds state that
every call writes, so two threads or streams must not share one (`keeps_buffers`). Strides
are runtime arguments, so one kernel serves every layout; C may have any strides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..problem import GemmProblem
from .base import Operands
from .launch import Launcher
from .params import Bool, Int
from .registry import register_template
from .kernel_files import load_kernels
from .triton_base import (TILE_KEYS, TILE_SCHEMA, ZERO_ONE, Step, TritonKernel, TritonTemplate, bias_arguments,
                          jinja_template, output_tiles, plain_numbers)

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
    # The workspace and the arrival counters are written by every call: one kernel per
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

    def build(self, problem: GemmProblem, params: dict[str, Any], kernel_dir: str) -> SplitKKernel:
        source = self.source_for_build(problem, params)
        fused = bool(params["FUSED_REDUCE"])
        if fused:  # one kernel: the last slice of each tile reduces
            (partial,), reduce = load_kernels(source, kernel_dir, count=1), None
        else:
            partial, reduce = load_kernels(source, kernel_dir, count=2)
        m, n, k = problem.m, problem.n, problem.k
        bias_strides_n = problem.op == "addmm" and problem.bias == "n"

        def arguments(ops: Operands, ws, counters) -> tuple[tuple, tuple]:
            a, b, c = ops.a, ops.b, ops.out
            bias, bias_args = bias_arguments(ops, bias_strides_n)
            if fused:
                first = (a, b, ws, c, bias, counters, m, n, k, *a.stride(), *b.stride(),
                         *c.stride(), *bias_args)
                return first, ()
            first = (a, b, ws, m, n, k, *a.stride(), *b.stride())
            second = (ws, c, bias, m, n, *c.stride(), *bias_args)
            return first, second

        tiles = output_tiles(problem, params)
        return SplitKKernel(partial, reduce, params, (tiles, params["SPLIT_K"]), problem,
                            planes=1 if params["ATOMIC_ADD"] else params["SPLIT_K"], counters=tiles if fused else 0,
                            arguments=arguments, zero_first=bool(params["ATOMIC_ADD"]))


def check_workspace(planes: int, m: int, n: int) -> None:
    """ValueError for a [planes, m, n] workspace past the kernels' 32-bit offsets."""
    if planes * m * n > MAX_WORKSPACE_ELEMENTS:
        raise ValueError(f"a {planes}x{m}x{n} workspace is too large for 32-bit offsets")


class SplitKKernel(TritonKernel):
    """Slices of K summed through a float32 [planes, M, N] workspace that the kernel keeps
    per device (`workspaces`, made at the device's first call): the `partial` kernel (grid
    (tiles or column blocks, slices)) writes each slice's plane, then the `reduce` kernel
    sums the planes in slice order, adds the bias and rounds (`reduce_grid`: one program
    per REDUCE_BLOCK outputs); or, with no `reduce` (fused), the last slice of each tile to
    arrive on its int32 counter (`counters` of them, zeroed once, left at zero by every
    call) does. `arguments(ops, workspace, counters)` gives the two launches' arguments
    (the second () when fused). `zero_first`: the workspace is zeroed before every call
    (atomic adds into one plane).

    The bound launch takes the arguments in their usual order, the tensors first: fused
    (a, b, workspace, out, bias, counters, numbers...), else (a, b, workspace, numbers...)
    and (workspace, out, bias, numbers...); a kernel whose arguments are otherwise (scales
    among them) is called with an Operands per call."""

    def __init__(self, partial, reduce, params: dict[str, Any], grid: tuple, problem: GemmProblem, *,
                 planes: int, counters: int, arguments: Callable, zero_first: bool = False) -> None:
        m, n = problem.m, problem.n
        check_workspace(planes, m, n)
        pdl = bool(params.get("PDL"))
        self.launcher = Launcher(partial, params["num_warps"], params["num_stages"], pdl)
        self.reduce = Launcher(reduce, REDUCE_WARPS, 1, pdl) if reduce is not None else None
        self.grid = grid
        self.reduce_grid = (-(-(m * n) // REDUCE_BLOCK),)
        self.shape, self.counters = (planes, m, n), counters
        self.arguments = arguments
        self.zero_first = zero_first
        self.workspaces: dict[Any, tuple] = {}

    def workspace(self, device) -> tuple:
        """(workspace, arrival counters or None) for `device`, made on its first call."""
        kept = self.workspaces.get(device)
        if kept is None:
            import torch

            ws = torch.empty(self.shape, dtype=torch.float32, device=device)
            counters = torch.zeros((self.counters,), dtype=torch.int32, device=device) if self.counters else None
            kept = self.workspaces[device] = (ws, counters)
        return kept

    def steps(self, ops: Operands) -> tuple[Step, ...]:
        first, second = self.arguments(ops, *self.workspace(ops.out.device))
        if self.reduce is None:
            return ((self.launcher, self.grid, first),)
        return (self.launcher, self.grid, first), (self.reduce, self.reduce_grid, second)

    def before_launch(self, ops: Operands) -> None:
        if self.zero_first:
            self.workspace(ops.out.device)[0].zero_()

    def bind(self, sample: Operands, reuse_b: bool = False):
        """The call for operands laid out as `sample` (see base.bound): the arguments after
        the tensors worked out once, each launch bound (the workspace and counters are the
        kernel's own, fixed per device). Decode GEMMs take a few microseconds on the GPU: an
        unbound launch costs more than the kernel."""
        ws, counters = self.workspace(sample.out.device)
        first, second = self.arguments(sample, ws, counters)
        a, b, out = sample.a, sample.b, sample.out
        no_bias = sample.bias is None
        bias = out if no_bias else sample.bias
        if self.reduce is None:
            if not (_same(first[:6], (a, b, ws, out, bias, counters)) and plain_numbers(first[6:])):
                return None
            go = self.launcher.bind(self.grid, first[6:], trusted=(2, 3, 5))
            if no_bias:
                return lambda a, b, out, bias: go(a, b, ws, out, out, counters)
            return lambda a, b, out, bias: go(a, b, ws, out, bias, counters)
        if not (_same(first[:3], (a, b, ws)) and _same(second[:3], (ws, out, bias))
                and plain_numbers(first[3:]) and plain_numbers(second[3:])):
            return None
        go_partial = self.launcher.bind(self.grid, first[3:], trusted=(2,))
        go_reduce = self.reduce.bind(self.reduce_grid, second[3:], trusted=(0, 1))
        if self.zero_first:
            zero = ws.zero_

            def go_zeroed(a, b, out, bias) -> None:
                zero()
                go_partial(a, b, ws)
                go_reduce(ws, out, out if no_bias else bias)

            return go_zeroed

        def go_split(a, b, out, bias) -> None:
            go_partial(a, b, ws)
            go_reduce(ws, out, out if no_bias else bias)

        return go_split


def _same(tensors: tuple, expected: tuple) -> bool:
    """Whether `tensors` are the `expected` objects, one for one."""
    return len(tensors) == len(expected) and all(t is e for t, e in zip(tensors, expected))


register_template(TritonSplitKTemplate())
