#!/usr/bin/env bash
# Every GPU measurement of issues 6-8 in one device call, each bounded, logs under $OUT and a
# short summary last. On a 2-GPU host it also runs the two-GPU comparison (issue 8).
#   bash bench/final_device_call.sh            (carry .whl; under 10 minutes: the suite may be cut, its JSON keeps the shapes done)
set -uo pipefail
. bench/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider tests > "$OUT/pytest_gpu.log" 2>&1; echo "gpu tests rc=$?"
gpus=$(nvidia-smi -L | wc -l)
if [ "$gpus" -ge 2 ]; then
  timeout 100 python3 bench/gpu_multi.py 2>&1 | grep -v "$quiet" > "$OUT/multi.log"
fi
CUDA_VISIBLE_DEVICES=0 timeout 170 python3 bench/gpu_engine.py --repeats 1 2>&1 | grep -v "$quiet" > "$OUT/engine.log"
CUDA_VISIBLE_DEVICES=0 timeout 220 python3 bench/gpu_llm_suite.py 2>&1 | grep -v "$quiet" > "$OUT/suite.log"
echo "== summary"
tail -3 "$OUT/pytest_gpu.log"
[ -f "$OUT/multi.log" ] && grep -E "^--gpus|speed-up|stages" "$OUT/multi.log"
grep -A5 "^problem " "$OUT/engine.log"; grep -A5 "whole process" "$OUT/engine.log"; grep "^exhaustive" "$OUT/engine.log" | tail -1
grep -A14 "^shape " "$OUT/suite.log"; grep "^geomean" "$OUT/suite.log"
