#!/usr/bin/env bash
# A device call on the 2-GPU host (carry .whl): bytecode written once (device_env.sh);
# bench/decode_roofline.py on GPU 0 beside the GPU tests on GPU 1; where the main thread of a
# one-GPU `autotune model` spends its first 4 s (bench/startup_profile.py); the two-GPU
# comparison; the kernel suite in two halves at once (the pick's re-time in alternating passes).
#   bash bench/focus_call12.sh
set -uo pipefail
. bench/device_env.sh
( time warm_bytecode ) 2> "$OUT/bytecode.log"
CUDA_VISIBLE_DEVICES=1 timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests > "$OUT/pytest_gpu.log" 2>&1 &
CUDA_VISIBLE_DEVICES=0 timeout 140 python3 bench/decode_roofline.py > "$OUT/decode_roofline.log" 2>&1
CUDA_VISIBLE_DEVICES=0 timeout 60 python3 bench/startup_profile.py --gpus 1 --seconds 4 > "$OUT/startup_profile.log" 2>&1
wait
timeout 100 python3 bench/gpu_multi.py 2>&1 | grep -v "$quiet" > "$OUT/multi_cold.log"
suite_halves ${SUITE0:-prefill,decode,tf32} ${SUITE1:-odd,lm_head,bmm,addmm,square} ${SUITE_S:-230}
pack_suite_logs startup_profile.log
echo "== summary"
cat "$OUT/bytecode.log"
tail -2 "$OUT/pytest_gpu.log"
summary_halves
drop_packed_logs
grep -E "^==|best matmul|left out" "$OUT/decode_roofline.log"
grep -hE "^--gpus|speed-up|stages" "$OUT"/multi_cold.log | cut -c1-420
