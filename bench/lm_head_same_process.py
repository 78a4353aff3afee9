"""lm_head (2048x50257x768 fp16) in one process: our aten::mm_aligned against Inductor's
max-autotune pick, and two hybrids that say where the 3-4% between them comes from:
  ours                 our row copy into the kept padded B, cuBLAS into the pitched output
  inductor             the compiled torch.mm (Inductor's pad kernel, cuBLAS, a view)
  copy + fresh out     our row copy, then cuBLAS into a new [2048, 50264] tensor each call
  F.pad + mm           torch's own pad of B, then cuBLAS into a new padded tensor
Each is timed by the tuner's timer (bench/common.POLICY) in six passes of alternating order
(median of the passes' medians), then its kernels by torch.profiler, the L2 flushed before
each call (bench/common.print_kernel_times), all in one process.

PYTHONPATH=. python3 bench/lm_head_same_process.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import LM_HEAD, fresh_compile_caches  # noqa: E402

_, N, K = LM_HEAD


def main() -> None:
    scratch = fresh_compile_caches("lm-head-same-")
    import torch
    import torch.nn.functional as F

    from autotune_cli.templates.row_copy import copy_rows
    from bench.common import lm_head_beside_inductor, relative_error, time_and_profile_cases

    timer, a, b, _, run_ours, inductor = lm_head_beside_inductor(scratch)
    padded = torch.zeros(K, 50264, device="cuda", dtype=torch.float16)

    def copy_fresh_out():
        copy_rows(padded[:, :N], b)
        return torch.mm(a, padded)[:, :N]

    cases = {
        "ours": run_ours,
        "inductor": inductor,
        "copy + fresh out": copy_fresh_out,
        "F.pad + mm": lambda: torch.mm(a, F.pad(b, (0, 50264 - N)))[:, :N],
    }
    reference = (a.double() @ b.double())
    for name, fn in cases.items():
        fn()
        got = fn()
        torch.cuda.synchronize()
        print(f"{name}: relative error {relative_error(got, reference):.2e}", flush=True)
    time_and_profile_cases(cases, timer, width=18)


if __name__ == "__main__":
    main()
