#!/usr/bin/env bash
# A device call on the 2-GPU host (carry .whl): bytecode written once (device_env.sh); the GPU
# tests beside bench/bmm_probe.py (GPU 1); then the whole kernel suite in two halves at once,
# on the code with the contiguous-run copy (odd's B).
#   bash bench/focus_call20.sh
set -uo pipefail
. bench/device_env.sh
( time warm_bytecode ) 2> "$OUT/bytecode.log"
timeout 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests > "$OUT/pytest_gpu.log" 2>&1 &
CUDA_VISIBLE_DEVICES=1 OUT=$OUT timeout 170 python3 bench/bmm_probe.py 2>&1 | grep -v "$quiet" > "$OUT/bmm_probe.log"
wait
suite_halves ${SUITE0:-prefill,decode,tf32} ${SUITE1:-odd,lm_head,bmm,addmm,square} ${SUITE_S:-230}
pack_suite_logs bmm_probe.log
echo "== summary"
cat "$OUT/bytecode.log"
tail -3 "$OUT/pytest_gpu.log"
grep -E "^exhaustive|^  [0-9]|^side|WRONG|x[0-9]" "$OUT/bmm_probe.log" | head -24
summary_halves
drop_packed_logs
