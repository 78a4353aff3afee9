#!/usr/bin/env bash
# A device call on the 2-GPU host (carry .whl), 2026-11-30 (session 10): the GPU tests, then
# the two-GPU comparison at 8 problems twice and at 16 on a cold Triton cache, with a GPU whose
# problems are done lending its timing worker to the other's first round (scale.py). LABEL
# (default lend) names the runs' JSON files (focus_call34.sh: final).
#   bash bench/focus_call33.sh
set -uo pipefail
. bench/device_env.sh
warm_bytecode
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests > "$OUT/pytest_gpu.log" 2>&1
timeout 100 python3 bench/gpu_multi.py --label ${LABEL:-lend} 2>&1 | grep -v "$quiet" > "$OUT/multi_p8.log"
timeout 100 python3 bench/gpu_multi.py --label ${LABEL:-lend}_b 2>&1 | grep -v "$quiet" > "$OUT/multi_p8b.log"
timeout 130 python3 bench/gpu_multi.py --problems 16 --label ${LABEL:-lend}_p16 2>&1 | grep -v "$quiet" > "$OUT/multi_p16.log"
tar czf "$OUT/logs.tgz" -C "$OUT" pytest_gpu.log multi_p8.log multi_p8b.log multi_p16.log
echo "== summary"
tail -3 "$OUT/pytest_gpu.log"
grep -hE "^--gpus|speed-up|same winner: False" "$OUT"/multi_p8.log "$OUT"/multi_p8b.log "$OUT"/multi_p16.log | cut -c1-300
grep -hoE "'problem': [0-9]+, 'tune_s': [0-9.]+|'measured_by_another_gpu': [0-9]+" "$OUT"/multi_p8.log | paste - - | tail -8
rm -f "$OUT"/pytest_gpu.log "$OUT"/multi_p8.log "$OUT"/multi_p8b.log "$OUT"/multi_p16.log
