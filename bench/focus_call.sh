#!/usr/bin/env bash
# One bounded device call for the open gaps: GPU tests, the two-GPU comparison (on a 2-GPU
# host), triton::mm_padded on lm_head-like shapes, the suite's hard shapes, an exhaustive tune
# of a decode shape and the engine benchmark. Logs under $OUT, a summary last.
#   bash bench/focus_call.sh            (carry .whl)
set -uo pipefail
. bench/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider tests > "$OUT/pytest_gpu.log" 2>&1; echo "gpu tests rc=$?"
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  timeout 110 python3 bench/gpu_multi.py 2>&1 | grep -v "$quiet" > "$OUT/multi.log"
fi
export CUDA_VISIBLE_DEVICES=0
timeout 60 python3 bench/padded_probe.py > "$OUT/padded_probe.log" 2>&1
timeout 120 python3 bench/gpu_llm_suite.py --only "${SUITE_ONLY:-lm_head,decode_16x4096x4096,odd}" 2>&1 | grep -v "$quiet" > "$OUT/suite.log"
AUTOTUNE_CACHE_DIR=$(mktemp -d) timeout 90 python3 -m autotune_cli mm --m 16 --n 4096 --k 4096 --dtype bfloat16 \
  --search exhaustive --json > "$OUT/decode_exhaustive.json" 2> "$OUT/decode_exhaustive.err"
timeout 150 python3 bench/gpu_engine.py --repeats 0 --skip-exhaustive 2>&1 | grep -v "$quiet" > "$OUT/engine.log"
echo "== summary"
grep -E "^[0-9]+ " "$OUT/padded_probe.log"
tail -1 "$OUT/pytest_gpu.log"
[ -f "$OUT/multi.log" ] && grep -E "^--gpus|speed-up|stages|pipeline" "$OUT/multi.log"
grep -A5 "^problem " "$OUT/engine.log"; grep -A5 "whole process" "$OUT/engine.log" | head -6
grep -E "^done|^geomean" "$OUT/suite.log"; grep -A6 "^shape " "$OUT/suite.log"
python3 - "$OUT/decode_exhaustive.json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as exc:
    print("decode exhaustive: no JSON", exc); raise SystemExit
ok = sorted((c for c in d["candidates"] if c["status"] == "ok"), key=lambda c: c["ms"])
print("decode 16x4096x4096 exhaustive: tune", d.get("tune_seconds"), "s; floor", round(16*4096*2*2/4.3e9*1e3 + 4096*4096*2/4.3e9*1e3, 5), "ms")
for c in ok[:6]:
    print("  ", c["uid"], c["ms"], {k: v for k, v in c["params"].items() if k not in ("ACC_TYPE", "ALLOW_TF32", "EVEN_K")})
PY
