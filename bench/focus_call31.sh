#!/usr/bin/env bash
# A device call on the 2-GPU host (carry .whl), 2026-11-30 (session 10): where a timing
# process's first Triton launch spends its time (bench/triton_first_launch.py), then the GPU
# tests, on GPU 0, beside the suite's odd and lm_head rows (aten::mm_aligned's PAD_BYTES
# widths) on GPU 1; then the two-GPU comparison at 8 problems twice and at 16, with the
# compile-free warm-up (the default, AUTOTUNE_WARM_TRITON=steps).
#   bash bench/focus_call31.sh
set -uo pipefail
. bench/device_env.sh
warm_bytecode
mkdir -p "$OUT/suite1"
( CUDA_VISIBLE_DEVICES=0 timeout 100 python3 bench/triton_first_launch.py > "$OUT/first_launch.log" 2>&1
  CUDA_VISIBLE_DEVICES=0 timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests > "$OUT/pytest_gpu.log" 2>&1 ) &
OUT=$OUT/suite1 CUDA_VISIBLE_DEVICES=1 timeout 240 python3 bench/gpu_llm_suite.py --only odd,lm_head 2>&1 \
  | grep -v "$quiet" > "$OUT/suite1.log"
wait
timeout 100 python3 bench/gpu_multi.py --label steps 2>&1 | grep -v "$quiet" > "$OUT/multi_p8.log"
timeout 100 python3 bench/gpu_multi.py --label steps_b 2>&1 | grep -v "$quiet" > "$OUT/multi_p8b.log"
timeout 130 python3 bench/gpu_multi.py --problems 16 --label steps_p16 2>&1 | grep -v "$quiet" > "$OUT/multi_p16.log"
tar czf "$OUT/logs.tgz" -C "$OUT" suite1 suite1.log pytest_gpu.log first_launch.log multi_p8.log multi_p8b.log multi_p16.log
rm -rf "$OUT/suite1"
echo "== summary"
tail -3 "$OUT/pytest_gpu.log"
grep -vE "^\s*$" "$OUT/first_launch.log" | cut -c1-160 | head -70
grep -E "^done|^geomean" "$OUT/suite1.log"; grep -A3 "^shape " "$OUT/suite1.log"
grep -hE "^--gpus|speed-up|first problem" "$OUT"/multi_p8.log "$OUT"/multi_p8b.log "$OUT"/multi_p16.log | cut -c1-600
rm -f "$OUT"/suite1.log "$OUT"/pytest_gpu.log "$OUT"/first_launch.log "$OUT"/multi_p8.log "$OUT"/multi_p8b.log "$OUT"/multi_p16.log
