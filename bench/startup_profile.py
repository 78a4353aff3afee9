"""Where `autotune model`'s seconds before tuning go on a GPU host. gpu_multi.py's model of
eight linears is tuned cold (fresh autotune and Triton caches) in a child process whose main
thread is sampled every 20 ms for its first `--seconds` by a thread of its own (a sampling
profiler: cProfile's view of a threaded command proved unreadable); printed per run: the
command's stage marks, then, per 0.5 s window, the main thread's innermost frames of this
package and of the others (the most frequent stack in the window, and how many samples
had none: the thread was in C code that held the interpreter's lock).

PYTHONPATH=. python3 bench/startup_profile.py [--gpus 1,2] [--seconds 9] [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gpu_multi import save_model  # noqa: E402

CHILD = r'''
import collections, json, sys, threading, time
t0 = time.perf_counter()
main_id = threading.get_ident()
samples = []  # (seconds since start, stack as text)
stop_at = t0 + float(sys.argv[1])

def label(frame):
    return f"{frame.f_code.co_filename.split('site-packages/')[-1].split('/work/')[-1]}:{frame.f_lineno}({frame.f_code.co_name})"

def sample():
    while time.perf_counter() < stop_at:
        frame = sys._current_frames().get(main_id)
        stack = []
        while frame is not None:
            stack.append(frame)
            frame = frame.f_back
        ours = [label(f) for f in stack if "autotune_cli" in f.f_code.co_filename][:2]
        inner = [label(f) for f in stack[:3]]
        samples.append((round(time.perf_counter() - t0, 3), " < ".join(inner) + "  ||  " + " < ".join(ours)))
        time.sleep(0.02)
    windows = collections.defaultdict(list)
    for at, stack in samples:
        windows[int(at * 2) / 2].append(stack)
    lines = []
    for start in sorted(windows):
        stacks = windows[start]
        top, count = collections.Counter(stacks).most_common(1)[0]
        lines.append(f"{start:5.1f}s n={len(stacks):3d} top x{count}: {top}")
    sys.stderr.write("\n@@samples\n" + "\n".join(lines) + "\n")

threading.Thread(target=sample, daemon=True).start()
sys.argv = ["autotune"] + sys.argv[2:]
from autotune_cli.cli import main
code = main(sys.argv[1:])
time.sleep(0.05)
sys.exit(code)
'''


def profile(path: Path, gpus: int, work: Path, seconds: float, device: str) -> None:
    cache = work / f"cache-{gpus}"
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": str(cache), "TRITON_CACHE_DIR": str(cache / "triton")}
    command = [sys.executable, "-c", CHILD, str(seconds), "model", str(path), "--device", device,
               "--gpus", str(gpus), "--json"]
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    try:
        stages = json.loads(proc.stdout[proc.stdout.index("{"):proc.stdout.rindex("}") + 1]).get("stages_s")
    except ValueError:
        stages = None
    print(f"== --gpus {gpus} (exit {proc.returncode}): stages {stages}")
    if "@@samples" in proc.stderr:
        print(proc.stderr.split("@@samples", 1)[1].strip())
    else:
        print(proc.stderr[-2000:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", default="1,2", help="comma-separated --gpus values to profile")
    parser.add_argument("--seconds", type=float, default=9.0, help="how long to sample the main thread")
    parser.add_argument("--device", default="cuda", help="cpu: try the script here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="autotune-profile-"))
    path = save_model(work, 256)
    for gpus in (int(g) for g in args.gpus.split(",")):
        profile(path, gpus, work, args.seconds, args.device)


if __name__ == "__main__":
    main()
