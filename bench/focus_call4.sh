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
tests_beside_probe 0 1 170 120
suite_halves "${SUITE0:-decode}" "${SUITE1:-lm_head,odd}" "${SUITE_S:-240}"
if [ "${MULTI:-1}" = 1 ]; then
  timeout 110 python3 bench/gpu_multi.py 2>&1 | grep -v "$quiet" > "$OUT/multi_cold.log"
  if [ "${CONTROL:-1}" = 1 ]; then
    timeout 110 python3 bench/gpu_multi.py --one-gpu-compile-workers 16 --label control16 2>&1 \
      | grep -v "$quiet" > "$OUT/multi_control16.log"
  fi
fi
echo "== summary"
summary_tests_probe_halves
grep -hE "^--gpus|speed-up|stages" "$OUT"/multi_*.log
