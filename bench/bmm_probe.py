"""bmm 32x512x512x128 bf16: where Inductor's pick read 10% faster than cuBLAS in one suite
of four (0.0095 ms against torch.bmm's 0.0106; the other three 0.0109-0.0118) while our best
triton::bmm read 0.0129-0.0130 in every suite. Here, in one process:

  1. our tune of the problem with the exhaustive search (every triton::bmm config the tile
     model ranks into the compile cap), its ten best candidates printed;
  2. Inductor's max-autotune of torch.bmm on the same operands, its own autotune table
     (stderr: which choice it took, at what time);
  3. side by side, by the suite's method (bench/common.SideBySide.time_many: one timer,
     interleaved passes, each verified): torch.bmm, Inductor's compiled call, and our three
     best triton::bmm configs.

PYTHONPATH=. python3 bench/bmm_probe.py [B,M,N,K,DTYPE]
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import fresh_compile_caches, write_json  # noqa: E402


def main() -> None:
    spec = sys.argv[1] if len(sys.argv) > 1 else "32,512,512,128,bfloat16"
    b, m, n, k, dtype = spec.split(",")
    fresh_compile_caches("bmm-probe-")
    import torch
    import torch._inductor.config as config

    from autotune_cli.problem import make_problem
    from autotune_cli.settings import TuneSettings
    from autotune_cli.tuner import Tuner
    from bench.common import SideBySide

    config.force_disable_caches = True
    problem = make_problem(m=int(m), n=int(n), k=int(k), batch=int(b), dtype=dtype, device="cuda")
    settings = TuneSettings(device="cuda", cache_dir=Path(tempfile.mkdtemp()), force=True, search="exhaustive")
    with Tuner(settings) as tuner:
        outcome = tuner.tune(problem)
    entry = outcome.entry
    ok = sorted((c for c in entry["candidates"] if c["status"] == "ok"), key=lambda c: c["ms"])
    statuses: dict[str, int] = {}
    for c in entry["candidates"]:
        statuses[c["status"]] = statuses.get(c["status"], 0) + 1
    print(f"exhaustive tune: {len(entry['candidates'])} candidates {statuses}; winner {entry['winner']['uid']}"
          f" {entry['winner'].get('ms')}", flush=True)
    for c in ok[:10]:
        print(f"  {c['ms']:.5f} ms {c['uid']} {json.dumps(c['params'], sort_keys=True)}")
    side = SideBySide()
    runs = {"torch.bmm": side.anchor(problem)}
    compiled = torch.compile(lambda x, y: torch.bmm(x, y), mode="max-autotune-no-cudagraphs", dynamic=False)
    runs["inductor"] = lambda ops: ops.out.copy_(compiled(ops.a, ops.b))  # the copy: a few us, noted
    runs["inductor (no copy; its check reads an output it never writes)"] = lambda ops: compiled(ops.a, ops.b)
    triton_best = [c for c in ok if c["uid"] == "triton::bmm"][:3]
    for c in triton_best:
        runs[f"triton::bmm {json.dumps(c['params'], sort_keys=True)}"] = side.runnable(
            problem, {"uid": c["uid"], "params": c["params"]}, str(settings.kernel_dir))
    names = list(runs)
    times, verdicts = side.time_many(problem, [runs[name] for name in names])
    anchor = times[0]
    print("\nside by side (median of 6 passes):")
    for name, ms, verdict in zip(names, times, verdicts):
        print(f"  {ms:.5f} ms  x{anchor / ms:.3f} vs torch.bmm  {'ok' if verdict.ok else 'WRONG'}  {name}")
    write_json("bmm_probe.json", {"problem": spec, "tune": ok[:20],
                                  "side_by_side": dict(zip(names, times))})


if __name__ == "__main__":
    main()
