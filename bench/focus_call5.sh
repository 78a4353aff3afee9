#!/usr/bin/env bash
# The session's last device call on the 2-GPU host (carry .whl): GPU tests on GPU 1 beside
# the lm_head probe on GPU 0; then the whole kernel suite on GPU 0 alone (no other work on
# the host: its side-by-side timings are the ones reported); then the two-GPU comparison
# (cold Triton cache).        bash bench/focus_call5.sh
set -uo pipefail
. bench/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
tests_beside_probe 1 0 150 120
mkdir -p "$OUT/suite"
OUT=$OUT/suite CUDA_VISIBLE_DEVICES=0 timeout ${SUITE_S:-370} python3 bench/gpu_llm_suite.py 2>&1 | grep -v "$quiet" > "$OUT/suite.log"
timeout 110 python3 bench/gpu_multi.py 2>&1 | grep -v "$quiet" > "$OUT/multi_cold.log"
echo "== summary"
tail -3 "$OUT/pytest_gpu.log"
cat "$OUT/lm_head_probe.log"
grep -E "^done|^geomean" "$OUT/suite.log"; grep -A13 "^shape " "$OUT/suite.log"
grep -hE "^--gpus|speed-up|stages" "$OUT"/multi_*.log
