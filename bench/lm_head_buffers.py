"""lm_head (2048x50257x768 fp16): does the same cuBLAS kernel run slower after our copy than
after Inductor's pad because of where its buffers are? Inductor's compiled call takes a new
padded B and a new output from the caching allocator on every call; ours copies into a B
kept since the build and writes the caller's output. In one process, each timed by the
tuner's timer in six passes of alternating order, then its kernels by torch.profiler (the L2
flushed before each call):

  ours                   aten::mm_aligned ZERO_PAD=1 as built (kept zeroed B, caller's output)
  inductor               the compiled torch.mm
  new B, caller's out    a new [768, 50264] B from the allocator each call (its padding
                         columns left as they come: they only reach the output's padding)
  new B, new out         and a new [2048, 50264] output each call, as Inductor's
  kept B, new out        the kept B, a new output each call

PYTHONPATH=. python3 bench/lm_head_buffers.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import LM_HEAD, fresh_compile_caches  # noqa: E402

M, N, K = LM_HEAD
PITCH = 50264


def main() -> None:
    scratch = fresh_compile_caches("lm-head-buffers-")
    import torch

    from autotune_cli.templates.row_copy import copy_rows
    from bench.common import lm_head_beside_inductor, relative_error, time_and_profile_cases

    timer, a, b, ops, run_ours, inductor = lm_head_beside_inductor(scratch)
    out_wide = ops.out.as_strided((M, PITCH), (PITCH, 1))
    kept = torch.zeros(K, PITCH, device="cuda", dtype=torch.float16)

    def new_b_callers_out():
        fresh = torch.empty(K, PITCH, device="cuda", dtype=torch.float16)
        copy_rows(fresh[:, :N], b)
        torch.mm(a, fresh, out=out_wide)
        return ops.out

    def new_b_new_out():
        fresh = torch.empty(K, PITCH, device="cuda", dtype=torch.float16)
        copy_rows(fresh[:, :N], b)
        return torch.mm(a, fresh)[:, :N]

    def kept_b_new_out():
        copy_rows(kept[:, :N], b)
        return torch.mm(a, kept)[:, :N]

    cases = {
        "ours": run_ours,
        "inductor": inductor,
        "new B, caller's out": new_b_callers_out,
        "new B, new out": new_b_new_out,
        "kept B, new out": kept_b_new_out,
    }
    reference = a.double() @ b.double()
    for name, fn in cases.items():
        got = fn()
        torch.cuda.synchronize()
        print(f"{name}: relative error {relative_error(got, reference):.2e}", flush=True)
    del reference
    time_and_profile_cases(cases, timer, width=22)


if __name__ == "__main__":
    main()
