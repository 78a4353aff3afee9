"""lm_head (2048x50257x768 fp16): can the copy of B into its padded buffer hide under cuBLAS?

Our aten::mm_aligned copies all of B into the kept [768, 50264] buffer (templates/row_copy.py,
~47 us) and only then runs cuBLAS (~240 us). Here B's columns are cut into C chunks
(multiples of 256 columns, the last one whatever is left, its product running on to the
pitch 50264 so that every cuBLAS call has an n that is a multiple of 8); each chunk is
multiplied by torch.mm(a, bpad[:, cols], out=outpad[:, cols]): column slices of the padded
buffers, whose rows stay 50264 elements (16-byte multiples) apart, so cuBLAS takes them as
they lie (ATen's prepare_matrix_for_cublas borrows a matrix with stride(1) == 1 and
stride(0) >= size(1); it clones only other layouts; checked below with the profiler and the
allocator's peak). Variants, all in one process, every buffer, view, stream and event made
once, outside the timed call:

  ours               aten::mm_aligned as the tuner builds it (bench/common.lm_head_ours)
  inductor           the compiled torch.mm (its pad kernel, cuBLAS, a view)
  mm only x1 / xC    cuBLAS alone on the already padded B, whole or in C chunks: what chunking
                     costs cuBLAS, and the floor for any overlap
  serial xC          on one stream: copy chunk 0, its product, copy chunk 1, its product, ...
  side xC            copy chunk 0 and run its product on the current stream; chunks 1.. are
                     copied on a side stream (started once copy 0 is done, which follows all
                     earlier work of the current stream, the last call's products included),
                     an event each, which the product of that chunk waits for; the current
                     stream waits for the side stream at the end, so the timer's end event
                     covers everything
  side xC pP         the same with the side copies made by a persistent copy kernel of at
                     most P programs (row_copy's grid is one program per row and block, no
                     limit), so that the copy does not take every SM from cuBLAS
  ... graph          ours and side xC captured in a CUDA graph (both streams): without the
                     host's launch cost, which grows with C

Each is checked against the float64 product (autotune_cli.bench.verify.check, fp16
tolerances; outputs and the [:, :N] of the padded B NaN-filled first, so a chunk never
copied or never multiplied, or multiplied before its copy, shows) and against ours' output;
then timed by the tuner's timer (bench/common.POLICY) in six passes of alternating order
(median of the passes' medians); the copies alone are timed too; then torch.profiler's
kernel times for ours and the best chunked variant (bench/common.print_kernel_times).
Writes $OUT/lm_head_overlap.json.

PYTHONPATH=. python3 bench/lm_head_overlap.py [--skip-inductor] [--no-graphs] [--counts 2,4,8]
PYTHONPATH=. python3 bench/lm_head_overlap.py --cpu-check   (no GPU: the chunking on small
    float32 tensors with torch.mm and no-op streams, the copy kernels in Triton's interpreter)
PYTHONPATH=. python3 bench/lm_head_overlap.py --compile-check   (no GPU: the persistent copy
    kernel compiled for sm_90 by Triton's own ptxas)
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

if "--cpu-check" in sys.argv:  # before triton is imported: its kernels then run on the CPU
    os.environ.setdefault("TRITON_INTERPRET", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import triton  # noqa: E402  (does not import torch: fresh_compile_caches still comes first)
import triton.language as tl  # noqa: E402

from bench.common import LM_HEAD, fresh_compile_caches  # noqa: E402

M, N, K = LM_HEAD
PITCH = -(-N // 8) * 8  # 50264: rows 16 bytes apart in fp16, as aten::mm_aligned's buffers
CHUNK_ALIGN = 256  # every chunk but the last starts and ends on a multiple of 256 columns
CHUNK_COUNTS = (2, 3, 4, 6, 8)
PROGRAM_FRACTIONS = (8, 4, 2)  # side copies limited to SMs / 8, / 4, / 2 programs
# The persistent copy's tile: ROWS x BLOCK elements per step (16 KB of fp16), 8 warps.
TILE_ROWS, TILE_BLOCK, TILE_WARPS = 8, 1024, 8
COPY_NAMES = ("aten::clone", "aten::contiguous", "aten::copy_", "aten::empty_like")


# -- the chunks ------------------------------------------------------------------------------

def chunk_width(n: int, count: int, align: int = CHUNK_ALIGN) -> int:
    """The width of `count` chunks of n columns, rounded up to `align` (the last chunk takes
    what is left, so there may be fewer than `count` where n is small)."""
    return -(-(-(-n // count)) // align) * align


def chunk_bounds(n: int, pitch: int, width: int) -> list[tuple[int, int, int]]:
    """(start, copy_end, product_end) of each chunk: B's columns [start, copy_end) are copied,
    [start, product_end) multiplied; the last chunk's product runs on to the pitch (the
    padding's columns of B are zero, those of the output are its row padding), so every
    product's n is a multiple of the pitch's alignment, as ZERO_PAD=1 gives cuBLAS."""
    bounds = []
    for start in range(0, n, width):
        end = min(start + width, n)
        bounds.append((start, end, pitch if end == n else end))
    return bounds


@dataclass
class Streams:
    """What the overlapped product needs of CUDA streams, so the CPU check can pass no-ops:
    `current()` (read on every call: a graph capture changes it), the side stream, `enter`
    (a context that makes a stream current) and `event()` (a new event)."""

    current: Callable[[], Any]
    side: Any
    enter: Callable[[Any], Any]
    event: Callable[[], Any]


def cuda_streams(torch) -> Streams:
    return Streams(torch.cuda.current_stream, torch.cuda.Stream(), torch.cuda.stream, torch.cuda.Event)


class _NoOp:
    """A stream or event on the CPU: every method does nothing."""

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None


def no_streams() -> Streams:
    noop = _NoOp()
    return Streams(lambda: noop, noop, lambda stream: contextlib.nullcontext(), _NoOp)


class ChunkedProduct:
    """A @ B through the kept padded copy of B, chunk by chunk of B's columns. The views of
    each chunk (B's columns, the padded buffer's for the copy and for the product, the padded
    output's) are made here, once; `result` is the [M, N] view of the padded output."""

    def __init__(self, a, b, bpad, outpad, bounds: list[tuple[int, int, int]]) -> None:
        import torch

        self.mm = torch.mm
        self.a = a
        self.bounds = bounds
        self.chunks = [(b[:, start:copy_end], bpad[:, start:copy_end], bpad[:, start:end], outpad[:, start:end])
                       for start, copy_end, end in bounds]
        self.result = outpad[:, :b.shape[1]]

    def multiply_all(self):
        """The products alone (B already in the padded buffer)."""
        mm, a = self.mm, self.a
        for _, _, b_chunk, out_chunk in self.chunks:
            mm(a, b_chunk, out=out_chunk)
        return self.result

    def serial(self, copy) -> Callable[[], Any]:
        """One stream: copy a chunk, multiply it, the next."""
        mm, a, chunks, result = self.mm, self.a, self.chunks, self.result

        def run():
            for src, dst, b_chunk, out_chunk in chunks:
                copy(dst, src)
                mm(a, b_chunk, out=out_chunk)
            return result

        return run

    def overlapped(self, copy, side_copy, streams: Streams) -> Callable[[], Any]:
        """Chunk 0 copied and multiplied on the current stream; chunks 1.. copied on the side
        stream by `side_copy`, each product waiting for its chunk's event. The side stream
        starts once copy 0 is done (so after everything the current stream did before, the
        last call's products, which read the buffer it writes, included); each side copy is
        launched just before the product that waits for it, so the host, launching in
        chunk order, never holds a product back behind copies launched far ahead of need."""
        mm, a, result = self.mm, self.a, self.result
        (src0, dst0, b0, out0), rest = self.chunks[0], self.chunks[1:]
        side, enter = streams.side, streams.enter
        copied0 = streams.event()
        copied = [streams.event() for _ in rest]

        def run():
            current = streams.current()
            copy(dst0, src0)
            copied0.record(current)
            side.wait_event(copied0)
            mm(a, b0, out=out0)
            for (src, dst, b_chunk, out_chunk), event in zip(rest, copied):
                with enter(side):
                    side_copy(dst, src)
                    event.record(side)
                current.wait_event(event)
                mm(a, b_chunk, out=out_chunk)
            current.wait_stream(side)  # the end event follows the side stream's work too
            return result

        return run


# -- a copy with a bounded grid ----------------------------------------------------------------

@triton.jit
def _copy_tiles(src, dst, rows, cols, src_row, dst_row, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    """Persistent: program p copies tiles p, p + P, p + 2P, ... of ROWS rows x BLOCK columns
    (tiles numbered along the columns, row block by row block); masked at the true rows and
    columns, so padding beyond them is never written. Rows contiguous in both tensors."""
    col_blocks = tl.cdiv(cols, BLOCK)
    tiles = tl.cdiv(rows, ROWS) * col_blocks
    for tile in range(tl.program_id(0), tiles, tl.num_programs(0)):
        row = (tile // col_blocks) * ROWS + tl.arange(0, ROWS)
        col = (tile % col_blocks) * BLOCK + tl.arange(0, BLOCK)
        mask = (row < rows)[:, None] & (col < cols)[None, :]
        row = row.to(tl.int64)[:, None]
        col = col.to(tl.int64)[None, :]
        values = tl.load(src + row * src_row + col, mask=mask)
        tl.store(dst + row * dst_row + col, values, mask=mask)


def copy_rows_limited(dst, src, programs: int | None = None, rows_per_tile: int = TILE_ROWS,
                      block: int = TILE_BLOCK, num_warps: int = TILE_WARPS) -> None:
    """dst[...] = src for 2-D tensors of one shape and dtype whose rows are contiguous, by at
    most `programs` programs (None: one per tile)."""
    if dst.shape != src.shape or dst.dim() != 2 or dst.stride(1) != 1 or src.stride(1) != 1:
        raise ValueError(f"copy_rows_limited: shapes {tuple(dst.shape)}, {tuple(src.shape)} with "
                         f"strides {dst.stride()}, {src.stride()}: equal 2-D shapes, contiguous rows")
    rows, cols = dst.shape
    if rows == 0 or cols == 0:
        return
    tiles = triton.cdiv(rows, rows_per_tile) * triton.cdiv(cols, block)
    grid = (tiles if programs is None else max(1, min(programs, tiles)),)
    _copy_tiles[grid](src, dst, rows, cols, src.stride(0), dst.stride(0),
                      ROWS=rows_per_tile, BLOCK=block, num_warps=num_warps)


def hidden_copies(torch, fn) -> list[str]:
    """The copying aten ops (clone, contiguous, copy_, empty_like) that one call of `fn`
    dispatches, by torch.profiler's CPU activity: ATen's mm clones an operand or output whose
    layout cuBLAS (or the CPU BLAS) cannot take, and copies the result back."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return sorted({event.key for event in prof.key_averages() if event.key in COPY_NAMES})


# -- the CPU check -----------------------------------------------------------------------------

def cpu_check() -> bool:
    """The chunking on CPU: 64x48 @ 48x1001 float32 into a pitch of 1008, chunks of 256
    (and what 2, 3 and 8 chunks give), serial and overlapped (streams no-ops), the copies by
    torch's copy_ and by the Triton kernels (row_copy, the persistent copy) in the
    interpreter; against a plain torch.mm."""
    import torch

    from autotune_cli.templates.row_copy import copy_rows

    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    torch.manual_seed(0)
    m, n, k, pitch = 64, 1001, 48, 1008
    a, b = torch.randn(m, k), torch.randn(k, n)
    expected = torch.mm(a, b)
    bpad = torch.zeros(k, pitch)
    outpad = torch.empty(m, pitch)
    ok = True

    def report(label: str, good: bool, detail: str = "") -> None:
        nonlocal ok
        ok &= good
        print(f"  {'ok  ' if good else 'FAIL'} {label}{': ' + detail if detail else ''}")

    print(f"A {m}x{k} @ B {k}x{n} float32, pitch {pitch}, chunks aligned to {CHUNK_ALIGN}; "
          f"Triton {'interpreted' if interpreted else 'NOT interpreted (copy kernels skipped)'}")
    torch_copy = lambda dst, src: dst.copy_(src)  # noqa: E731
    copies = {"copy_": (torch_copy, torch_copy)}
    if interpreted:
        copies["triton"] = (copy_rows, partial(copy_rows_limited, programs=3, rows_per_tile=32, block=128))
    widths = {f"{count} chunks asked": chunk_width(n, count) for count in (2, 3, 4, 8)}
    widths["chunks of 128 (8, the last partial)"] = 128
    widths["width 1001 (one chunk)"] = n
    for label, width in widths.items():
        bounds = chunk_bounds(n, pitch, width)
        print(f"{label}: width {width}, bounds (start, copy end, product end) {bounds}")
        plan = ChunkedProduct(a, b, bpad, outpad, bounds)
        runs = {}
        for copy_name, (copy, side_copy) in copies.items():
            runs[f"serial, {copy_name}"] = plan.serial(copy)
            runs[f"overlapped, {copy_name}"] = plan.overlapped(copy, side_copy, no_streams())
        for run_name, run in runs.items():
            outpad.fill_(float("nan"))
            bpad[:, :n].fill_(float("nan"))
            got = run()
            error = (got - expected).abs().max().item()
            views = (got.data_ptr() == outpad.data_ptr() and got.stride() == (pitch, 1)
                     and tuple(got.shape) == (m, n))
            padding = bool((bpad[:, n:] == 0).all()) and bool((outpad[:, n:] == 0).all())
            report(run_name, torch.allclose(got, expected, rtol=1e-5, atol=1e-4) and views and padding,
                   f"max |diff| {error:.2e}, result a view of the padded output {views}, "
                   f"padding columns of B and out zero {padding}")
    plan = ChunkedProduct(a, b, bpad, outpad, chunk_bounds(n, pitch, 256))
    found = hidden_copies(torch, plan.multiply_all)
    report("torch.mm(out=column slice) dispatches no copy", not found, f"copying ops {found or 'none'}")
    strided = torch.empty(m, 2 * n)[:, ::2]  # a layout BLAS cannot take: mm must copy
    found = hidden_copies(torch, lambda: torch.mm(a, b, out=strided))
    report("control: torch.mm(out=every other column) is seen copying", bool(found), f"copying ops {found}")
    if interpreted:
        for programs in (1, 3, 7, None):
            dst = torch.zeros(k, pitch, dtype=torch.float16)
            src = torch.randn(k, n).half()
            copy_rows_limited(dst[:, :n], src, programs=programs, rows_per_tile=32, block=128)
            report(f"persistent copy, {programs or 'one per tile'} program(s), 32x128 tiles, fp16",
                   torch.equal(dst[:, :n], src) and bool((dst[:, n:] == 0).all()))
        dst = torch.zeros(k, pitch, dtype=torch.float16)
        copy_rows_limited(dst[:, :n], src, programs=5)  # the GPU's tile, 8x1024
        report("persistent copy, 5 programs, the GPU's 8x1024 tiles, fp16",
               torch.equal(dst[:, :n], src) and bool((dst[:, n:] == 0).all()))
    print("CPU check:", "all ok" if ok else "FAILED")
    return ok


def compile_check() -> bool:
    """The persistent copy kernel compiled for sm_90 (no GPU needed: Triton's own ptxas)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {"src": "*fp16", "dst": "*fp16", "rows": "i32", "cols": "i32", "src_row": "i32",
                 "dst_row": "i32", "ROWS": "constexpr", "BLOCK": "constexpr"}
    source = ASTSource(fn=_copy_tiles, signature=signature, constexprs={"ROWS": TILE_ROWS, "BLOCK": TILE_BLOCK})
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": TILE_WARPS})
    print(f"_copy_tiles for sm_90: {len(kernel.asm['cubin'])} bytes of cubin, "
          f"{kernel.metadata.shared} bytes of shared memory, registers "
          f"{getattr(kernel, 'n_regs', 'unknown (read at load)')}")
    return True


# -- the GPU run -------------------------------------------------------------------------------

def main_gpu(args) -> None:
    scratch = fresh_compile_caches("lm-head-overlap-")
    import torch
    import torch._inductor.config as config

    from autotune_cli.bench.timing import CudaTimer
    from autotune_cli.bench.verify import check
    from autotune_cli.fingerprint import probe_device
    from autotune_cli.problem import make_problem
    from autotune_cli.templates.row_copy import copy_rows
    from bench.common import POLICY, lm_head_ours, print_kernel_times, write_json

    began = time.perf_counter()

    def stage(text: str) -> None:
        print(f"[{time.perf_counter() - began:6.1f} s] {text}", flush=True)

    config.force_disable_caches = True
    timer = CudaTimer(probe_device("cuda").l2_bytes)
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    limits = sorted({max(1, sms // fraction) for fraction in PROGRAM_FRACTIONS})
    a, b, ops, ours = lm_head_ours(scratch)
    bpad = torch.zeros(K, PITCH, device="cuda", dtype=torch.float16)  # its padding stays zero
    outpad = torch.empty(M, PITCH, device="cuda", dtype=torch.float16)
    streams = cuda_streams(torch)
    stage(f"{props.name}, {sms} SMs; side copies limited to {limits} programs")

    def run_ours():
        ours(ops)
        return ops.out

    cases: dict[str, Callable[[], Any]] = {"ours": run_ours}
    if not args.skip_inductor:
        compiled = torch.compile(lambda x, y: torch.mm(x, y), mode="max-autotune-no-cudagraphs", dynamic=False)
        compiled(a, b)
        cases["inductor"] = lambda: compiled(a, b)
        stage("inductor compiled")
    whole = ChunkedProduct(a, b, bpad, outpad, chunk_bounds(N, PITCH, N))
    copy_rows(bpad[:, :N], b)
    cases["mm only x1"] = whole.multiply_all
    plans: dict[str, ChunkedProduct] = {}
    counts = [int(c) for c in args.counts.split(",")]
    for count in counts:
        plan = ChunkedProduct(a, b, bpad, outpad, chunk_bounds(N, PITCH, chunk_width(N, count)))
        if len(plan.bounds) != count:
            raise RuntimeError(f"{count} chunks asked, {len(plan.bounds)} made: {plan.bounds}")
        plans[f"x{count}"] = plan
        cases[f"mm only x{count}"] = plan.multiply_all
        cases[f"serial x{count}"] = plan.serial(copy_rows)
        cases[f"side x{count}"] = plan.overlapped(copy_rows, copy_rows, streams)
        for programs in limits:
            cases[f"side x{count} p{programs}"] = plan.overlapped(
                copy_rows, partial(copy_rows_limited, programs=programs), streams)

    # No copy hidden in mm: the copying ops dispatched, and the allocator's peak over a call.
    most = f"x{max(counts)}"
    found = hidden_copies(torch, plans[most].multiply_all)
    extra = {}
    for name in (f"serial {most}", f"side {most}", f"side {most} p{limits[0]}", f"mm only {most}"):
        cases[name]()
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        cases[name]()
        torch.cuda.synchronize()
        extra[name] = torch.cuda.max_memory_allocated() - before
    stage(f"torch.mm(out=column slice of the padded output): copying aten ops {found or 'none'}; "
          f"bytes allocated during one call {extra}")

    if not args.no_graphs:
        for name in ["ours"] + [f"side x{count}" for count in counts]:
            fn = cases[name]
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # compiled and warm before the capture
                for _ in range(3):
                    fn()
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                result = fn()

            def replay(graph=graph, result=result):
                graph.replay()
                return result

            cases[f"{name} graph"] = replay
        stage("graphs captured")

    # Verify: outputs and the padded B's [:, :N] NaN first, so any chunk left out shows.
    problem = make_problem(m=M, n=N, k=K, dtype="float16", device="cuda")
    reference = a.double() @ b.double()
    ours_out = None
    verdicts = {}
    for name, fn in cases.items():
        ops.out.fill_(float("nan"))
        outpad.fill_(float("nan"))
        bpad[:, :N].fill_(float("nan"))
        if name.startswith("mm only"):
            copy_rows(bpad[:, :N], b)
        got = fn()
        torch.cuda.synchronize()
        verdict = check(problem, got, reference)
        if ours_out is None:
            ours_out = got.clone()
        off_ours = (got.float() - ours_out.float()).abs().max().item()
        verdicts[name] = {"ok": verdict.ok, "rel_error": verdict.rel_error, "reason": verdict.reason,
                          "max_abs_diff_to_ours": off_ours}
        print(f"  {name:22s} {'ok' if verdict.ok else 'FAIL ' + verdict.reason}  relative error "
              f"{verdict.rel_error:.2e}  max |diff| to ours {off_ours:.3g}", flush=True)
    del reference
    bad = [name for name, v in verdicts.items() if not v["ok"]]
    if bad:
        print(f"not timed, failed the check: {bad}")
    stage("verified")

    # The copies alone: full B, row_copy's grid and the persistent copy's.
    copy_cases = {"row_copy (one program per row and block)": lambda: copy_rows(bpad[:, :N], b),
                  "persistent copy, one program per tile": lambda: copy_rows_limited(bpad[:, :N], b)}
    for programs in limits:
        copy_cases[f"persistent copy, {programs} programs"] = partial(copy_rows_limited, bpad[:, :N], b, programs)
    copy_ms = {}
    for name, fn in copy_cases.items():
        bpad[:, :N].fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        if not torch.equal(bpad[:, :N], b) or not bool((bpad[:, N:] == 0).all()):
            raise RuntimeError(f"{name}: copy wrong")
        copy_ms[name] = statistics.median(timer(fn, POLICY).median_ms for _ in range(3))
    copy_rows(bpad[:, :N], b)  # B in place for "mm only"
    moved = 2 * K * N * 2  # read and written, fp16
    for name, ms in copy_ms.items():
        print(f"  copy alone: {name:42s} {ms:.4f} ms  {moved / ms / 1e9:7.0f} GB/s", flush=True)
    stage("copies timed")

    names = [name for name in cases if name not in bad]
    samples = {name: [] for name in names}
    for index in range(args.passes):
        for name in names if index % 2 == 0 else names[::-1]:
            samples[name].append(timer(cases[name], POLICY).median_ms)
    stage(f"timed: {args.passes} passes of {len(names)} variants")
    ms = {name: statistics.median(samples[name]) for name in names}
    base_inductor, base_ours = ms.get("inductor", math.nan), ms.get("ours", math.nan)
    print(f"{'variant':24s} {'ms':>8s} {'/ inductor':>10s} {'/ ours':>8s}   passes")
    for name in names:
        print(f"{name:24s} {ms[name]:8.4f} {ms[name] / base_inductor:10.3f} {ms[name] / base_ours:8.3f}   "
              f"{', '.join(f'{s:.4f}' for s in samples[name])}", flush=True)
    chunked = [name for name in names if name.startswith(("serial", "side")) and not name.endswith("graph")]
    best = min(chunked, key=ms.get) if chunked else None
    graphed = [name for name in names if name.startswith("side") and name.endswith("graph")]
    best_graph = min(graphed, key=ms.get) if graphed else None
    print(f"best chunked (eager): {best} {ms.get(best, math.nan):.4f} ms; best chunked graph: "
          f"{best_graph} {ms.get(best_graph, math.nan):.4f} ms (ours graph {ms.get('ours graph', math.nan):.4f})")
    for name in ["ours"] + ([best] if best else []):
        print(f"== kernels of {name}")
        print_kernel_times(cases[name], timer)
    stage("done")

    path = write_json("lm_head_overlap.json", {
        "device": props.name, "sms": sms, "shape": [M, N, K], "pitch": PITCH, "chunk_align": CHUNK_ALIGN,
        "program_limits": limits, "tile": [TILE_ROWS, TILE_BLOCK, TILE_WARPS],
        "bounds": {key: plan.bounds for key, plan in plans.items()},
        "hidden_copy_ops": found, "bytes_allocated_per_call": extra,
        "verdicts": verdicts, "copy_alone_ms": copy_ms,
        "ms": ms, "passes": samples, "best_chunked": best, "best_chunked_graph": best_graph,
        "wall_s": time.perf_counter() - began,
    })
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-check", action="store_true", help="the chunking on CPU, no GPU")
    parser.add_argument("--compile-check", action="store_true", help="the copy kernel compiled for sm_90, no GPU")
    parser.add_argument("--skip-inductor", action="store_true", help="no torch.compile (saves its autotuning)")
    parser.add_argument("--no-graphs", action="store_true", help="no CUDA-graph variants")
    parser.add_argument("--passes", type=int, default=6)
    parser.add_argument("--counts", default=",".join(map(str, CHUNK_COUNTS)), help="chunk counts, e.g. 2,4,8")
    args = parser.parse_args()
    if args.cpu_check:
        sys.exit(0 if cpu_check() else 1)
    if args.compile_check:
        sys.exit(0 if compile_check() else 1)
    main_gpu(args)


if __name__ == "__main__":
    main()
