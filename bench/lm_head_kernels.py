"""lm_head (2048x50257x768 fp16): the GPU kernels our aten::mm_aligned runs, and their mean
durations by torch.profiler, the L2 flushed before each call, as bench/inductor_kernels.py
prints them for Inductor's pick (its pad kernel 0.043 ms + cuBLAS 0.231 ms on 2026-11-30).

PYTHONPATH=. python3 bench/lm_head_kernels.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from autotune_cli.bench.timing import CudaTimer  # noqa: E402
from autotune_cli.fingerprint import probe_device  # noqa: E402
from autotune_cli.templates.row_copy import copy_rows  # noqa: E402
from bench.common import LM_HEAD, lm_head_ours, print_kernel_times  # noqa: E402


def main() -> None:
    timer = CudaTimer(probe_device("cuda").l2_bytes)
    _, n, k = LM_HEAD
    _, b, ops, run = lm_head_ours("/tmp")
    padded = torch.zeros(k, 50264, device="cuda", dtype=torch.float16)
    cases = {
        "aten::mm_aligned ZERO_PAD=1": lambda: run(ops),
        "copy_rows alone": lambda: copy_rows(padded[:, :n], b),
    }
    for name, fn in cases.items():
        print(f"== {name}")
        print_kernel_times(fn, timer)


if __name__ == "__main__":
    main()
