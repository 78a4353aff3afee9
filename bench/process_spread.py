"""How far one kernel's time moves between processes, and between operand placements in
one process: torch.mm (cuBLAS) and triton::mm tiles (plain and FIXED_NK twin), each case
timed in `--procs` fresh processes, in each `--sets` times by
bench/common.SideBySide.time_many (the tuner's graph timing, one output): `--rounds`
interleaved passes, each with the operands at addresses of its own (SideBySide.placed: no
two passes of a process alike), a set's
time the median of its passes. `--rounds 1`: a set is one placement. The cuBLAS kernel
torch.mm launched is named per process (the profiler).

A pick between kernels within a few per cent rests on one process's reading (the tune's);
the consumer runs in another. This says which kernels' times move with the process, which
with the operands' addresses, and by how much.

PYTHONPATH=. python3 bench/process_spread.py [--cases "256x4096x4096:64x128x128s4w4;..."]
    [--procs 6] [--sets 3] [--rounds 4]
A case is MxNxK (bf16, B stored [N, K]) and its configs, BMxBNxBK s<stages> w<warps>.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import tile_label, write_json  # noqa: E402
from bench.twin_sweep import parse_cases  # noqa: E402

CASES = "256x4096x4096:64x128x128s4w4;128x4096x4096:64x64x128s5w4;128x14336x4096:128x128x64s5w8"


def cublas_kernels(torch, problem, ops) -> list[str]:
    """The CUDA kernels one torch.mm of the problem launches."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.mm(ops.a, ops.b, out=ops.out)
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})


def child(cases: str, sets_per_case: int, rounds: int) -> dict:
    """One process's readings: {case: {"kernels": [...], "sets": [{name: ms}, ...]}}."""
    import torch

    from bench.common import SideBySide
    from autotune_cli.problem import make_problem
    from autotune_cli.runner.verify import make_operands
    from autotune_cli.templates import get_template

    side = SideBySide()
    kernel_dir = tempfile.mkdtemp(prefix="process-spread-")
    template = get_template("triton::mm")
    found = {}
    for (m, n, k), configs in parse_cases(cases):
        problem = make_problem(m=m, n=n, k=k, dtype="bfloat16", layout="nt")
        runs, names = [], []
        for config in configs:
            label = tile_label(config)
            runs.append(template.build(problem, template.full_params(problem, config), kernel_dir))
            runs.append(template.build(problem, template.full_params(problem, template.fixed_twin(config)),
                                       kernel_dir))
            names += [f"{label}", f"{label} f"]
        runs.append(side.anchor(problem))
        names.append("torch.mm")
        kernels = cublas_kernels(torch, problem, make_operands(problem, 1, "cuda"))
        sets = []
        for index in range(sets_per_case):
            times, verdicts = side.time_many(problem, runs, seed=1234 + index, rounds=rounds)
            if not all(v.ok for v in verdicts):
                raise SystemExit(f"{m}x{n}x{k}: a kernel gave a wrong result")
            sets.append(dict(zip(names, times)))
        found[f"{m}x{n}x{k}"] = {"kernels": kernels, "sets": sets}
    return found


def spread(values: list[float]) -> float:
    return max(values) / min(values) - 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default=CASES)
    parser.add_argument("--procs", type=int, default=6)
    parser.add_argument("--sets", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.cases, args.sets, args.rounds)))
        return

    procs = []
    for index in range(args.procs):
        done = subprocess.run([sys.executable, __file__, "--child", "--cases", args.cases, "--sets",
                               str(args.sets), "--rounds", str(args.rounds)],
                              capture_output=True, text=True, check=False)
        if done.returncode:
            raise SystemExit(f"process {index} failed:\n{done.stderr[-3000:]}")
        procs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"process {index + 1}/{args.procs} done", flush=True)
    write_json("process_spread.json", procs)

    print(f"\n{'case (bf16, nt)':16} {'kernel':22} {'median':>7} {'procs':>13} {'p.spread':>8} {'s.spread':>8}")
    for case in procs[0]:
        names = list(procs[0][case]["sets"][0])
        for name in names:
            per_proc = [[s[name] * 1000 for s in p[case]["sets"]] for p in procs]
            medians = [statistics.median(v) for v in per_proc]
            within = statistics.median(spread(v) for v in per_proc)
            everything = statistics.median(t for v in per_proc for t in v)
            print(f"{case:16} {name:22} {everything:7.2f} {min(medians):6.2f}-{max(medians):<6.2f}"
                  f" {spread(medians) * 100:7.1f}% {within * 100:7.1f}%")
        kernels = {k for p in procs for k in p[case]["kernels"]}
        print(f"{'':16} cuBLAS kernels seen: {'; '.join(sorted(kernels))[:200]}")
    print("(us; procs: the range of the processes' medians; p.spread: its width; s.spread: the median,"
          " over processes, of the spread between its sets)")


if __name__ == "__main__":
    main()
