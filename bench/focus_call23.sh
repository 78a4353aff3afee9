#!/usr/bin/env bash
# A device call on the 2-GPU host (carry .whl): the two-GPU comparison at 8 problems (twice)
# and 16, with kernels that several devices wait for compiled first.
#   bash bench/focus_call23.sh
set -uo pipefail
. bench/device_env.sh
warm_bytecode
timeout 110 python3 bench/gpu_multi.py 2>&1 | grep -v "$quiet" > "$OUT/multi_p8.log"
timeout 110 python3 bench/gpu_multi.py --label b 2>&1 | grep -v "$quiet" > "$OUT/multi_p8b.log"
timeout 140 python3 bench/gpu_multi.py --problems 16 --label p16 2>&1 | grep -v "$quiet" > "$OUT/multi_p16.log"
tar czf "$OUT/logs.tgz" -C "$OUT" multi_p8.log multi_p8b.log multi_p16.log
echo "== summary"
grep -hE "^--gpus|speed-up" "$OUT"/multi_p8.log "$OUT"/multi_p8b.log "$OUT"/multi_p16.log | cut -c1-300
rm -f "$OUT"/multi_p8.log "$OUT"/multi_p8b.log "$OUT"/multi_p16.log
