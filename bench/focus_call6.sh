#!/usr/bin/env bash
# The session's last device call on the 2-GPU host (carry .whl): GPU tests on GPU 0 beside
# the lm_head probe on GPU 1; then the whole suite split over the two GPUs (six shapes each,
# at once); then where a command's first seconds go (bench/startup_trace.py).
#   bash bench/focus_call6.sh
set -uo pipefail
. bench/device_env.sh
nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv,noheader | tee "$OUT/gpu.txt"
tests_beside_probe 0 1 120 100
suite_halves prefill,decode odd,lm_head,bmm,addmm,square,tf32 230
timeout 45 python3 bench/startup_trace.py > "$OUT/startup_trace.log" 2>&1
echo "== summary"
summary_tests_probe_halves
cat "$OUT/startup_trace.log"
