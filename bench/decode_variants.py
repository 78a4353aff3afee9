"""Decode GEMMs (M <= 16) with kernels shaped for them: issue 7 asks for 1.5x of the HBM floor.

For each decode shape (bf16; A: MxK, B: KxN, C: MxN, all row-major) these run side by side
in one process, timed by the tuner's timer and policy (bench/common.py, as
bench/decode_roofline.py times them):
  - torch.mm (cuBLAS), the anchor;
  - triton::mm at decode_roofline.py's WINNER config, through the template;
  - swap-AB: C^T = B^T A^T, so that the long dimension N fills the MMA's M slot (Hopper's
    wgmma wants M >= 64 per warpgroup; M = 16 there leaves the tensor cores mostly idle).
    Program n owns BLOCK_N columns of C: it reads B's tile as a [BLOCK_N, BLOCK_K] tensor (a
    transposed view by strides, no copy) and A's as [BLOCK_K, 16] (rows past M masked to
    zero), accumulates acc[BLOCK_N, 16] = tl.dot(bT, aT, acc) and stores acc transposed;
  - split-K with the reduction in the same launch: grid (N / BLOCK_N, SPLIT); program (n, s)
    multiplies its columns over K / SPLIT (a multiple of BLOCK_K) with the swap-AB dot
    ("split-K/swap") or a plain [16, BK] x [BK, BN] dot ("split-K/plain"), writes its float32
    partial tile to a workspace [SPLIT, 16, N] and counts itself in on the tile's int32
    counter (one acq_rel atomic, after a barrier). The program that reads SPLIT-1 is the
    last: it sums the SPLIT partials in split order (from L2), writes C and sets the counter
    back to 0, so the next call needs no memset. Workspace and counters are allocated once
    per shape and config, outside the timed call, the counters zeroed once.

Every variant is run twice and checked against a float32 reference (torch.mm of the inputs
in float32) with the repo's tolerances (autotune_cli/bench/verify.check) before it is timed;
one that fails or is wrong is printed as such and not timed. The twice is for split-K: the
second call only comes out right if the first left its counters at 0. After timing, each
split-K best is also called STRESS_CALLS times with every output checked: which program of
a tile arrives last differs from call to call, so a release/acquire mistake would show as
sporadic wrong outputs there.

Config sweeps (per shape; --max-configs caps split-K):
  swap-AB: BLOCK_N {64, 128} x BLOCK_K {64, 128, 256} x stages {3, 4, 5, 6} x warps {4, 8},
    leaving out configs whose pipelined tiles, stages * (BLOCK_N + 16) * BLOCK_K * 2 bytes,
    exceed 220 KiB: 40 configs.
  split-K: SPLIT {2, 4, 8, 16} x BLOCK_N {32, 64, 128} x BLOCK_K {128, 256} x stages
    {3, 4, 5} x warps {2, 4} x dot {swap, plain}, pruned: K must be a multiple of
    SPLIT * BLOCK_K; 264 to 4224 programs (2 to 32 per SM of 132); stages 4 and 5 only where
    the K loop has that many steps; the swap dot at 4 warps only (one warpgroup, which wgmma
    needs); the same shared-memory limit. Of what is left, every (SPLIT, BLOCK_N, BLOCK_K,
    dot) at 3 stages and 4 warps comes first, then the other stages and warps nearest to
    1024-2112 programs (where decode_roofline.py's read of B alone was fastest), up to 40.
The kernels take M as an unspecialized argument, and N, K and the strides are multiples of
16 in all three shapes, so a config compiles once for every shape (115 distinct kernels
for the three shapes); before timing, --jobs spawned processes compile them into Triton's
cache through the same @triton.jit path (warmup), without CUDA where the tuner's
compile-only driver can be set up (autotune_cli/bench/offline_compile.py), and the timing
process then loads them from the cache.

Then per shape a table (name, config, programs, us, x floor, ratio to torch.mm; floor:
2 * (M*K + K*N + M*N) bytes / 4.3e12 B/s), the best of each family, those bests re-timed
twice more side by side (time_many's alternating order), and last a summary table.

PYTHONPATH=. python3 bench/decode_variants.py [--only 16x4096x4096] [--jobs 8] [--max-configs 40]
Writes $OUT/decode_variants.json (or bench_out/).

Without a GPU: TRITON_INTERPRET=1 python3 bench/decode_variants.py --interpret
runs each kernel family on a few small shapes and configs under Triton's interpreter (bf16
inputs upcast to float32 inside the kernels, as the templates' UPCAST does; one float32
shape) and checks them against torch.mm. The interpreter runs programs one after another,
so there the split-K counter always reaches SPLIT-1 at the last split: it checks the
arithmetic, the indexing and the counter's reset, not the ordering between programs.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

INTERPRET = "--interpret" in sys.argv
if INTERPRET:  # must be set before triton is imported (/work/shared/NOTES.md)
    os.environ["TRITON_INTERPRET"] = "1"

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from autotune_cli.bench.verify import check, make_operands  # noqa: E402
from autotune_cli.problem import make_problem  # noqa: E402
from autotune_cli.templates import get_template  # noqa: E402
from autotune_cli.templates.base import Operands  # noqa: E402
from bench.common import SideBySide, write_json  # noqa: E402
from bench.decode_roofline import HBM_BYTES_PER_S, SHAPES, WINNER  # noqa: E402

BLOCK_M = 16  # the one row tile: every decode M (<= 16) fits in it
SMEM_LIMIT = 220 * 1024  # bytes of pipelined tiles a config may ask for (H200 opt-in: 227 KiB)
PROGRAM_WINDOW = (264, 4224)  # split-K programs: 2 to 32 per SM of the H200's 132
PROGRAM_BAND = (1024, 2112)  # where the read of B alone was fastest (decode_roofline.py)
FAMILIES = ("torch.mm", "triton::mm", "swap-AB", "split-K/swap", "split-K/plain")
TARGET_X_FLOOR = 1.5
STRESS_CALLS = 300  # checked calls of each split-K best (the counters' ordering on a real GPU)


# ----------------------------------------------------------------------------- kernels

@triton.jit
def _swap_ab_tile(A, B, M, N, k_first, k_stop, offs_m, offs_n,
                  stride_am, stride_ak, stride_bk, stride_bn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  EVEN_N: tl.constexpr, EVEN_K: tl.constexpr, UPCAST: tl.constexpr):
    """acc[BLOCK_N, BLOCK_M] = B[k_first:k_stop, offs_n]^T @ A[offs_m, k_first:k_stop]^T:
    the columns of C in the dot's M slot, the rows of A (16) in its N slot."""
    offs_k = tl.arange(0, BLOCK_K)
    # B^T's tile [BLOCK_N, BLOCK_K] and A^T's [BLOCK_K, BLOCK_M], read through strides.
    bt_ptrs = B + offs_n[:, None] * stride_bn + (k_first + offs_k)[None, :] * stride_bk
    at_ptrs = A + (k_first + offs_k)[:, None] * stride_ak + offs_m[None, :] * stride_am
    m_ok = offs_m[None, :] < M
    n_ok = offs_n[:, None] < N
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for k in range(k_first, k_stop, BLOCK_K):
        if EVEN_K:
            at = tl.load(at_ptrs, mask=m_ok, other=0.0)
            if EVEN_N:
                bt = tl.load(bt_ptrs)
            else:
                bt = tl.load(bt_ptrs, mask=n_ok, other=0.0)
        else:
            k_ok = (k + offs_k) < k_stop
            at = tl.load(at_ptrs, mask=m_ok & k_ok[:, None], other=0.0)
            bt = tl.load(bt_ptrs, mask=n_ok & k_ok[None, :], other=0.0)
        if UPCAST:  # the interpreter multiplies half-precision dots wrongly: float32 there
            at = at.to(tl.float32)
            bt = bt.to(tl.float32)
        acc = tl.dot(bt, at, acc)
        at_ptrs += BLOCK_K * stride_ak
        bt_ptrs += BLOCK_K * stride_bk
    return acc


@triton.jit
def _plain_tile(A, B, M, N, k_first, k_stop, offs_m, offs_n,
                stride_am, stride_ak, stride_bk, stride_bn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                EVEN_N: tl.constexpr, EVEN_K: tl.constexpr, UPCAST: tl.constexpr):
    """acc[BLOCK_M, BLOCK_N] = A[offs_m, k_first:k_stop] @ B[k_first:k_stop, offs_n]."""
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = A + offs_m[:, None] * stride_am + (k_first + offs_k)[None, :] * stride_ak
    b_ptrs = B + (k_first + offs_k)[:, None] * stride_bk + offs_n[None, :] * stride_bn
    m_ok = offs_m[:, None] < M
    n_ok = offs_n[None, :] < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_first, k_stop, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=m_ok, other=0.0)
            if EVEN_N:
                b = tl.load(b_ptrs)
            else:
                b = tl.load(b_ptrs, mask=n_ok, other=0.0)
        else:
            k_ok = (k + offs_k) < k_stop
            a = tl.load(a_ptrs, mask=m_ok & k_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=n_ok & k_ok[:, None], other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    return acc


@triton.jit(do_not_specialize=["M"])
def swap_ab_mm(A, B, C, M, N, K,
               stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               EVEN_N: tl.constexpr, EVEN_K: tl.constexpr, UPCAST: tl.constexpr):
    """C = A @ B computed as C^T = B^T A^T; program n owns C[:, n*BLOCK_N:(n+1)*BLOCK_N]."""
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    acc = _swap_ab_tile(A, B, M, N, 0, K, offs_m, offs_n, stride_am, stride_ak, stride_bk, stride_bn,
                        BLOCK_M, BLOCK_N, BLOCK_K, EVEN_N, EVEN_K, UPCAST)
    # acc is C^T's tile: element (n, m) goes to C[m, n].
    c_ptrs = C + offs_m[None, :] * stride_cm + offs_n[:, None] * stride_cn
    tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=(offs_m[None, :] < M) & (offs_n[:, None] < N))


@triton.jit(do_not_specialize=["M"])
def split_k_mm(A, B, C, WS, COUNTERS, M, N, K, K_PER_SPLIT,
               stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               SPLIT: tl.constexpr, SWAP: tl.constexpr, EVEN_N: tl.constexpr, UPCAST: tl.constexpr):
    """Program (tile, split): columns tile*BLOCK_N.. over K[split*K_PER_SPLIT, +K_PER_SPLIT)
    into plane `split` of WS [SPLIT, BLOCK_M, N] (float32); the tile's last program to arrive
    on COUNTERS[tile] sums the planes in split order into C and resets the counter."""
    tile = tl.program_id(0)
    split = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    k_first = split * K_PER_SPLIT
    plane = WS + split * (BLOCK_M * N)
    if SWAP:
        acc = _swap_ab_tile(A, B, M, N, k_first, k_first + K_PER_SPLIT, offs_m, offs_n,
                            stride_am, stride_ak, stride_bk, stride_bn,
                            BLOCK_M, BLOCK_N, BLOCK_K, EVEN_N, True, UPCAST)
        tl.store(plane + offs_m[None, :] * N + offs_n[:, None], acc,
                 mask=(offs_m[None, :] < M) & (offs_n[:, None] < N))
    else:
        acc = _plain_tile(A, B, M, N, k_first, k_first + K_PER_SPLIT, offs_m, offs_n,
                          stride_am, stride_ak, stride_bk, stride_bn,
                          BLOCK_M, BLOCK_N, BLOCK_K, EVEN_N, True, UPCAST)
        tl.store(plane + offs_m[:, None] * N + offs_n[None, :], acc,
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
    # Release: every thread's plane stores are done (the barrier) before one thread's
    # gpu-scope acq_rel atomic publishes them; the barrier makes the other threads' stores
    # part of what that release orders (cumulativity), as a CUDA __syncthreads() before a
    # thread-0 atomic does.
    tl.debug_barrier()
    arrived = tl.atomic_add(COUNTERS + tile, 1, sem="acq_rel", scope="gpu")
    if arrived == SPLIT - 1:
        # Acquire: this program saw every other split's increment, and so (acq_rel) their
        # stores. The planes are read through L2 (.cg): this SM's L1 is not coherent with
        # the other SMs' stores. Summed in split order: the same bits whichever is last.
        out_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        tile_ptrs = WS + offs_m[:, None] * N + offs_n[None, :]
        total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for part in tl.static_range(SPLIT):
            total += tl.load(tile_ptrs + part * (BLOCK_M * N), mask=out_mask, other=0.0,
                             cache_modifier=".cg")
        c_ptrs = C + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
        tl.store(c_ptrs, total.to(C.dtype.element_ty), mask=out_mask)
        # Back to 0 for the next call: every program of this tile has already counted itself
        # in, and the next launch on the stream starts after this one ends, so relaxed is enough.
        tl.atomic_xchg(COUNTERS + tile, 0, sem="relaxed", scope="gpu")


# ----------------------------------------------------------------------------- runnables

def smem_bytes(block_n: int, block_k: int, stages: int, elem: int = 2) -> int:
    """Shared memory the pipelined B and A tiles take: stages * (BN + 16) * BK elements."""
    return stages * (block_n + BLOCK_M) * block_k * elem


def label(family: str, cfg: dict) -> str:
    if family == "torch.mm":
        return "cuBLAS"
    if family == "triton::mm":
        return "BM{BLOCK_M} BN{BLOCK_N} BK{BLOCK_K} s{num_stages} w{num_warps}".format(**cfg)
    text = "BN{BLOCK_N} BK{BLOCK_K} s{num_stages} w{num_warps}".format(**cfg)
    return f"S{cfg['SPLIT']} {text}" if "SPLIT" in cfg else text


def programs_of(family: str, cfg: dict, n: int) -> int | None:
    if family in ("swap-AB", "triton::mm"):
        return triton.cdiv(n, cfg["BLOCK_N"])  # (M <= BLOCK_M: one row of tiles)
    if family.startswith("split-K"):
        return triton.cdiv(n, cfg["BLOCK_N"]) * cfg["SPLIT"]
    return None


def swap_ab_runnable(cfg: dict, m: int, n: int, k: int, upcast: bool = False):
    """run(ops) for swap_ab_mm at `cfg`, with `run.warmup(ops)` (compile, no launch)."""
    if m > BLOCK_M:
        raise ValueError(f"swap-AB takes M <= {BLOCK_M}, got {m}")
    bn, bk = cfg["BLOCK_N"], cfg["BLOCK_K"]
    grid = (triton.cdiv(n, bn),)
    consts = dict(BLOCK_M=BLOCK_M, BLOCK_N=bn, BLOCK_K=bk, EVEN_N=n % bn == 0, EVEN_K=k % bk == 0,
                  UPCAST=upcast, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])

    def arguments(ops):
        a, b, c = ops.a, ops.b, ops.out
        return (a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride())

    def run(ops):
        swap_ab_mm[grid](*arguments(ops), **consts)

    def warmup(ops):
        if not hasattr(swap_ab_mm, "warmup"):
            return None
        return swap_ab_mm.warmup(*arguments(ops), grid=grid, **consts)

    run.warmup = warmup
    return run


def split_k_runnable(cfg: dict, m: int, n: int, k: int, device: str, upcast: bool = False):
    """run(ops) for split_k_mm at `cfg` (cfg["DOT"]: "swap" or "plain"), owning its
    workspace [SPLIT, 16, N] float32 and per-tile counters (int32, zeroed here once); the
    kernel leaves the counters at 0. `run.buffers` is (workspace, counters)."""
    if m > BLOCK_M:
        raise ValueError(f"split-K takes M <= {BLOCK_M}, got {m}")
    split, bn, bk = cfg["SPLIT"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    if k % (split * bk):
        raise ValueError(f"K={k} is not a multiple of SPLIT*BLOCK_K={split * bk}")
    tiles = triton.cdiv(n, bn)
    workspace = torch.empty((split, BLOCK_M, n), dtype=torch.float32, device=device)
    counters = torch.zeros((tiles,), dtype=torch.int32, device=device)
    grid = (tiles, split)
    consts = dict(BLOCK_M=BLOCK_M, BLOCK_N=bn, BLOCK_K=bk, SPLIT=split, SWAP=cfg["DOT"] == "swap",
                  EVEN_N=n % bn == 0, UPCAST=upcast,
                  num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])

    def arguments(ops):
        a, b, c = ops.a, ops.b, ops.out
        return (a, b, c, workspace, counters, m, n, k, k // split,
                *a.stride(), *b.stride(), *c.stride())

    def run(ops):
        split_k_mm[grid](*arguments(ops), **consts)

    def warmup(ops):
        if not hasattr(split_k_mm, "warmup"):
            return None
        return split_k_mm.warmup(*arguments(ops), grid=grid, **consts)

    run.warmup = warmup
    run.buffers = (workspace, counters)
    return run


def build_variant(family: str, cfg: dict, m: int, n: int, k: int, device: str, upcast: bool = False):
    if family == "swap-AB":
        return swap_ab_runnable(cfg, m, n, k, upcast)
    if family.startswith("split-K"):
        return split_k_runnable(cfg, m, n, k, device, upcast)
    raise ValueError(family)


# ----------------------------------------------------------------------------- configs

def swap_ab_configs() -> list[dict]:
    return [{"BLOCK_N": bn, "BLOCK_K": bk, "num_stages": stages, "num_warps": warps}
            for bn in (64, 128) for bk in (64, 128, 256) for stages in (3, 4, 5, 6) for warps in (4, 8)
            if smem_bytes(bn, bk, stages) <= SMEM_LIMIT]


def _band_distance(programs: int) -> float:
    low, high = PROGRAM_BAND
    if programs < low:
        return math.log2(low / programs)
    if programs > high:
        return math.log2(programs / high)
    return 0.0


def split_k_configs(n: int, k: int, cap: int) -> tuple[list[dict], int]:
    """(the configs kept, how many the rules left before the cap): see the module's text."""
    found = []
    for split in (2, 4, 8, 16):
        for bn in (32, 64, 128):
            for bk in (128, 256):
                if k % (split * bk):
                    continue
                steps = k // (split * bk)
                programs = triton.cdiv(n, bn) * split
                if not PROGRAM_WINDOW[0] <= programs <= PROGRAM_WINDOW[1]:
                    continue
                for stages in (3, 4, 5):
                    if stages != 3 and stages > steps:
                        continue
                    if smem_bytes(bn, bk, stages) > SMEM_LIMIT:
                        continue
                    for dot in ("swap", "plain"):
                        for warps in ((4,) if dot == "swap" else (2, 4)):
                            found.append({"SPLIT": split, "BLOCK_N": bn, "BLOCK_K": bk,
                                          "num_stages": stages, "num_warps": warps, "DOT": dot})

    def priority(cfg):
        first_tier = cfg["num_stages"] == 3 and cfg["num_warps"] == 4
        programs = triton.cdiv(n, cfg["BLOCK_N"]) * cfg["SPLIT"]
        return (0 if first_tier else 1, round(_band_distance(programs), 3), cfg["num_stages"], cfg["num_warps"])

    found.sort(key=priority)  # stable: ties keep the loops' order
    return found[:cap], len(found)


def plan(m: int, n: int, k: int, cap: int) -> tuple[list[tuple[str, dict]], str]:
    """The (family, config) pairs to build for a shape, and a line saying how they were cut."""
    pairs = [("swap-AB", cfg) for cfg in swap_ab_configs()]
    swap_count = len(pairs)
    split_kept, split_found = split_k_configs(n, k, cap)
    pairs += [(f"split-K/{cfg['DOT']}", cfg) for cfg in split_kept]
    note = (f"swap-AB {swap_count} configs; split-K {len(split_kept)} of the {split_found} "
            f"the rules leave (cap {cap})")
    return pairs, note


# ----------------------------------------------------------------------------- precompile

_OPERAND_DEVICE = "cuda"  # in a compile process: "meta" once Triton compiles there without CUDA


def _init_compiler(device) -> None:
    """A compile process: compile for `device` (the parent's probe) without bringing CUDA up,
    through the tuner's own compile-only driver (autotune_cli/bench/offline_compile.py), on
    meta operands; where that cannot be set up, with CUDA and real (empty) operands."""
    global _OPERAND_DEVICE
    from autotune_cli.bench import offline_compile

    if offline_compile.install(device) is None:
        _OPERAND_DEVICE = offline_compile.OPERAND_DEVICE


def _compile_one(task):
    """In a compile process: compile one (family, config) for a shape through the same
    @triton.jit launch path (warmup) the timing process launches through, into Triton's cache."""
    family, cfg, (m, n, k) = task
    started = time.perf_counter()
    try:
        bf16, device = torch.bfloat16, _OPERAND_DEVICE
        ops = Operands(a=torch.empty((m, k), dtype=bf16, device=device),
                       b=torch.empty((k, n), dtype=bf16, device=device),
                       out=torch.empty((m, n), dtype=bf16, device=device))
        build_variant(family, cfg, m, n, k, device).warmup(ops)
        return time.perf_counter() - started, None
    except Exception as exc:  # noqa: BLE001 - reported; the timing process meets it again
        text = str(exc).splitlines()[0][:120] if str(exc) else ""
        return time.perf_counter() - started, f"{type(exc).__name__}: {text}"


def binary_key(family: str, cfg: dict, m: int, n: int, k: int) -> tuple:
    """What decides the binary: the config and what Triton specializes on (M is not
    specialized; N, K, K/SPLIT and the strides N, K by multiples of 16 and by 1)."""
    ints = (n, k) + ((k // cfg["SPLIT"],) if "SPLIT" in cfg else ())
    return (family, tuple(sorted(cfg.items())), n % cfg["BLOCK_N"] == 0, k % cfg["BLOCK_K"] == 0,
            tuple(v % 16 == 0 for v in ints), tuple(v == 1 for v in ints))


def precompile(plans: dict, jobs: int, device) -> float:
    """Compile every distinct binary the plans need with `jobs` spawned processes, for
    `device` (probe_device's DeviceInfo); returns the wall time. A failed pool, or a binary
    the timing process does not find in the cache, only costs time: it compiles what it lacks."""
    tasks, seen = [], set()
    for (m, n, k), pairs in plans.items():
        for family, cfg in pairs:
            key = binary_key(family, cfg, m, n, k)
            if key not in seen:
                seen.add(key)
                tasks.append((family, cfg, (m, n, k)))
    started = time.perf_counter()
    if jobs <= 1 or not tasks:
        print(f"precompile: off (--jobs {jobs}); {len(tasks)} kernels compile in the timing process", flush=True)
        return 0.0
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    try:
        with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_init_compiler, initargs=(device,)) as pool:
            results = list(pool.map(_compile_one, tasks, chunksize=1))
    except Exception as exc:  # noqa: BLE001 - the timing process compiles instead
        print(f"precompile pool failed ({type(exc).__name__}: {exc}); compiling in the timing process", flush=True)
        return time.perf_counter() - started
    wall = time.perf_counter() - started
    failed = [(task, error) for task, (_, error) in zip(tasks, results) if error]
    print(f"precompile: {len(tasks)} distinct kernels in {wall:.1f} s with {min(jobs, len(tasks))} processes "
          f"(sum of compile times {sum(s for s, _ in results):.1f} s); {len(failed)} failed "
          f"(reported again below where they are built)", flush=True)
    for (family, cfg, _), error in failed[:10]:
        print(f"  {family} {label(family, cfg)}: {error}", flush=True)
    return wall


# ----------------------------------------------------------------------------- GPU run

def verify_before_timing(problem, candidates: list[dict]) -> tuple[list[dict], list[dict]]:
    """Each candidate run twice on NaN-filled outputs and checked against torch.mm in float32
    (the repo's tolerances); (those right both times, the others with a reason)."""
    ops = make_operands(problem, 4321, "cuda")
    ref = torch.mm(ops.a.float(), ops.b.float())
    kept, dropped = [], []
    for cand in candidates:
        reason = None
        try:
            for call in range(2):
                ops.out.fill_(float("nan"))
                cand["run"](ops)
                torch.cuda.synchronize()
                verdict = check(problem, ops.out, ref)
                if not verdict.ok:
                    reason = f"WRONG on call {call + 1}: {verdict.reason}"
                    break
                cand["rel_error"] = verdict.rel_error
        except Exception as exc:  # noqa: BLE001 - a config that does not compile or launch
            text = str(exc).splitlines()[0][:110] if str(exc) else ""
            reason = f"FAILED: {type(exc).__name__}: {text}"
        if reason is None:
            kept.append(cand)
        else:
            cand["status"] = reason
            dropped.append(cand)
    return kept, dropped


def stress(problem, run, calls: int) -> tuple[int, str]:
    """`calls` back-to-back calls of a split-K runnable, each output checked: the arrival
    order on the counters changes from call to call, which the interpreter cannot show.
    (wrong calls, the first reason)."""
    ops = make_operands(problem, 777, "cuda")
    ref = torch.mm(ops.a.float(), ops.b.float())
    wrong, first = 0, ""
    for _ in range(calls):
        ops.out.fill_(float("nan"))
        run(ops)
        verdict = check(problem, ops.out, ref)
        if not verdict.ok:
            wrong += 1
            first = first or verdict.reason
    return wrong, first


def fmt_row(name: str, config: str, programs, us: float, floor_us: float, torch_us: float) -> str:
    progs = "" if programs is None else str(programs)
    return (f"  {name:14s} {config:24s} {progs:>6s} {us:8.2f} us  x floor {us / floor_us:5.2f}"
            f"  vs torch.mm {us / torch_us:5.2f}")


def run_shape(bench: SideBySide, shape: tuple, pairs: list, note: str, kernel_dir: str, rounds: int) -> dict:
    m, n, k = shape
    name = f"{m}x{n}x{k}"
    problem = make_problem(m=m, n=n, k=k, dtype="bfloat16", device="cuda")
    floor_us = 2 * (m * k + k * n + m * n) / HBM_BYTES_PER_S * 1e6
    started = time.perf_counter()
    print(f"\n== {name} bf16: floor {floor_us:.2f} us (bytes / 4.3 TB/s), target {TARGET_X_FLOOR * floor_us:.2f} us; "
          f"{note}", flush=True)

    candidates = [{"family": "torch.mm", "config": {}, "run": bench.anchor(problem)}]
    try:
        params = get_template("triton::mm").full_params(problem, WINNER)
        candidates.append({"family": "triton::mm", "config": dict(WINNER),
                           "run": bench.runnable(problem, {"uid": "triton::mm", "params": params}, kernel_dir)})
    except Exception as exc:  # noqa: BLE001
        print(f"  triton::mm {label('triton::mm', WINNER)}: FAILED to build ({type(exc).__name__}: {exc})")
    build_failures = []
    for family, cfg in pairs:
        try:
            candidates.append({"family": family, "config": cfg, "run": build_variant(family, cfg, m, n, k, "cuda")})
        except Exception as exc:  # noqa: BLE001
            build_failures.append({"family": family, "config": cfg,
                                   "status": f"FAILED to build: {type(exc).__name__}: {exc}"})
    kept, dropped = verify_before_timing(problem, candidates)
    dropped = build_failures + dropped
    verified_at = time.perf_counter()

    times, verdicts = bench.time_many(problem, [c["run"] for c in kept], rounds=rounds)
    for cand, ms, verdict in zip(kept, times, verdicts):
        cand["us"] = ms * 1e3
        cand["status"] = "ok" if verdict.ok else f"WRONG in time_many: {verdict.reason}"
    torch_us = next(c["us"] for c in kept if c["family"] == "torch.mm")
    timed_at = time.perf_counter()

    print(f"  {'name':14s} {'config':24s} {'progs':>6s} {'time':>11s}", flush=True)
    for family in FAMILIES:
        for cand in sorted((c for c in kept if c["family"] == family), key=lambda c: c["us"]):
            flag = "" if cand["status"] == "ok" else f"  {cand['status']}"
            print(fmt_row(family, label(family, cand["config"]), programs_of(family, cand["config"], n),
                          cand["us"], floor_us, torch_us) + flag, flush=True)
    for cand in dropped:
        print(f"  {cand['family']:14s} {label(cand['family'], cand['config']):24s} not timed: {cand['status']}",
              flush=True)

    best = {}
    for family in FAMILIES:
        good = [c for c in kept if c["family"] == family and c["status"] == "ok"]
        if good:
            best[family] = min(good, key=lambda c: c["us"])
    print("  best of each family (sweep):", flush=True)
    for family, cand in best.items():
        print(fmt_row(family, label(family, cand["config"]), programs_of(family, cand["config"], n),
                      cand["us"], floor_us, torch_us), flush=True)

    # The bests again, twice, side by side (alternating order): a best picked from many
    # reads is biased low; these reads are not.
    order = list(best)
    retimes = {family: [] for family in order}
    for _ in range(2):
        again, _verdicts = bench.time_many(problem, [best[f]["run"] for f in order], rounds=rounds)
        for family, ms in zip(order, again):
            retimes[family].append(ms * 1e3)
    torch_re = statistics.mean(retimes["torch.mm"]) if "torch.mm" in retimes else torch_us
    print("  bests re-timed twice (us): ", flush=True)
    for family in order:
        mean = statistics.mean(retimes[family])
        print(f"  {family:14s} {label(family, best[family]['config']):24s} "
              f"{retimes[family][0]:7.2f} {retimes[family][1]:7.2f}  mean {mean:7.2f}  "
              f"x floor {mean / floor_us:5.2f}  vs torch.mm {mean / torch_re:5.2f}", flush=True)
    stressed = {}
    for family in order:
        if family.startswith("split-K"):
            wrong, reason = stress(problem, best[family]["run"], STRESS_CALLS)
            stressed[family] = {"calls": STRESS_CALLS, "wrong": wrong, "first_reason": reason}
            print(f"  {family} best, {STRESS_CALLS} calls each checked: "
                  + ("all right" if not wrong else f"{wrong} WRONG ({reason})"), flush=True)
    done = time.perf_counter()
    print(f"  ({name}: built and verified {len(candidates)} in {verified_at - started:.1f} s, "
          f"timed {len(kept)} in {timed_at - verified_at:.1f} s, re-timed in {done - timed_at:.1f} s)", flush=True)

    def row(cand):
        us = cand.get("us")
        return {"family": cand["family"], "config": cand["config"], "label": label(cand["family"], cand["config"]),
                "programs": programs_of(cand["family"], cand["config"], n), "status": cand["status"],
                "us": us, "x_floor": None if us is None else us / floor_us,
                "vs_torch_mm": None if us is None else us / torch_us, "rel_error": cand.get("rel_error")}

    return {
        "shape": name, "m": m, "n": n, "k": k, "dtype": "bfloat16", "floor_us": floor_us,
        "target_us": TARGET_X_FLOOR * floor_us, "note": note, "rounds": rounds,
        "rows": [row(c) for c in kept] + [row(c) for c in dropped],
        "best": {family: {**row(cand), "retimes_us": retimes[family],
                          "retimed_mean_us": statistics.mean(retimes[family]),
                          "retimed_x_floor": statistics.mean(retimes[family]) / floor_us,
                          "retimed_vs_torch_mm": statistics.mean(retimes[family]) / torch_re,
                          "stress": stressed.get(family)}
                 for family, cand in best.items()},
        "seconds": {"build_verify": verified_at - started, "time": timed_at - verified_at, "retime": done - timed_at},
    }


def gpu_main(args) -> None:
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: this benchmark needs a GPU (--interpret checks the kernels on the CPU)")
    started = time.perf_counter()
    shapes = [s for s in SHAPES if not args.only or f"{s[0]}x{s[1]}x{s[2]}" in args.only.split(",")]
    plans, notes = {}, {}
    for m, n, k in shapes:
        plans[(m, n, k)], notes[(m, n, k)] = plan(m, n, k, args.max_configs)
    bench = SideBySide()
    compile_wall = precompile(plans, args.jobs, bench.device)
    kernel_dir = tempfile.mkdtemp(prefix="decode-variants-")
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "hbm_bytes_per_s": HBM_BYTES_PER_S, "precompile_s": compile_wall, "shapes": []}
    for shape in shapes:
        results["shapes"].append(run_shape(bench, shape, plans[shape], notes[shape], kernel_dir, args.rounds))
        write_json("decode_variants.json", results)  # after each shape: a crash keeps what was done

    print("\n== summary: the best of each family, re-timed twice (mean); target x floor <= "
          f"{TARGET_X_FLOOR}", flush=True)
    print(f"  {'shape':16s} {'family':14s} {'config':24s} {'sweep':>8s} {'re-timed':>9s} {'x floor':>8s} "
          f"{'vs torch':>9s}", flush=True)
    for entry in results["shapes"]:
        for family, b in entry["best"].items():
            mark = "  <= target" if b["retimed_x_floor"] <= TARGET_X_FLOOR else ""
            print(f"  {entry['shape']:16s} {family:14s} {b['label']:24s} {b['us']:8.2f} {b['retimed_mean_us']:9.2f} "
                  f"{b['retimed_x_floor']:8.2f} {b['retimed_vs_torch_mm']:9.2f}{mark}", flush=True)
    results["wall_s"] = time.perf_counter() - started
    path = write_json("decode_variants.json", results)
    print(f"wall {results['wall_s']:.0f} s (precompile {compile_wall:.0f} s); wrote {path}", flush=True)


# ----------------------------------------------------------------------------- interpreter

INTERPRET_SHAPES = (  # (M, N, K, dtype)
    (16, 256, 512, "bfloat16"), (5, 192, 384, "bfloat16"),
    (5, 200, 320, "bfloat16"),  # N and K not multiples of the blocks: the masked paths
    (5, 200, 320, "float32"),  # no upcast, exact dots: the fp32 tolerance (1e-4)
)
INTERPRET_SWAP = ({"BLOCK_N": 64, "BLOCK_K": 64}, {"BLOCK_N": 32, "BLOCK_K": 128})
INTERPRET_SPLIT = ((2, 64, 64), (4, 32, 32), (2, 32, 32), (5, 64, 64))  # (SPLIT, BN, BK): 2 valid per shape


def interpret_main() -> None:
    """Each family on small shapes under Triton's interpreter, checked against torch.mm of
    the float32 inputs; exits 1 if any is wrong."""
    assert os.environ.get("TRITON_INTERPRET") == "1"
    kernel_dir = tempfile.mkdtemp(prefix="decode-variants-interp-")
    tally: dict[str, list[int]] = {}
    started = time.perf_counter()
    for m, n, k, dtype in INTERPRET_SHAPES:
        problem = make_problem(m=m, n=n, k=k, dtype=dtype, device="cpu")
        upcast = dtype != "float32"
        ops = make_operands(problem, 99, "cpu")
        ref = torch.mm(ops.a.float(), ops.b.float())
        print(f"== {m}x{n}x{k} {dtype} (interpreter{', upcast to float32 in the kernel' if upcast else ''})",
              flush=True)
        cases = []
        template = get_template("triton::mm")
        mm_cfg = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "num_stages": 2, "num_warps": 2}
        cases.append(("triton::mm", mm_cfg, lambda: template.build(problem, template.full_params(problem, mm_cfg),
                                                                     kernel_dir)))
        for geo in INTERPRET_SWAP:
            cfg = {**geo, "num_stages": 3, "num_warps": 4}
            cases.append(("swap-AB", cfg, lambda cfg=cfg: swap_ab_runnable(cfg, m, n, k, upcast)))
        for dot in ("swap", "plain"):
            valid = [g for g in INTERPRET_SPLIT if k % (g[0] * g[2]) == 0][:2]
            for split, bn, bk in valid:
                cfg = {"SPLIT": split, "BLOCK_N": bn, "BLOCK_K": bk, "num_stages": 3, "num_warps": 4, "DOT": dot}
                cases.append((f"split-K/{dot}", cfg,
                              lambda cfg=cfg: split_k_runnable(cfg, m, n, k, "cpu", upcast)))
        for family, cfg, make in cases:
            t0 = time.perf_counter()
            status = "pass"
            try:
                run = make()
                for call in range(2):  # twice: split-K's second call needs its counters back at 0
                    ops.out.fill_(float("nan"))
                    run(ops)
                    verdict = check(problem, ops.out, ref)
                    if not verdict.ok:
                        status = f"FAIL on call {call + 1}: {verdict.reason}"
                        break
                    detail = f"rel error {verdict.rel_error:.1e}"
                buffers = getattr(run, "buffers", None)
                if status == "pass" and buffers is not None:
                    left = int(buffers[1].abs().sum())
                    if left:
                        status = f"FAIL: counters not reset (sum {left})"
                    else:
                        detail += f", counters back at 0 ({buffers[1].numel()} tiles)"
                if status == "pass":
                    status = f"pass ({detail})"
            except Exception as exc:  # noqa: BLE001
                status = f"FAIL: {type(exc).__name__}: {exc}"
            tally.setdefault(family, [0, 0])
            tally[family][1] += 1
            tally[family][0] += status.startswith("pass")
            print(f"  {family:14s} {label(family, cfg):24s} {status}  [{time.perf_counter() - t0:.1f} s]", flush=True)
    print("== interpreter summary", flush=True)
    for family, (passed, total) in tally.items():
        print(f"  {family:14s} {passed}/{total} pass", flush=True)
    print(f"  ({time.perf_counter() - started:.0f} s)", flush=True)
    if any(p != t for p, t in tally.values()):
        sys.exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=None, help="comma-separated MxNxK shapes")
    parser.add_argument("--jobs", type=int, default=8, help="compile processes before timing (1: none)")
    parser.add_argument("--max-configs", type=int, default=40, help="cap on split-K configs per shape")
    parser.add_argument("--rounds", type=int, default=4, help="time_many passes (alternating order)")
    parser.add_argument("--interpret", action="store_true",
                        help="check the kernels on the CPU under Triton's interpreter (no timing)")
    args = parser.parse_args()
    if args.interpret:
        interpret_main()
    else:
        gpu_main(args)


if __name__ == "__main__":
    main()
