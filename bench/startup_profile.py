"""Where `autotune model`'s seconds before tuning go on a GPU host: gpu_multi.py's model of
eight linears tuned cold (fresh autotune and Triton caches) under cProfile, once with
`--gpus 1` and once with `--gpus 2`; printed per run: the command's stage marks, and the
main thread's time in each call the `model` command makes (cumulative seconds, the largest
first), then the largest cumulative entries overall.

PYTHONPATH=. python3 bench/startup_profile.py [--gpus 2] [--top 25]
Writes $OUT/startup_profile_<gpus>.prof (or bench_out/).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import out_dir  # noqa: E402
from bench.gpu_multi import save_model  # noqa: E402


def profile(path: Path, gpus: int, work: Path, top: int, device: str) -> None:
    cache = work / f"cache-{gpus}"
    prof = out_dir() / f"startup_profile_{gpus}.prof"
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": str(cache), "TRITON_CACHE_DIR": str(cache / "triton")}
    command = [sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "autotune_cli", "model", str(path),
               "--device", device, "--gpus", str(gpus), "--json"]
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    if proc.returncode not in (0, 1):
        print(f"--gpus {gpus}: failed ({proc.returncode}): {proc.stderr[-2000:]}")
        return
    try:
        stages = json.loads(proc.stdout[proc.stdout.index("{"):proc.stdout.rindex("}") + 1]).get("stages_s")
    except ValueError:
        stages = None
    print(f"== --gpus {gpus}: stages {stages}")
    stats = pstats.Stats(str(prof))
    # The calls the command function makes, by cumulative time (main thread only).
    rows = []
    for func, (_cc, _nc, _tt, _ct, callers) in stats.stats.items():
        for caller, entry in callers.items():
            if caller[2] == "model" and caller[0].endswith("cli.py"):
                rows.append((entry[3], f"{Path(func[0]).name}:{func[1]}({func[2]})"))
    for seconds, name in sorted(rows, reverse=True)[:15]:
        print(f"  model -> {name:60s} {seconds:7.3f} s")
    text = io.StringIO()
    pstats.Stats(str(prof), stream=text).sort_stats("cumulative").print_stats(top)
    lines = [line for line in text.getvalue().splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    print("\n".join(lines[start:start + top + 1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", default="1,2", help="comma-separated --gpus values to profile")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--device", default="cuda", help="cpu: try the script here (small budget)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="autotune-profile-"))
    path = save_model(work, 256)
    for gpus in (int(g) for g in args.gpus.split(",")):
        profile(path, gpus, work, args.top, args.device)


if __name__ == "__main__":
    main()
