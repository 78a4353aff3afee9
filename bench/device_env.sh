# Sourced by the device scripts (bench/device_run.sh, focus_call.sh, final_device_call.sh):
# installs the carried wheels (.whl/, e.g. platformdirs) under /tmp/site, puts them and the
# checkout on PYTHONPATH, makes $OUT, and sets $quiet (a grep -v pattern for Inductor's
# autotuning chatter).
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:-bench_out}; mkdir -p "$OUT"
quiet='UserWarning\|warn_once\|current_out_size\|^  triton_mm\|^  mm \|strides:\|dtypes:\|^AUTOTUNE\|Autotune Choices\|num_choices\|SingleProcess'
