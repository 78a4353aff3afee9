#!/usr/bin/env bash
# A device call on the 2-GPU host (carry .whl): whether this image's Python writes bytecode;
# where `autotune model`'s first seconds go (sampled); the two-GPU comparison cold, then again
# with bytecode caches kept under /tmp (PYTHONPYCACHEPREFIX, warmed first); which kernels
# Inductor runs for lm_head and decode; the suite in two halves at once. Logs are packed into
# one archive (the device tool returns few files).      bash bench/focus_call8.sh
set -uo pipefail
. bench/device_env.sh
nvidia-smi --query-gpu=name,driver_version,persistence_mode,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
python3 - > "$OUT/bytecode.log" 2>&1 <<'PY'
import os, sys, importlib.util
import torch
spec = importlib.util.find_spec("torch.nn.modules.linear")
cached = importlib.util.cache_from_source(spec.origin)
print("dont_write_bytecode", sys.dont_write_bytecode, "env", os.environ.get("PYTHONDONTWRITEBYTECODE"),
      "prefix", sys.pycache_prefix, "torch dir writable", os.access(os.path.dirname(spec.origin), os.W_OK),
      "pyc exists", os.path.exists(cached), cached)
PY
timeout 100 python3 bench/startup_profile.py > "$OUT/startup_profile.log" 2>&1
timeout 100 python3 bench/gpu_multi.py 2>&1 | grep -v "$quiet" > "$OUT/multi_cold.log"
export PYTHONPYCACHEPREFIX=/tmp/pycache
python3 -c "import torch, triton, sympy, typer, rich, torch.export, torch._inductor.config, autotune_cli.cli, autotune_cli.templates, autotune_cli.model" 2>/dev/null
timeout 100 python3 bench/gpu_multi.py --label pyc 2>&1 | grep -v "$quiet" > "$OUT/multi_pyc.log"
unset PYTHONPYCACHEPREFIX
timeout 90 python3 bench/inductor_kernels.py 2>&1 | grep -v "$quiet" > "$OUT/inductor_kernels.log"
suite_halves ${SUITE0:-prefill,decode} ${SUITE1:-odd,lm_head,bmm,addmm,square,tf32} ${SUITE_S:-200}
tar czf "$OUT/logs.tgz" -C "$OUT" suite0 suite1 suite0.log suite1.log && rm -rf "$OUT/suite0" "$OUT/suite1"
echo "== summary"
cat "$OUT/bytecode.log"
summary_halves
rm -f "$OUT/suite0.log" "$OUT/suite1.log"
grep -vE "^\s*$" "$OUT/inductor_kernels.log" | grep -E "==|calls|whole" | cut -c1-140
cut -c1-300 "$OUT/startup_profile.log" | head -60
grep -hE "^--gpus|speed-up|stages" "$OUT"/multi_*.log | cut -c1-420
