"""Where lm_head's time goes (2048x50257x768 fp16, vocabulary 50257): B's copy into rows
padded to 16 bytes, cuBLAS on the padded operands into an output with padded rows, and the
same pieces Inductor's generated code uses (run bench/inductor_mm.py with
TORCH_LOGS=output_code beside this to read its code). CUDA events, medians of 50 runs.

PYTHONPATH=. python3 bench/lm_head_probe.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune_cli.problem import make_problem  # noqa: E402
from autotune_cli.templates import aten_aligned  # noqa: E402
from autotune_cli.templates.base import Operands, empty_out  # noqa: E402
from autotune_cli.templates.row_copy import copy_rows  # noqa: E402

M, N, K, NP = 2048, 50257, 768, 50264


def median_ms(fn, runs: int = 50) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main() -> None:
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    b_rows = torch.zeros(K, NP, device="cuda", dtype=torch.float16)
    out = torch.empty(M, NP, device="cuda", dtype=torch.float16)
    b_view, out_view = b_rows[:, :N], out[:, :N]
    b_rows16 = torch.zeros(K, 50272, device="cuda", dtype=torch.float16)  # rows a multiple of 16 apart
    b16_view, b16_used = b_rows16[:, :N], b_rows16[:, :NP]
    rows = {
        "torch.mm(a, b) contiguous out": lambda: torch.mm(a, b),
        "copy B into padded rows": lambda: b_view.copy_(b),
        "F.pad(B, (0, 7))": lambda: F.pad(b, (0, NP - N)),
        "row_copy.copy_rows B into padded rows": lambda: copy_rows(b_view, b),
        "mm padded B -> padded-row out [:, :N]": lambda: torch.mm(a, b_view, out=out_view),
        "mm padded B full width -> [M, NP]": lambda: torch.mm(a, b_rows, out=out),
        "copy + mm (aten::mm_aligned ZERO_PAD=0)": lambda: (b_view.copy_(b), torch.mm(a, b_view, out=out_view)),
        "copy + mm full width (ZERO_PAD=1)": lambda: (b_view.copy_(b), torch.mm(a, b_rows, out=out)),
        "copy_rows + mm full width": lambda: (copy_rows(b_view, b), torch.mm(a, b_rows, out=out)),
        "copy_rows into rows 50272 apart": lambda: copy_rows(b16_view, b),
        "copy_rows (50272 apart) + mm on [:, :NP]": lambda: (copy_rows(b16_view, b), torch.mm(a, b16_used, out=out)),
    }
    problem = make_problem(m=M, n=N, k=K, dtype="float16", device="cuda")
    template = aten_aligned.AtenAlignedTemplate()
    for zero_pad in (0, 1):
        params = template.full_params(problem, {"ZERO_PAD": zero_pad})
        ops = Operands(a=a, b=b, out=empty_out(problem, template.out_pitch(problem, params), torch.float16, "cuda"))
        run = template.build(problem, params, "/tmp")
        rows[f"aten::mm_aligned ZERO_PAD={zero_pad}"] = (lambda run=run, ops=ops: run(ops))
    for name, fn in rows.items():
        print(f"{name:45s} {median_ms(fn):.4f} ms", flush=True)
    # The tuner's own timer (L2 flushed, the GPU kept busy before each start event).
    from autotune_cli.bench.timing import CudaTimer
    from autotune_cli.fingerprint import probe_device
    from autotune_cli.settings import TimingPolicy

    timer = CudaTimer(probe_device("cuda").l2_bytes)
    for name in ("copy_rows + mm full width", "aten::mm_aligned ZERO_PAD=1"):
        print(f"{name + ' (CudaTimer)':45s} {timer(rows[name], TimingPolicy()).median_ms:.4f} ms", flush=True)


if __name__ == "__main__":
    main()
