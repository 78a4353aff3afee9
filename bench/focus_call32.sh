#!/usr/bin/env bash
# A device call on the 2-GPU host (carry .whl), 2026-11-30 (session 10): the warm-up's GPU
# test; the two-GPU comparison at 8 problems twice on a cold Triton cache and once on a
# warm one (kernels compiled before, the autotune cache empty), with Triton's hash of itself
# taken in the timing process's idle start (bench/triton_warmup.py); then the whole kernel
# suite in two halves at once, on the final code.
#   bash bench/focus_call32.sh
set -uo pipefail
. bench/device_env.sh
warm_bytecode
timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_worker.py > "$OUT/pytest_gpu.log" 2>&1
timeout 100 python3 bench/gpu_multi.py --label key 2>&1 | grep -v "$quiet" > "$OUT/multi_p8.log"
timeout 100 python3 bench/gpu_multi.py --label key_b 2>&1 | grep -v "$quiet" > "$OUT/multi_p8b.log"
timeout 110 python3 bench/gpu_multi.py --triton-cache warm --label key 2>&1 | grep -v "$quiet" > "$OUT/multi_warm.log"
suite_halves ${SUITE0:-prefill,decode,tf32} ${SUITE1:-odd,lm_head,bmm,addmm,square} ${SUITE_S:-200}
pack_suite_logs multi_p8.log multi_p8b.log multi_warm.log
echo "== summary"
tail -3 "$OUT/pytest_gpu.log"
grep -hE "^--gpus|speed-up|first problem|unmeasured" "$OUT"/multi_p8.log "$OUT"/multi_p8b.log "$OUT"/multi_warm.log | cut -c1-420
summary_halves
drop_packed_logs
rm -f "$OUT"/multi_p8.log "$OUT"/multi_p8b.log "$OUT"/multi_warm.log
