#!/usr/bin/env bash
# A device call on the 2-GPU host (carry .whl): bench/lm_head_buffers.py (where lm_head's
# buffers come from), then the two-GPU comparison at 8 and 16 problems on the final code.
#   bash bench/focus_call27.sh
set -uo pipefail
. bench/device_env.sh
warm_bytecode
CUDA_VISIBLE_DEVICES=0 timeout 150 python3 bench/lm_head_buffers.py > "$OUT/lm_head_buffers.log" 2>&1
timeout 110 python3 bench/gpu_multi.py 2>&1 | grep -v "$quiet" > "$OUT/multi_p8.log"
timeout 140 python3 bench/gpu_multi.py --problems 16 --label p16 2>&1 | grep -v "$quiet" > "$OUT/multi_p16.log"
tar czf "$OUT/logs.tgz" -C "$OUT" lm_head_buffers.log multi_p8.log multi_p16.log
echo "== summary"
grep -E "relative error| ms  \(passes|^== |^  " "$OUT/lm_head_buffers.log" | grep -v "warn" | cut -c1-150
grep -hE "^--gpus|speed-up" "$OUT"/multi_p8.log "$OUT"/multi_p16.log | cut -c1-300
rm -f "$OUT"/lm_head_buffers.log "$OUT"/multi_p8.log "$OUT"/multi_p16.log
