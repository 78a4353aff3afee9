#!/usr/bin/env bash
# One device call: install carried wheels, run GPU tests, then the benchmarks named in $@.
# Usage on the device:  bash bench/device_run.sh "bench/gpu_suite.py" ...
set -uo pipefail
. bench/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest_gpu.log" | tail -25
fi
for script in "$@"; do
  echo "=== $script"
  python3 $script 2>&1 | tee -a "$OUT/bench.log"
done
