#!/usr/bin/env bash
# A device call on the 2-GPU host (carry .whl): bytecode written once (device_env.sh); the GPU
# tests on GPU 0 beside the decode kernel variants on GPU 1; the lm_head copy hidden under the
# GEMM (bench/lm_head_overlap.py) on GPU 0; then the two-GPU comparison at 8 problems twice
# (the command's process reads the GPUs from the driver now, without importing torch).
#   bash bench/focus_call14.sh
set -uo pipefail
. bench/device_env.sh
( time warm_bytecode ) 2> "$OUT/bytecode.log"
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests > "$OUT/pytest_gpu.log" 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 230 python3 bench/decode_variants.py > "$OUT/decode_variants.log" 2>&1
wait
CUDA_VISIBLE_DEVICES=0 timeout 170 python3 bench/lm_head_overlap.py 2>&1 | grep -v "$quiet" > "$OUT/lm_head_overlap.log"
timeout 100 python3 bench/gpu_multi.py 2>&1 | grep -v "$quiet" > "$OUT/multi_p8.log"
timeout 100 python3 bench/gpu_multi.py --label again 2>&1 | grep -v "$quiet" > "$OUT/multi_p8b.log"
tar czf "$OUT/logs.tgz" -C "$OUT" pytest_gpu.log decode_variants.log lm_head_overlap.log multi_p8.log multi_p8b.log
echo "== summary"
cat "$OUT/bytecode.log"
tail -3 "$OUT/pytest_gpu.log"
tail -25 "$OUT/decode_variants.log"
tail -30 "$OUT/lm_head_overlap.log"
grep -hE "^--gpus|speed-up|stages|probed" "$OUT"/multi_p8.log "$OUT"/multi_p8b.log | cut -c1-420
