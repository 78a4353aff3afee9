"""A cached problem is answered from the cache alone: the command's process imports neither
torch nor triton, loads none of the code that starts workers, and has no child process (nor a forkserver)."""

import json
import os
import subprocess
import sys

# Run in a fresh interpreter: main() on a hit, then what the process holds.
PROBE = """
import json, multiprocessing, multiprocessing.forkserver, sys
{setup}
from autotune_cli.cli import main
rc = main({argv!r})
print(json.dumps({{"rc": rc,
    "imported": [m for m in ("torch", "triton", "jinja2", "autotune_cli.runner.processes",
                             "autotune_cli.runner.executor", "autotune_cli.tune.tuner")
                 if m in sys.modules],
    "children": len(multiprocessing.active_children()),
    "forkserver": getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None)}}))
"""


def run_probe(argv, cache_dir, setup=""):
    proc = subprocess.run([sys.executable, "-c", PROBE.format(setup=setup, argv=argv)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "AUTOTUNE_CACHE_DIR": str(cache_dir)})
    assert proc.returncode == 0, proc.stderr
    *data, report = proc.stdout.strip().splitlines()
    return json.loads(report), "\n".join(data), proc.stderr


def test_cpu_hit_starts_nothing_and_imports_no_torch(cli, cache_dir):
    args = ["mm", "--device", "cpu", "--m", "8", "--n", "8", "--k", "8", "--templates", "aten"]
    code, out, _ = cli(*args, "--json")
    assert code == 0 and json.loads(out)["from_cache"] is False
    report, out, err = run_probe(args + ["--json"], cache_dir)
    assert report == {"rc": 0, "imported": [], "children": 0, "forkserver": None}
    assert json.loads(out)["from_cache"] is True and "cached: mm 8x8x8" in err


def test_miss_still_tunes_after_the_lookup(cli, cache_dir):
    """A miss (here: another dtype than the cached one) goes on to tune in workers."""
    base = ["mm", "--device", "cpu", "--m", "8", "--n", "8", "--k", "8", "--templates", "aten", "--json"]
    assert cli(*base)[0] == 0
    code, out, _ = cli(*base, "--dtype", "float32")
    doc = json.loads(out)
    assert code == 0 and doc["from_cache"] is False and doc["winner"]["uid"] == "aten::mm"


# A GPU as the driver would report it, read without torch: the fingerprint needs nothing else.
FAKE_GPU = """
from autotune_cli.hardware import cuda_probe, device
from autotune_cli.store import fingerprint
from autotune_cli.store.cache import Cache
from autotune_cli.tune.hits import look_up
from autotune_cli.problem import make_problem
from autotune_cli.settings import default_cache_dir
report = cuda_probe.DriverReport((cuda_probe.DriverDevice(0, "NVIDIA H200", "9.0", 132, 232448,
                                  62914560, 150_000_000_000),), "12080", "12.8")
device._driver_report = lambda: report
problem = make_problem(m=1, n=4096, k=4096, batch=None, dtype="bfloat16", layout="nt", bias=None,
                       allow_tf32=False, device="cuda")
found = look_up(Cache(default_cache_dir()), problem, device.probe_device("cuda"))
from autotune_cli.templates import get_template
params = get_template("triton::mm_swap_ab").full_params(problem, {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128,
                                                                  "num_stages": 4, "num_warps": 4})
Cache(default_cache_dir()).put(found.key, {
    "problem": problem.to_dict(), "fingerprint": found.fingerprint.to_dict(),
    "fingerprint_digest": found.fingerprint.digest(), "machine": found.fingerprint.machine_digest(),
    "winner": {"uid": "triton::mm_swap_ab", "params": params, "ms": 0.0116, "tflops": 2.9},
    "candidates": [{"uid": "triton::mm_swap_ab", "params": params, "status": "ok", "ms": 0.0116}],
    "tuned_at": "2026-12-01T00:00:00+00:00"})
"""


def test_gpu_hit_needs_only_the_driver(cache_dir):
    """On a GPU the fingerprint comes from the driver's answers (cuda_probe): a hit there
    imports no torch either (the driver is stood in for: this machine has none)."""
    args = ["mm", "--device", "cuda", "--m", "1", "--n", "4096", "--k", "4096", "--dtype", "bfloat16",
            "--layout", "nt", "--json"]
    report, out, err = run_probe(args, cache_dir, setup=FAKE_GPU)
    assert report == {"rc": 0, "imported": [], "children": 0, "forkserver": None}
    doc = json.loads(out)
    assert doc["from_cache"] is True and doc["winner"]["uid"] == "triton::mm_swap_ab"
    assert doc["fingerprint"]["device_name"] == "NVIDIA H200" and "cached: mm 1x4096x4096" in err
