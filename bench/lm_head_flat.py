"""lm_head (2048x50257x768 fp16): the same cuBLAS kernel ran 231-233 us after Inductor's pad
kernel and 238-243 us after our row copy, whichever buffers either used
(bench/lm_head_buffers.py). Inductor's pad walks the padded B flat, padding included (written
as zeros): 16-byte stores over whole padded rows. Here our flat form (`row_copy._copy_flat`,
which the template uses for rows narrower than 4096 only) copies lm_head's B the same way,
beside our row copy and Inductor's compiled call: each timed by the tuner's timer in six
passes of alternating order, then its kernels by torch.profiler, in one process.

PYTHONPATH=. python3 bench/lm_head_flat.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import LM_HEAD, fresh_compile_caches  # noqa: E402

M, N, K = LM_HEAD
PITCH = 50264


def main() -> None:
    scratch = fresh_compile_caches("lm-head-flat-")
    import torch
    import triton

    from autotune_cli.templates import row_copy
    from bench.common import lm_head_beside_inductor, relative_error, time_and_profile_cases

    timer, a, b, ops, run_ours, inductor = lm_head_beside_inductor(scratch)
    out_wide = ops.out.as_strided((M, PITCH), (PITCH, 1))
    padded = torch.zeros(K, PITCH, device="cuda", dtype=torch.float16)
    total = K * PITCH

    def flat():
        for block in (row_copy.FLAT_BLOCK,):
            row_copy._copy_flat[(triton.cdiv(total, block),)](b, padded, total, N, 1, COLS=N, PITCH=PITCH,
                                                              BLOCK=block, num_warps=4)
        torch.mm(a, padded, out=out_wide)
        return ops.out

    def flat_2048():
        row_copy._copy_flat[(triton.cdiv(total, 2048),)](b, padded, total, N, 1, COLS=N, PITCH=PITCH,
                                                         BLOCK=2048, num_warps=8)
        torch.mm(a, padded, out=out_wide)
        return ops.out

    cases = {"ours (by row)": run_ours, "inductor": inductor, "flat 1024/4": flat,
             "flat 2048/8": flat_2048}
    reference = a.double() @ b.double()
    for name, fn in cases.items():
        padded.fill_(float("nan"))
        got = fn()
        torch.cuda.synchronize()
        error = relative_error(got, reference)
        print(f"{name}: relative error {error:.2e}, padding zero {not bool(padded[:, N:].any())}", flush=True)
    del reference
    time_and_profile_cases(cases, timer, width=16)


if __name__ == "__main__":
    main()
