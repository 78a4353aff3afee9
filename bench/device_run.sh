#!/usr/bin/env bash
# Run one benchmark on a GPU machine, from the repository root of a checkout:
#
#   bash bench/device_run.sh [--tests] SCRIPT [ARGS...]
#   bash bench/device_run.sh --tests bench/gpu_llm_suite.py --only decode
#
# --tests   run the GPU tests (pytest -m gpu) first; the benchmark runs either way.
# Wheels in .whl/ (for a machine without a package index) are installed under
# /tmp/site and put on PYTHONPATH after the checkout. Bytecode is kept under
# /tmp/pycache: an image that sets PYTHONDONTWRITEBYTECODE=1 would otherwise compile
# torch's sources in every process and add seconds to every timing of a whole command.
# Logs and the scripts' JSON go to $OUT (default bench_out/).
set -uo pipefail

tests=0
if [ "${1:-}" = --tests ]; then tests=1; shift; fi
if [ $# -lt 1 ]; then
  echo "usage: bash bench/device_run.sh [--tests] SCRIPT [ARGS...]" >&2
  exit 2
fi

if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/pycache
export OUT=${OUT:-bench_out}
mkdir -p "$OUT"

if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu \
    --format=csv,noheader | tee "$OUT/gpu.txt"
fi
status=0
if [ "$tests" = 1 ]; then
  python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 \
    | tee "$OUT/pytest_gpu.log" | tail -25
  status=${PIPESTATUS[0]}
fi
echo "=== $*"
python3 "$@" 2>&1 | tee "$OUT/bench.log"
bench=${PIPESTATUS[0]}
[ "$bench" -ne 0 ] && status=$bench
exit "$status"
