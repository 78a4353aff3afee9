#!/usr/bin/env bash
# One bounded device call on the 2-GPU host (carry .whl), logs under $OUT, a summary last:
# GPU tests on GPU 0 beside the lm_head probe on GPU 1; then suite shapes split over the two
# GPUs (SUITE0 on GPU 0, SUITE1 on GPU 1, at once); then the two-GPU comparison with a cold
# Triton cache (default pools), and its control (the one-GPU run given the two-GPU run's pool
# of 16; CONTROL=0 leaves it out), unless MULTI=0.        bash bench/focus_call4.sh
# The whole suite: SUITE0=prefill,decode SUITE1=odd,lm_head,bmm,addmm,square,tf32 SUITE_S=330
set -uo pipefail
. bench/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
CUDA_VISIBLE_DEVICES=0 timeout 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests > "$OUT/pytest_gpu.log" 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 120 python3 bench/lm_head_probe.py > "$OUT/lm_head_probe.log" 2>&1
wait
mkdir -p "$OUT/suite0" "$OUT/suite1"
OUT=$OUT/suite0 CUDA_VISIBLE_DEVICES=0 timeout ${SUITE_S:-240} python3 bench/gpu_llm_suite.py --only "${SUITE0:-decode}" 2>&1 \
  | grep -v "$quiet" > "$OUT/suite0.log" &
OUT=$OUT/suite1 CUDA_VISIBLE_DEVICES=1 timeout ${SUITE_S:-240} python3 bench/gpu_llm_suite.py --only "${SUITE1:-lm_head,odd}" 2>&1 \
  | grep -v "$quiet" > "$OUT/suite1.log" &
wait
if [ "${MULTI:-1}" = 1 ]; then
  timeout 110 python3 bench/gpu_multi.py 2>&1 | grep -v "$quiet" > "$OUT/multi_cold.log"
  if [ "${CONTROL:-1}" = 1 ]; then
    timeout 110 python3 bench/gpu_multi.py --one-gpu-compile-workers 16 --label control16 2>&1 \
      | grep -v "$quiet" > "$OUT/multi_control16.log"
  fi
fi
echo "== summary"
tail -3 "$OUT/pytest_gpu.log"
cat "$OUT/lm_head_probe.log"
for half in 0 1; do grep -E "^done|^geomean" "$OUT/suite$half.log"; grep -A8 "^shape " "$OUT/suite$half.log"; done
grep -hE "^--gpus|speed-up|stages" "$OUT"/multi_*.log
