"""Inductor max-autotune on one mm, cold, in its own process: prints one JSON line with
its tune wall time, and its kernel's time beside torch.mm's (same timer as ours).

PYTHONPATH=. python3 bench/inductor_mm.py M N K DTYPE [MODE]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    m, n, k = (int(x) for x in sys.argv[1:4])
    dtype_name = sys.argv[4]
    mode = sys.argv[5] if len(sys.argv) > 5 else "max-autotune-no-cudagraphs"
    scratch = tempfile.mkdtemp(prefix="inductor-bench-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(scratch, "inductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(scratch, "triton")
    import torch
    import torch._inductor.config as config

    from autotune_cli.bench.timing import CudaTimer
    from autotune_cli.fingerprint import probe_device
    from autotune_cli.problem import make_problem
    from autotune_cli.settings import TuneSettings
    from autotune_cli.templates.base import Operands
    from autotune_cli.tuner import timing_policy_for
    from bench.common import POLICY

    config.force_disable_caches = True
    dtype = getattr(torch, dtype_name)
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    fn = torch.compile(lambda x, y: torch.mm(x, y), mode=mode, dynamic=False)
    torch.cuda.synchronize()
    started = time.perf_counter()
    out = fn(a, b)
    torch.cuda.synchronize()
    tune_s = time.perf_counter() - started
    ref = torch.mm(a.double(), b.double())
    rel = float((out.double() - ref).norm() / ref.norm())
    device = probe_device("cuda")
    timer = CudaTimer(device.l2_bytes)
    problem = make_problem(m=m, n=n, k=k, dtype=dtype_name, device="cuda")
    policy = timing_policy_for(problem, device, TuneSettings(device="cuda"), base=POLICY)
    ops = Operands(a=a, b=b, out=torch.empty(m, n, device="cuda", dtype=dtype))
    inductor_ms, torch_ms = [], []
    for _ in range(3):
        inductor_ms.append(timer.measure(lambda o: fn(o.a, o.b), ops, policy).median_ms)
        torch_ms.append(timer.measure(lambda o: torch.mm(o.a, o.b, out=o.out), ops, policy).median_ms)
    print(json.dumps({"m": m, "n": n, "k": k, "dtype": dtype_name, "mode": mode,
                      "tune_s": tune_s, "inductor_ms": sorted(inductor_ms)[1],
                      "torch_mm_ms": sorted(torch_ms)[1], "rel_error": rel,
                      "timing": policy.mode}))


if __name__ == "__main__":
    main()
