#!/usr/bin/env bash
# The session's last device call on the 2-GPU host (carry .whl): GPU tests on GPU 0 beside
# the lm_head probe on GPU 1; then the whole suite split over the two GPUs (six shapes each,
# at once); then where a command's first seconds go (bench/startup_trace.py).
#   bash bench/focus_call6.sh
set -uo pipefail
. bench/device_env.sh
nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv,noheader | tee "$OUT/gpu.txt"
CUDA_VISIBLE_DEVICES=0 timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests > "$OUT/pytest_gpu.log" 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 100 python3 bench/lm_head_probe.py > "$OUT/lm_head_probe.log" 2>&1
wait
mkdir -p "$OUT/suite0" "$OUT/suite1"
OUT=$OUT/suite0 CUDA_VISIBLE_DEVICES=0 timeout 230 python3 bench/gpu_llm_suite.py --only prefill,decode 2>&1 \
  | grep -v "$quiet" > "$OUT/suite0.log" &
OUT=$OUT/suite1 CUDA_VISIBLE_DEVICES=1 timeout 230 python3 bench/gpu_llm_suite.py --only odd,lm_head,bmm,addmm,square,tf32 2>&1 \
  | grep -v "$quiet" > "$OUT/suite1.log" &
wait
timeout 45 python3 bench/startup_trace.py > "$OUT/startup_trace.log" 2>&1
echo "== summary"
tail -3 "$OUT/pytest_gpu.log"
cat "$OUT/lm_head_probe.log"
for half in 0 1; do grep -E "^done|^geomean" "$OUT/suite$half.log"; grep -A7 "^shape " "$OUT/suite$half.log"; done
cat "$OUT/startup_trace.log"
