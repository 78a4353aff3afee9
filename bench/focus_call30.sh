#!/usr/bin/env bash
# A device call on the 2-GPU host (carry .whl), 2026-11-30 (session 10): the GPU tests on GPU
# 0 beside bench/lm_head_pitch.py on GPU 1; the two-GPU comparison at 8 problems with the
# timing process's Triton warm-up (bench/triton_warmup.py) off, then on; then the kernel
# suite in two halves at once.
#   bash bench/focus_call30.sh
set -uo pipefail
. bench/device_env.sh
warm_bytecode
CUDA_VISIBLE_DEVICES=0 timeout 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests > "$OUT/pytest_gpu.log" 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 150 python3 bench/lm_head_pitch.py > "$OUT/lm_head_pitch.log" 2>&1
wait
AUTOTUNE_WARM_TRITON=0 timeout 100 python3 bench/gpu_multi.py --label nowarm 2>&1 | grep -v "$quiet" > "$OUT/multi_nowarm.log"
timeout 100 python3 bench/gpu_multi.py --label warm 2>&1 | grep -v "$quiet" > "$OUT/multi_warm.log"
suite_halves ${SUITE0:-prefill,decode,tf32} ${SUITE1:-odd,lm_head,bmm,addmm,square} ${SUITE_S:-200}
pack_suite_logs lm_head_pitch.log multi_nowarm.log multi_warm.log
echo "== summary"
tail -3 "$OUT/pytest_gpu.log"
grep -E "relative error| ms  \(passes|^== |^  " "$OUT/lm_head_pitch.log" | grep -v "warn" | cut -c1-150
grep -hE "^--gpus|speed-up|first problem" "$OUT"/multi_nowarm.log "$OUT"/multi_warm.log | cut -c1-700
summary_halves
drop_packed_logs
rm -f "$OUT"/lm_head_pitch.log "$OUT"/multi_nowarm.log "$OUT"/multi_warm.log
