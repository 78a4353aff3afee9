#!/usr/bin/env bash
# A short device call on the 2-GPU host (carry .whl): bytecode written once; GPU tests on
# GPU 1 beside the lm_head probe on GPU 0 (the row copy's program order); the suite's two
# misaligned shapes with Inductor on GPU 0; the two-GPU comparison again.
#   bash bench/focus_call10.sh
set -uo pipefail
. bench/device_env.sh
warm_bytecode
tests_beside_probe 1 0 150 120
mkdir -p "$OUT/suite"
OUT=$OUT/suite CUDA_VISIBLE_DEVICES=0 timeout 150 python3 bench/gpu_llm_suite.py --only lm_head,odd 2>&1 | grep -v "$quiet" > "$OUT/suite.log"
timeout 80 python3 bench/gpu_multi.py 2>&1 | grep -v "$quiet" > "$OUT/multi_cold.log"
echo "== summary"
tail -3 "$OUT/pytest_gpu.log"
cat "$OUT/lm_head_probe.log"
grep -E "^done|^geomean" "$OUT/suite.log"; grep -A3 "^shape " "$OUT/suite.log"
grep -hE "^--gpus|speed-up|stages" "$OUT"/multi_cold.log | cut -c1-420
