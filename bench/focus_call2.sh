#!/usr/bin/env bash
# One bounded device call (2-GPU host): GPU tests, the two-GPU comparison with a cold and a
# warm Triton cache, the suite's hard shapes (lm_head with the pitched output, decode, odd)
# and a decode probe over a wider config space (bench/decode_space.json). Logs under $OUT,
# a summary last.   bash bench/focus_call2.sh   (carry .whl)
set -uo pipefail
. bench/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests > "$OUT/pytest_gpu.log" 2>&1; echo "gpu tests rc=$?"
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  timeout 100 python3 bench/gpu_multi.py 2>&1 | grep -v "$quiet" > "$OUT/multi_cold.log"
  timeout 130 python3 bench/gpu_multi.py --triton-cache warm 2>&1 | grep -v "$quiet" > "$OUT/multi_warm.log"
fi
export CUDA_VISIBLE_DEVICES=0
timeout 140 python3 bench/gpu_llm_suite.py --only "${SUITE_ONLY:-lm_head,decode_16x4096x4096,odd}" 2>&1 | grep -v "$quiet" > "$OUT/suite.log"
AUTOTUNE_CACHE_DIR=$(mktemp -d) timeout 60 python3 -m autotune_cli mm --m 16 --n 4096 --k 4096 --dtype bfloat16 \
  --space bench/decode_space.json --templates triton::mm --json > "$OUT/decode_probe.json" 2> "$OUT/decode_probe.err"
echo "== summary"
tail -1 "$OUT/pytest_gpu.log"
for f in "$OUT"/multi_*.log; do [ -f "$f" ] && grep -E "^--gpus|speed-up|stages|unmeasured" "$f"; done
grep -E "^done|^geomean" "$OUT/suite.log"; grep -A6 "^shape " "$OUT/suite.log"
python3 - "$OUT/decode_probe.json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as exc:
    print("decode probe: no JSON", exc); raise SystemExit
ok = sorted((c for c in d["candidates"] if c["status"] == "ok"), key=lambda c: c["ms"])
floor_ms = (16 * 4096 * 2 * 2 + 4096 * 4096 * 2) / 4.3e12 * 1e3
print("decode 16x4096x4096 probe:", len(d["candidates"]), "candidates, tune", d.get("tune_seconds"), "s; floor", round(floor_ms, 5), "ms")
for c in ok[:6]:
    print("  ", c["uid"], round(c["ms"], 5), "x floor", round(c["ms"] / floor_ms, 3),
          {k: v for k, v in c["params"].items() if k not in ("ACC_TYPE", "ALLOW_TF32", "EVEN_K")})
PY
