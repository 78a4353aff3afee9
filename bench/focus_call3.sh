#!/usr/bin/env bash
# Two bounded device calls on the 2-GPU host (carry .whl), logs under $OUT, a summary last:
#   bash bench/focus_call3.sh suite   the whole kernel suite on GPU 1 while the GPU tests run on GPU 0
#   bash bench/focus_call3.sh multi   the two-GPU comparison, cold and warm Triton cache
set -uo pipefail
. bench/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
case "${1:-suite}" in
  suite)
    CUDA_VISIBLE_DEVICES=1 timeout 520 python3 bench/gpu_llm_suite.py ${SUITE_ONLY:+--only "$SUITE_ONLY"} 2>&1 \
      | grep -v "$quiet" > "$OUT/suite.log" &
    suite=$!
    CUDA_VISIBLE_DEVICES=0 timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests > "$OUT/pytest_gpu.log" 2>&1
    echo "gpu tests rc=$?"
    wait $suite
    echo "== summary"
    tail -1 "$OUT/pytest_gpu.log"
    grep -E "^done|^geomean" "$OUT/suite.log"; grep -A14 "^shape " "$OUT/suite.log" | tail -15
    ;;
  multi)
    timeout 110 python3 bench/gpu_multi.py 2>&1 | grep -v "$quiet" > "$OUT/multi_cold.log"
    timeout 150 python3 bench/gpu_multi.py --triton-cache warm 2>&1 | grep -v "$quiet" > "$OUT/multi_warm.log"
    echo "== summary"
    for f in "$OUT"/multi_*.log; do grep -E "^--gpus|speed-up|stages|unmeasured" "$f"; done
    ;;
esac
