"""On a GPU: an exported lookup table makes Inductor's max-autotune use our Triton config
for torch.mm without autotuning anything (torch >= 2.10; written against 2.11 and 2.13).

The compile runs in a child process: the test session sets TRITON_INTERPRET=1 before
triton is imported (tests/conftest.py), which would run Inductor's kernels in the
interpreter, and a child also gives Inductor and Triton empty caches of their own.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
M, N, K = 1024, 512, 4096
PARAMS = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 8, "num_stages": 5,
          "num_warps": 4, "EVEN_K": True, "ACC_TYPE": "tl.float32", "ALLOW_TF32": False}
RESULT_MARK = "AUTOTUNE-RESULT "


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def lookup_entry(device_name: str, capability: str, sm_count: int, torch_version: str) -> dict:
    """The cache entry a tune of the problem with PARAMS as its winner writes."""
    return {
        "problem": {"op": "mm", "m": M, "n": N, "k": K, "b": 1, "dtype": "bfloat16",
                    "layout": "nn", "bias": None, "allow_tf32": False, "device": "cuda"},
        "fingerprint": {"device_name": device_name, "device_type": "cuda", "capability": capability,
                        "sm_count": sm_count, "torch": torch_version},
        "winner": {"uid": "triton::mm", "params": dict(PARAMS), "ms": 0.02, "tflops": 200.0},
        "candidates": [{"uid": "triton::mm", "params": dict(PARAMS), "status": "ok", "ms": 0.02}],
    }


def test_the_gpu_checks_entry_is_exported():
    """On the CPU: the entry the GPU check installs is one the export takes (a table of one key)."""
    import torch

    from autotune_cli.export import inductor_table

    table, notes = inductor_table([lookup_entry("NVIDIA H200", "9.0", 132, torch.__version__)])
    assert len(table) == 1 and not notes, notes
    (key, [config]), = table.items()
    assert key.startswith("NVIDIA H200+") and key.endswith("+mm")
    assert config["template_id"] == "triton::mm" and config["BLOCK_K"] == 128


def _child() -> dict:
    """Export, install, compile, run; report what happened (runs in the child process)."""
    import torch

    try:
        from torch._inductor import config
        from torch._inductor.lookup_table import LookupTableChoices
        from torch._inductor.utils import run_and_get_code
        from torch._inductor.virtualized import V
    except ImportError as exc:
        return {"skip": f"this torch has no Inductor lookup table: {exc}"}
    from torch._dynamo.utils import counters

    from autotune_cli.export import inductor_key, inductor_table, installed_template_hash

    props = torch.cuda.get_device_properties(0)
    if props.multi_processor_count < 68:
        return {"skip": "Inductor uses Triton GEMM templates only on GPUs with >= 68 SMs"}
    device_name = torch.cuda.get_device_name()
    entry = lookup_entry(device_name, f"{props.major}.{props.minor}", props.multi_processor_count,
                         torch.__version__)
    table, notes = inductor_table([entry])

    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    for name in ("torch._inductor.lookup_table.choices", "torch._inductor.select_algorithm"):
        logger = logging.getLogger(name)
        logger.addHandler(Collect(level=logging.DEBUG))
        logger.setLevel(logging.DEBUG)

    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16) * 0.1
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16) * 0.1

    def fn(x, y):
        return torch.mm(x, y)

    torch._dynamo.reset()
    counters.clear()
    with config.patch({"lookup_table.table": table, "force_disable_caches": True}), \
            V.set_choices_handler(LookupTableChoices()):
        compiled = torch.compile(fn, mode="max-autotune", dynamic=False)
        out, codes = run_and_get_code(compiled, a, b)
        out = out.clone()  # cudagraph-owned memory may be reused by a later replay
    ref32 = a.float() @ b.float()
    return {
        "torch": torch.__version__,
        "device_name": device_name,
        "gcn_arch_name": getattr(props, "gcnArchName", None),
        "key": inductor_key(entry["problem"], device_name),
        "table": table,
        "notes": notes,
        "installed_hash": installed_template_hash("triton::mm"),
        "messages": messages,
        "counters": {k: v for k, v in counters["inductor"].items()},
        "code": "\n".join(codes),
        "max_err_vs_fp32": (out.float() - ref32).abs().max().item(),
        "max_err_vs_mm": (out.float() - torch.mm(a, b).float()).abs().max().item(),
        "ref_scale": ref32.abs().max().item(),
    }


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA GPU")
def test_lookup_table_drives_inductor_max_autotune(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")  # fresh caches
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, __file__], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=540)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARK)]
    assert proc.returncode == 0 and lines, f"child failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    res = json.loads(lines[-1][len(RESULT_MARK):])
    if "skip" in res:
        pytest.skip(res["skip"])

    # Inductor's device key is props.gcnArchName, which CUDA builds fill with the name.
    assert res["gcn_arch_name"] in (None, res["device_name"])
    assert res["notes"] == []
    assert list(res["table"]) == [res["key"]]
    config_entry = res["table"][res["key"]][0]
    assert config_entry["template_id"] == "triton::mm"
    assert res["installed_hash"] and config_entry["template_hash"] == res["installed_hash"]

    log_text = "\n".join(res["messages"])
    # Inductor found our entry (LookupTableChoices._finalize_template_configs logs this) ...
    assert re.search(r"LookupChoices: lookup hit for mm\b.*triton::mm", log_text), log_text
    assert "Hash validation failed" not in log_text
    assert "lookup miss for mm" not in log_text
    # ... and benchmarked nothing: a single choice goes straight to its output node.
    assert res["counters"].get("select_algorithm_autotune", 0) == 0, res["counters"]
    assert res["counters"].get("select_algorithm_precompile", 0) == 0, res["counters"]

    # bf16 output of an fp32-accumulated dot: within a few bf16 ulps of the fp32 product.
    assert res["max_err_vs_fp32"] <= 2e-2 * max(1.0, res["ref_scale"]), res
    assert res["max_err_vs_mm"] <= 2e-2 * max(1.0, res["ref_scale"]), res

    code = res["code"]
    assert "triton_tem_" in code, code[:3000]  # a Triton template kernel ...
    assert "extern_kernels.mm(" not in code    # ... not cuBLAS
    for name, value in (("BLOCK_M", 64), ("BLOCK_N", 64), ("BLOCK_K", 128), ("GROUP_M", 8)):
        assert re.search(rf"\b{name}\s*:\s*tl\.constexpr\s*=\s*{value}\b", code), name
    assert re.search(r"['\"]?num_stages['\"]?\s*[:=]\s*5\b", code), "num_stages=5 not in code"
    assert re.search(r"['\"]?num_warps['\"]?\s*[:=]\s*4\b", code), "num_warps=4 not in code"


if __name__ == "__main__":
    os.environ.pop("TRITON_INTERPRET", None)
    sys.path.insert(0, str(REPO))
    print(RESULT_MARK + json.dumps(_child()), flush=True)
