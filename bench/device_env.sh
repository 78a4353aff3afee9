# Sourced by the device scripts (bench/device_run.sh, focus_call*.sh, final_device_call.sh):
# installs the carried wheels (.whl/, e.g. platformdirs) under /tmp/site, puts them and the
# checkout on PYTHONPATH, makes $OUT, and sets $quiet (a grep -v pattern for Inductor's
# autotuning chatter); defines the steps the focus_call scripts share (below).
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
# The device image sets PYTHONDONTWRITEBYTECODE=1 and its torch has no .pyc files: every
# Python process there compiles torch, triton and sympy from source, ~4 s for torch's import
# and ~2.4 s for sympy's (bench/startup_profile.py, 2026-11-30), which a pip install, writing
# the .pyc files, does not pay. Unless BYTECODE=image, the scripts keep bytecode under
# /tmp/pycache, written once by warm_bytecode below (calls before 2026-11-30 03:00 ran without).
if [ "${BYTECODE:-cached}" != image ]; then
  unset PYTHONDONTWRITEBYTECODE
  export PYTHONPYCACHEPREFIX=/tmp/pycache
fi
warm_bytecode() {
  python3 -c "import torch, triton, sympy, typer, rich, torch.export, torch._inductor.config, autotune_cli.cli, autotune_cli.templates, autotune_cli.model, autotune_cli.bench.worker" >/dev/null 2>&1
}
OUT=${OUT:-bench_out}; mkdir -p "$OUT"
quiet='UserWarning\|warn_once\|current_out_size\|^  triton_mm\|^  mm \|strides:\|dtypes:\|^AUTOTUNE\|Autotune Choices\|num_choices\|SingleProcess'

# The GPU tests on GPU $1 beside bench/lm_head_probe.py on GPU $2, limited to $3 and $4 s:
# $OUT/pytest_gpu.log, $OUT/lm_head_probe.log.
tests_beside_probe() {
  CUDA_VISIBLE_DEVICES=$1 timeout "$3" python3 -m pytest -q -m gpu -p no:cacheprovider tests > "$OUT/pytest_gpu.log" 2>&1 &
  CUDA_VISIBLE_DEVICES=$2 timeout "$4" python3 bench/lm_head_probe.py > "$OUT/lm_head_probe.log" 2>&1
  wait
}

# The kernel suite's shapes $1 on GPU 0 and $2 on GPU 1 at once, each limited to $3 s:
# $OUT/suite0.log, $OUT/suite1.log (and each half's JSON under $OUT/suite0, $OUT/suite1).
suite_halves() {
  mkdir -p "$OUT/suite0" "$OUT/suite1"
  OUT=$OUT/suite0 CUDA_VISIBLE_DEVICES=0 timeout "$3" python3 bench/gpu_llm_suite.py --only "$1" 2>&1 \
    | grep -v "$quiet" > "$OUT/suite0.log" &
  OUT=$OUT/suite1 CUDA_VISIBLE_DEVICES=1 timeout "$3" python3 bench/gpu_llm_suite.py --only "$2" 2>&1 \
    | grep -v "$quiet" > "$OUT/suite1.log" &
  wait
}

# Each suite half's result lines and table.
summary_halves() {
  for half in 0 1; do grep -E "^done|^geomean" "$OUT/suite$half.log"; grep -A8 "^shape " "$OUT/suite$half.log"; done
}

# The summary lines of the two above.
summary_tests_probe_halves() {
  tail -3 "$OUT/pytest_gpu.log"
  cat "$OUT/lm_head_probe.log"
  summary_halves
}

# The suite halves' logs, the GPU tests' log and any files of $OUT named in "$@" into
# $OUT/logs.tgz (the device returns a few files only); the halves' JSON folders then go.
pack_suite_logs() {
  tar czf "$OUT/logs.tgz" -C "$OUT" suite0 suite1 suite0.log suite1.log pytest_gpu.log "$@" && rm -rf "$OUT/suite0" "$OUT/suite1"
}

# The packed logs that the summary read, removed (they are in logs.tgz).
drop_packed_logs() {
  rm -f "$OUT/suite0.log" "$OUT/suite1.log" "$OUT/pytest_gpu.log"
}
