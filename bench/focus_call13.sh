#!/usr/bin/env bash
# A device call on the 2-GPU host (carry .whl): bytecode written once (device_env.sh); the GPU
# tests; the two-GPU comparison at 8 and 16 problems (the command now stops its forkserver
# before it exits); the kernel suite in two halves at once (a second run of the pick's re-time
# in alternating passes).
#   bash bench/focus_call13.sh
set -uo pipefail
. bench/device_env.sh
( time warm_bytecode ) 2> "$OUT/bytecode.log"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests > "$OUT/pytest_gpu.log" 2>&1
timeout 100 python3 bench/gpu_multi.py 2>&1 | grep -v "$quiet" > "$OUT/multi_p8.log"
timeout 120 python3 bench/gpu_multi.py --problems 16 --label p16 2>&1 | grep -v "$quiet" > "$OUT/multi_p16.log"
suite_halves ${SUITE0:-prefill,decode,tf32} ${SUITE1:-odd,lm_head,bmm,addmm,square} ${SUITE_S:-230}
pack_suite_logs
echo "== summary"
cat "$OUT/bytecode.log"
tail -2 "$OUT/pytest_gpu.log"
summary_halves
drop_packed_logs
grep -hE "^--gpus|speed-up|stages" "$OUT"/multi_p8.log "$OUT"/multi_p16.log | cut -c1-420
