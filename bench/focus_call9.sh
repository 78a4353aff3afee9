#!/usr/bin/env bash
# The session's last device call on the 2-GPU host (carry .whl): bytecode written once (see
# device_env.sh); GPU tests on GPU 1 beside the lm_head probe on GPU 0; the two-GPU comparison
# (cold autotune and Triton caches); the kernel suite in two halves at once.
#   bash bench/focus_call9.sh
set -uo pipefail
. bench/device_env.sh
nvidia-smi --query-gpu=name,driver_version,persistence_mode,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
( time warm_bytecode ) 2> "$OUT/bytecode.log"
tests_beside_probe 1 0 150 120
timeout 100 python3 bench/gpu_multi.py 2>&1 | grep -v "$quiet" > "$OUT/multi_cold.log"
suite_halves ${SUITE0:-prefill,decode,tf32} ${SUITE1:-odd,lm_head,bmm,addmm,square} ${SUITE_S:-230}
pack_suite_logs
echo "== summary"
cat "$OUT/bytecode.log"
summary_tests_probe_halves
drop_packed_logs
grep -hE "^--gpus|speed-up|stages" "$OUT"/multi_cold.log | cut -c1-420
