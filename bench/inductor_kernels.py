"""Which kernels Inductor's max-autotune runs for a mm, and how long each takes: the compiled
function (operands as graph inputs, as bench/inductor_mm.py compiles it) is profiled over
20 calls, the L2 flushed before each (bench/common.print_kernel_times); printed per shape:
each GPU kernel's name (cut), calls and mean µs, then the whole call's median by the tuner's
timer.

PYTHONPATH=. python3 bench/inductor_kernels.py [M,N,K,DTYPE ...]   (default: lm_head fp16 and decode bf16)
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import fresh_compile_caches  # noqa: E402

DEFAULT = ("2048,50257,768,float16", "16,4096,4096,bfloat16")


def main() -> None:
    fresh_compile_caches("inductor-kernels-")
    import torch
    import torch._inductor.config as config

    from autotune_cli.bench.timing import CudaTimer
    from autotune_cli.fingerprint import probe_device
    from bench.common import POLICY, print_kernel_times

    config.force_disable_caches = True
    timer = CudaTimer(probe_device("cuda").l2_bytes)
    for spec in sys.argv[1:] or DEFAULT:
        m, n, k, dtype = spec.split(",")
        dt = getattr(torch, dtype)
        a = torch.randn(int(m), int(k), device="cuda", dtype=dt)
        b = torch.randn(int(k), int(n), device="cuda", dtype=dt)
        torch._dynamo.reset()
        fn = torch.compile(lambda x, y: torch.mm(x, y), mode="max-autotune-no-cudagraphs", dynamic=False)
        out = fn(a, b)
        print(f"== {m}x{n}x{k} {dtype}: out stride {tuple(out.stride())}")
        print_kernel_times(lambda: fn(a, b), timer)
        samples = [timer(lambda: fn(a, b), POLICY).median_ms for _ in range(3)]
        print(f"  whole call by CudaTimer: median of 3 medians {statistics.median(samples):.4f} ms")


if __name__ == "__main__":
    main()
