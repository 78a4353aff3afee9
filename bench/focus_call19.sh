#!/usr/bin/env bash
# A device call on the 2-GPU host (carry .whl): the suite's compute-bound rows (where the
# tunes picked kernels that were slower than cuBLAS side by side) and the decode rows, in two
# halves at once, with the confirmation against cuBLAS in sustained runs.
#   bash bench/focus_call19.sh
set -uo pipefail
. bench/device_env.sh
warm_bytecode
suite_halves ${SUITE0:-prefill,tf32} ${SUITE1:-decode,square,addmm} ${SUITE_S:-200}
pack_suite_logs
echo "== summary"
summary_halves
drop_packed_logs
