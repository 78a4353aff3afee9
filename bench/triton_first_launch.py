"""Where a timing process's first Triton launch spends its time.

In bench/gpu_multi.py's first problem (H200, 2026-11-30) the timing process's first Triton
candidate took 0.44-0.47 s to load and launch (its `first_run` phase), the next ones 5 ms.
Launching a one-element kernel right after the process is ready (bench/triton_warmup.py)
took that off the first candidate, but on a cold Triton cache it compiles that kernel in the
timing process, ~1.2 s with the compile pool busy beside it, and delayed the first results.
Here: three triton::mm kernels are compiled through a real compile pool (offline, as in a
tune) into a fresh Triton cache; then fresh processes, each with torch imported and CUDA up
as a timing process has them:
  steps:   Triton's one-time steps that need no compile (triton_warmup.warm_steps), timed
           one by one, then each candidate's build and launch;
  profile: cProfile around the first candidate's build and launch, the top entries.

PYTHONPATH=. python3 bench/triton_first_launch.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CONFIGS = [
    {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 3, "num_warps": 4},
    {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 3, "num_warps": 4},
    {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "num_stages": 3, "num_warps": 4},
]


def problem():
    from autotune_cli.problem import make_problem

    return make_problem(m=256, n=1024, k=4096, dtype="bfloat16", device="cuda")


def compile_all(kernel_dir: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from autotune_cli.fingerprint import probe_device
    from helpers_kernels import compile_through_pool

    answers, pool = compile_through_pool(probe_device("cuda", 0),
                                         [("triton::mm", problem(), c) for c in CONFIGS], kernel_dir,
                                         by_index=True)
    print(f"compiled through the pool: {[a.get('ok') for a in answers.values()]}, modes {pool.offline_modes}",
          flush=True)


def launch(index: int, kernel_dir: str) -> float:
    import torch

    from autotune_cli.bench.verify import make_operands
    from autotune_cli.templates import get_template

    template = get_template("triton::mm")
    params = template.full_params(problem(), CONFIGS[index])
    ops = make_operands(problem(), 0, "cuda", template.out_pitch(problem(), params))
    torch.cuda.synchronize()
    started = time.perf_counter()
    run = template.build(problem(), params, kernel_dir)
    run(ops)
    torch.cuda.synchronize()
    return time.perf_counter() - started


def child(mode: str, kernel_dir: str) -> None:
    import torch

    import autotune_cli.templates  # noqa: F401

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    if mode == "steps":
        def step(name, fn):
            started = time.perf_counter()
            fn()
            print(f"  {name:44s} {1e3 * (time.perf_counter() - started):8.1f} ms", flush=True)

        def backend_hash():
            from triton.compiler.compiler import make_backend
            from triton.runtime.driver import driver

            make_backend(driver.active.get_current_target()).hash()

        step("import triton.compiler.compiler", lambda: __import__("triton.compiler.compiler"))
        step("driver.active", lambda: __import__("triton.runtime.driver", fromlist=["driver"]).driver.active)
        step("driver.active.utils", lambda: __import__("triton.runtime.driver", fromlist=["driver"]).driver.active.utils)
        step("make_backend(target).hash()", backend_hash)

        def options_hash():
            from triton.compiler.compiler import make_backend
            from triton.runtime.driver import driver

            make_backend(driver.active.get_current_target()).parse_options({}).hash()

        step("parse_options({}).hash()", options_hash)
        from autotune_cli.bench.triton_warmup import _triton_key

        step("triton_key()", lambda: _triton_key()())
        for index in range(len(CONFIGS)):
            print(f"  candidate {index} build+launch {1e3 * launch(index, kernel_dir):8.1f} ms", flush=True)
    else:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        first = launch(0, kernel_dir)
        profiler.disable()
        print(f"  candidate 0 build+launch {1e3 * first:.1f} ms under cProfile", flush=True)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(35)
        print(f"  candidate 1 build+launch {1e3 * launch(1, kernel_dir):.1f} ms", flush=True)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return
    scratch = tempfile.mkdtemp(prefix="triton-first-launch-")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(scratch, "triton")
    kernel_dir = os.path.join(scratch, "kernels")
    compile_all(kernel_dir)
    for mode in ("steps", "profile", "steps"):
        print(f"== {mode} (fresh process)", flush=True)
        subprocess.run([sys.executable, __file__, "--child", mode, kernel_dir], check=False)


if __name__ == "__main__":
    main()
