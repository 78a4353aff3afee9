#!/usr/bin/env bash
# The session's last device call on the 2-GPU host (carry .whl): the GPU tests, then the
# whole kernel suite in two halves at once, on the final code.
#   bash bench/focus_call24.sh
set -uo pipefail
. bench/device_env.sh
( time warm_bytecode ) 2> "$OUT/bytecode.log"
timeout 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests > "$OUT/pytest_gpu.log" 2>&1
suite_halves ${SUITE0:-prefill,decode,tf32} ${SUITE1:-odd,lm_head,bmm,addmm,square} ${SUITE_S:-230}
pack_suite_logs
echo "== summary"
tail -3 "$OUT/pytest_gpu.log"
summary_halves
drop_packed_logs
