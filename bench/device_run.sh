#!/usr/bin/env bash
# Run benchmarks on a GPU machine, from the repository root of a checkout:
#
#   bash bench/device_run.sh [--tests[=PATHS]] SCRIPT [ARGS...] [--- SCRIPT [ARGS...]]...
#   bash bench/device_run.sh --tests bench/gpu_llm_suite.py --only decode
#   bash bench/device_run.sh --tests=tests/test_fp8.py bench/fp8_suite.py --- bench/cold_tune.py --mode each
#
# --tests   run the GPU tests (pytest -m gpu) first, all of them or those under the
#           comma-separated PATHS; the benchmarks run either way, one after another
#           (separated by ---), each one's output appended to $OUT/bench.log.
# Wheels in .whl/ (for a machine without a package index) are installed under
# /tmp/site and put on PYTHONPATH after the checkout. Bytecode is kept under
# /tmp/pycache: an image that sets PYTHONDONTWRITEBYTECODE=1 would otherwise compile
# torch's sources in every process and add seconds to every timing of a whole command.
# Logs and the scripts' JSON go to $OUT (default bench_out/).
set -uo pipefail

tests=""
case "${1:-}" in
  --tests) tests=tests; shift ;;
  --tests=*) tests=${1#--tests=}; tests=${tests//,/ }; shift ;;
esac
if [ $# -lt 1 ]; then
  echo "usage: bash bench/device_run.sh [--tests[=PATHS]] SCRIPT [ARGS...] [--- SCRIPT [ARGS...]]..." >&2
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
: > "$OUT/bench.log"

if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu \
    --format=csv,noheader | tee "$OUT/gpu.txt"
fi
status=0
if [ -n "$tests" ]; then
  # shellcheck disable=SC2086  # PATHS split on spaces on purpose
  python3 -m pytest -q -m gpu -p no:cacheprovider $tests 2>&1 \
    | tee "$OUT/pytest_gpu.log" | tail -25
  status=${PIPESTATUS[0]}
fi

run_one() {
  echo "=== $*" | tee -a "$OUT/bench.log"
  python3 "$@" 2>&1 | tee -a "$OUT/bench.log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -ne 0 ] && status=$rc
}

args=()
for word in "$@"; do
  if [ "$word" = --- ]; then
    [ ${#args[@]} -gt 0 ] && run_one "${args[@]}"
    args=()
  else
    args+=("$word")
  fi
done
[ ${#args[@]} -gt 0 ] && run_one "${args[@]}"
exit "$status"
