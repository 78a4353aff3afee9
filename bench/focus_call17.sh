#!/usr/bin/env bash
# A device call on the 2-GPU host (carry .whl): the tune's cuBLAS reading against the
# side-by-side's (bench/cublas_tune_vs_side.py) on GPU 0 alone, then again on GPU 0 while GPU 1
# runs the suite's odd and lm_head rows (Inductor's compiles load the host's cores), as the
# suite's two halves did.
#   bash bench/focus_call17.sh
set -uo pipefail
. bench/device_env.sh
warm_bytecode
CUDA_VISIBLE_DEVICES=0 timeout 150 python3 bench/cublas_tune_vs_side.py --label alone 2>&1 | grep -v "$quiet" > "$OUT/alone.log"
mkdir -p "$OUT/suite1"
OUT=$OUT/suite1 CUDA_VISIBLE_DEVICES=1 timeout 150 python3 bench/gpu_llm_suite.py --only odd,lm_head 2>&1 | grep -v "$quiet" > "$OUT/suite1.log" &
sleep 5
CUDA_VISIBLE_DEVICES=0 timeout 150 python3 bench/cublas_tune_vs_side.py --label beside 2>&1 | grep -v "$quiet" > "$OUT/beside.log"
wait
echo "== alone"; grep " rep " "$OUT/alone.log"
echo "== beside the suite's odd and lm_head on GPU 1"; grep " rep " "$OUT/beside.log"
grep -E "^done|^odd|^lm_head" "$OUT/suite1.log"
tail -3 "$OUT/alone.log" "$OUT/beside.log" | grep -i error
