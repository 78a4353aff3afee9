#!/usr/bin/env bash
# The session's first device call on the 2-GPU host (carry .whl): GPU tests on GPU 1 beside
# the lm_head probe on GPU 0; where `autotune model`'s first seconds go (cProfile); the kernel
# suite in two halves at once; the two-GPU comparison (cold caches).
#   bash bench/focus_call7.sh
set -uo pipefail
. bench/device_env.sh
nvidia-smi --query-gpu=name,driver_version,persistence_mode,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
tests_beside_probe 1 0 150 120
timeout 90 python3 bench/startup_profile.py > "$OUT/startup_profile.log" 2>&1
suite_halves ${SUITE0:-prefill,decode} ${SUITE1:-odd,lm_head,bmm,addmm,square,tf32} ${SUITE_S:-220}
timeout 100 python3 bench/gpu_multi.py 2>&1 | grep -v "$quiet" > "$OUT/multi_cold.log"
echo "== summary"
summary_tests_probe_halves
grep -E "^==|model ->" "$OUT/startup_profile.log"
grep -hE "^--gpus|speed-up|stages" "$OUT"/multi_cold.log | cut -c1-400
grep -ohE "'compile_pool': \{[^}]*\}\}" "$OUT"/multi_cold.log | sort | uniq -c
