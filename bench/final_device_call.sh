#!/usr/bin/env bash
# The last device call of a session: GPU tests, API overhead, the LLM suite; each bounded.
set -uo pipefail
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:-bench_out}; mkdir -p "$OUT"
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests > "$OUT/pytest_gpu.log" 2>&1; echo "gpu tests rc=$?"; tail -4 "$OUT/pytest_gpu.log"
timeout 60 python3 bench/api_overhead.py > "$OUT/api_overhead.log" 2>&1; echo "api rc=$?"; tail -6 "$OUT/api_overhead.log"
timeout 290 python3 bench/gpu_llm_suite.py 2>&1 | tee "$OUT/suite.log" | tail -16
