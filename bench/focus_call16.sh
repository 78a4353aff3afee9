#!/usr/bin/env bash
# A device call on the 2-GPU host (carry .whl): bytecode written once (device_env.sh); the GPU
# tests; the kernel suite in two halves at once (triton::mm_swap_ab among the templates, the
# row copy in row order); the two-GPU comparison at 8 and 16 problems (the GPUs read from the
# driver, the problems with the most candidates first).
#   bash bench/focus_call16.sh
set -uo pipefail
. bench/device_env.sh
( time warm_bytecode ) 2> "$OUT/bytecode.log"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests > "$OUT/pytest_gpu.log" 2>&1
suite_halves ${SUITE0:-prefill,decode,tf32} ${SUITE1:-odd,lm_head,bmm,addmm,square} ${SUITE_S:-230}
timeout 100 python3 bench/gpu_multi.py 2>&1 | grep -v "$quiet" > "$OUT/multi_p8.log"
timeout 120 python3 bench/gpu_multi.py --problems 16 --label p16 2>&1 | grep -v "$quiet" > "$OUT/multi_p16.log"
pack_suite_logs multi_p8.log multi_p16.log
echo "== summary"
cat "$OUT/bytecode.log"
tail -2 "$OUT/pytest_gpu.log"
summary_halves
drop_packed_logs
grep -hE "^--gpus|speed-up|stages" "$OUT"/multi_p8.log "$OUT"/multi_p16.log | cut -c1-420
rm -f "$OUT/multi_p8.log" "$OUT/multi_p16.log"
