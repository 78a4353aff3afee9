#!/usr/bin/env bash
# A device call on the 2-GPU host (carry .whl): bytecode written once (device_env.sh); the GPU
# tests on GPU 1 beside bench/decode_roofline.py on GPU 0; the two-GPU comparison (cold
# caches, then the one-GPU run again fully cached: the command's fixed cost); the kernel suite
# in two halves at once (the pick's margin at 3%).
#   bash bench/focus_call11.sh
set -uo pipefail
. bench/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
( time warm_bytecode ) 2> "$OUT/bytecode.log"
CUDA_VISIBLE_DEVICES=1 timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests > "$OUT/pytest_gpu.log" 2>&1 &
CUDA_VISIBLE_DEVICES=0 timeout 140 python3 bench/decode_roofline.py > "$OUT/decode_roofline.log" 2>&1
wait
timeout 100 python3 bench/gpu_multi.py 2>&1 | grep -v "$quiet" > "$OUT/multi_cold.log"
suite_halves ${SUITE0:-prefill,decode,tf32} ${SUITE1:-odd,lm_head,bmm,addmm,square} ${SUITE_S:-230}
pack_suite_logs
echo "== summary"
cat "$OUT/bytecode.log"
tail -3 "$OUT/pytest_gpu.log"
summary_halves
drop_packed_logs
grep -E "^==|best matmul" "$OUT/decode_roofline.log"
grep -hE "^--gpus|speed-up|stages" "$OUT"/multi_cold.log | cut -c1-420
