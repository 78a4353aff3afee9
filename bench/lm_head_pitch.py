"""lm_head (2048x50257x768 fp16): does the padded width change cuBLAS's time?

aten::mm_aligned ZERO_PAD=1 copies B into rows of 50264 (N rounded up to 16 bytes) and runs
cuBLAS on N = 50264 into an output of that pitch; the same cuBLAS kernel then ran 238-243 us
where it ran 231-233 after Inductor's pad (bench/lm_head_buffers.py, bench/lm_head_flat.py).
Here the same two steps (the flat copy `row_copy._copy_flat`, then torch.mm into an output
of the same pitch) are timed for wider pitches: 50272 (32-byte rows), 50304 (128 columns a
multiple: no partial tile of 128), 50432 (of 256), beside Inductor's compiled call and our
template as it is. Each case's error against float64 is checked first; then the tuner's
timer in six passes of alternating order, and each case's kernels by torch.profiler, in one
process.

PYTHONPATH=. python3 bench/lm_head_pitch.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import LM_HEAD, fresh_compile_caches  # noqa: E402

M, N, K = LM_HEAD
PITCHES = (50264, 50272, 50304, 50432)


def main() -> None:
    scratch = fresh_compile_caches("lm-head-pitch-")
    import torch
    import triton

    from autotune_cli.templates import row_copy
    from bench.common import lm_head_beside_inductor, relative_error, time_and_profile_cases

    timer, a, b, _, run_ours, inductor = lm_head_beside_inductor(scratch)

    def padded_case(pitch: int):
        padded = torch.zeros(K, pitch, device="cuda", dtype=torch.float16)
        storage = torch.empty(M * pitch, device="cuda", dtype=torch.float16)
        wide = storage.as_strided((M, pitch), (pitch, 1))
        view = storage.as_strided((M, N), (pitch, 1))
        total = K * pitch

        def run():
            row_copy._copy_flat[(triton.cdiv(total, row_copy.FLAT_BLOCK),)](
                b, padded, total, N, 1, COLS=N, PITCH=pitch, BLOCK=row_copy.FLAT_BLOCK, num_warps=4)
            torch.mm(a, padded, out=wide)
            return view

        return run, padded

    cases = {"ours (template)": run_ours, "inductor": inductor}
    buffers = {}
    for pitch in PITCHES:
        cases[f"flat {pitch}"], buffers[f"flat {pitch}"] = padded_case(pitch)
    reference = a.double() @ b.double()
    for name, fn in cases.items():
        if name in buffers:
            buffers[name].fill_(float("nan"))
        got = fn()
        torch.cuda.synchronize()
        error = relative_error(got, reference)
        padding = "" if name not in buffers else f", padding zero {not bool(buffers[name][:, N:].any())}"
        print(f"{name}: relative error {error:.2e}, stride {tuple(got.stride())}{padding}", flush=True)
    del reference
    time_and_profile_cases(cases, timer, width=16)


if __name__ == "__main__":
    main()
