#!/usr/bin/env bash
# One bounded device call on the 2-GPU host (carry .whl), logs under $OUT, a summary last:
# the GPU tests, then the kernel suite split over the two GPUs (one half each, at once), then
# the two-GPU comparison with a cold Triton cache.   bash bench/focus_call3.sh
set -uo pipefail
. bench/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
CUDA_VISIBLE_DEVICES=0 timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests > "$OUT/pytest_gpu.log" 2>&1
echo "gpu tests rc=$?"
mkdir -p "$OUT/suite0" "$OUT/suite1"
OUT=$OUT/suite0 CUDA_VISIBLE_DEVICES=0 timeout 300 python3 bench/gpu_llm_suite.py --only "${HALF0:-prefill,decode}" 2>&1 \
  | grep -v "$quiet" > "$OUT/suite0.log" &
OUT=$OUT/suite1 CUDA_VISIBLE_DEVICES=1 timeout 300 python3 bench/gpu_llm_suite.py --only "${HALF1:-odd,lm_head,bmm,addmm,square,tf32}" 2>&1 \
  | grep -v "$quiet" > "$OUT/suite1.log" &
wait
timeout 110 python3 bench/gpu_multi.py 2>&1 | grep -v "$quiet" > "$OUT/multi_cold.log"
echo "== summary"
tail -1 "$OUT/pytest_gpu.log"
for half in 0 1; do grep -E "^done|^geomean" "$OUT/suite$half.log"; grep -A8 "^shape " "$OUT/suite$half.log" | tail -9; done
grep -E "^--gpus|speed-up|stages" "$OUT/multi_cold.log"
