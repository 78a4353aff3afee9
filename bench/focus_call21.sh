#!/usr/bin/env bash
# A device call on the 2-GPU host (carry .whl): bench/odd_kernels.py (B's copy three ways, by
# the profiler and the PTX) on GPU 0 beside the suite's odd, bmm and tf32 rows on GPU 1 (the
# contiguous-run copy without masks on full blocks); then the two-GPU comparison at 8 and 16
# problems.
#   bash bench/focus_call21.sh
set -uo pipefail
. bench/device_env.sh
warm_bytecode
mkdir -p "$OUT/suite1"
CUDA_VISIBLE_DEVICES=0 timeout 150 python3 bench/odd_kernels.py > "$OUT/odd_kernels.log" 2>&1 &
OUT=$OUT/suite1 CUDA_VISIBLE_DEVICES=1 timeout 150 python3 bench/gpu_llm_suite.py --only ${SUITE1:-odd,bmm,tf32} 2>&1 \
  | grep -v "$quiet" > "$OUT/suite1.log"
wait
timeout 110 python3 bench/gpu_multi.py 2>&1 | grep -v "$quiet" > "$OUT/multi_p8.log"
timeout 130 python3 bench/gpu_multi.py --problems 16 --label p16 2>&1 | grep -v "$quiet" > "$OUT/multi_p16.log"
tar czf "$OUT/logs.tgz" -C "$OUT" suite1 suite1.log odd_kernels.log multi_p8.log multi_p16.log && rm -rf "$OUT/suite1"
echo "== summary"
grep -E "PTX|exact|events|^== |^  " "$OUT/odd_kernels.log" | grep -v "^  \(void\|std\)" | cut -c1-150 | head -60
grep -E "^done|^geomean" "$OUT/suite1.log"; grep -A4 "^shape " "$OUT/suite1.log"
grep -hE "^--gpus|speed-up|stages" "$OUT"/multi_p8.log "$OUT"/multi_p16.log | cut -c1-420
rm -f "$OUT/suite1.log" "$OUT/odd_kernels.log" "$OUT/multi_p8.log" "$OUT/multi_p16.log"
