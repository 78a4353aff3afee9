#!/usr/bin/env bash
# A device call on the 2-GPU host (carry .whl): the GPU tests on GPU 0 beside the lm_head copy
# order comparison (bench/lm_head_copy_order.py) on GPU 1; then the two-GPU comparison at 8
# problems twice (problems with the most candidates first; the driver's version on both paths).
#   bash bench/focus_call15.sh
set -uo pipefail
. bench/device_env.sh
( time warm_bytecode ) 2> "$OUT/bytecode.log"
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests > "$OUT/pytest_gpu.log" 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 200 python3 bench/lm_head_copy_order.py 2>&1 | grep -v "$quiet" > "$OUT/lm_head_copy_order.log"
wait
timeout 100 python3 bench/gpu_multi.py 2>&1 | grep -v "$quiet" > "$OUT/multi_p8.log"
timeout 100 python3 bench/gpu_multi.py --label again 2>&1 | grep -v "$quiet" > "$OUT/multi_p8b.log"
tar czf "$OUT/logs.tgz" -C "$OUT" pytest_gpu.log lm_head_copy_order.log multi_p8.log multi_p8b.log
echo "== summary"
tail -3 "$OUT/pytest_gpu.log"
grep -A12 "^variant" "$OUT/lm_head_copy_order.log"
grep -E "^==|nvjet|copy_tiles|_copy_rows|triton_poi" "$OUT/lm_head_copy_order.log"
grep -hE "^--gpus|speed-up|stages" "$OUT"/multi_p8.log "$OUT"/multi_p8b.log | cut -c1-420
