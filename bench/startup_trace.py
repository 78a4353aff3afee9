"""Where a command's first seconds go on a GPU host: each step timed in a fresh process, the
GPUs left idle for a few seconds between processes (so each starts as a command would).

  ctypes: the CUDA driver's cuInit alone
  torch:  import torch, then torch.cuda.is_available(), get_device_properties per GPU
  both:   cuInit on a thread from the start, then the torch steps (what the CLI did for a
          while: on the H200 host cuInit took 0.43 s alone and torch's import as much longer
          beside it, so it was taken out)

PYTHONPATH=. python3 bench/startup_trace.py        (prints one JSON line per process)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

CHILD = r'''
import json, sys, threading, time
t0 = time.perf_counter()
marks = {}
def mark(name):
    marks[name] = round(time.perf_counter() - t0, 3)
mode = sys.argv[1]
if mode in ("ctypes", "both"):
    import ctypes
    def init():
        ctypes.CDLL("libcuda.so.1").cuInit(0)
        mark("cuInit done")
    thread = threading.Thread(target=init)
    thread.start()
    if mode == "ctypes":
        thread.join()
if mode in ("torch", "both"):
    import torch
    mark("torch imported")
    torch.cuda.is_available()
    mark("is_available")
    for i in range(torch.cuda.device_count()):
        torch.cuda.get_device_properties(i)
        mark(f"properties {i}")
    torch.empty(1, device="cuda")
    mark("first allocation (context)")
print(json.dumps({"mode": mode, "marks": marks}))
'''


def main() -> None:
    for mode in ("ctypes", "torch", "both", "torch", "both"):
        time.sleep(4)  # let the driver let go of the GPUs, as between two commands
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True)
        wall = round(time.perf_counter() - started, 3)
        line = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-300:]
        print(json.dumps({"wall_s": wall, "child": line}), flush=True)


if __name__ == "__main__":
    main()
