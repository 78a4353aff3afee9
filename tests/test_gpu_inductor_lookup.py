"""On a GPU: an exported lookup table makes Inductor's max-autotune use our Triton config
for torch.mm without autotuning anything (torch >= 2.10; written against 2.11 and 2.13)."""

from __future__ import annotations

import logging
import re

import pytest

from autotune_cli.export import inductor_key, inductor_table, installed_template_hash

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

M, N, K = 1024, 512, 4096
PARAMS = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 8, "num_stages": 5,
          "num_warps": 4, "EVEN_K": True, "ACC_TYPE": "tl.float32", "ALLOW_TF32": False}


def _entry(device_name: str) -> dict:
    props = torch.cuda.get_device_properties(0)
    return {
        "problem": {"op": "mm", "m": M, "n": N, "k": K, "b": 1, "dtype": "bfloat16",
                    "layout": "nn", "bias": None, "allow_tf32": False, "device": "cuda"},
        "fingerprint": {"device_name": device_name, "device_type": "cuda",
                        "capability": f"{props.major}.{props.minor}",
                        "sm_count": props.multi_processor_count,
                        "torch": torch.__version__},
        "winner": {"uid": "triton::mm", "params": dict(PARAMS), "ms": 0.02, "tflops": 200.0},
    }


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_lookup_table_drives_inductor_max_autotune(tmp_path, monkeypatch):
    try:
        from torch._inductor import config
        from torch._inductor.lookup_table import LookupTableChoices
        from torch._inductor.utils import run_and_get_code
        from torch._inductor.virtualized import V
    except ImportError as exc:
        pytest.skip(f"this torch has no Inductor lookup table: {exc}")
    from torch._dynamo.utils import counters

    props = torch.cuda.get_device_properties(0)
    if props.multi_processor_count < 68:
        pytest.skip("Inductor uses Triton GEMM templates only on GPUs with >= 68 SMs")
    device_name = torch.cuda.get_device_name()
    # Inductor's device key is props.gcnArchName, which CUDA builds fill with the name.
    assert getattr(props, "gcnArchName", device_name) == device_name

    table, notes = inductor_table([_entry(device_name)])
    assert notes == []
    key = inductor_key(_entry(device_name)["problem"], device_name)
    assert list(table) == [key]
    config_entry = table[key][0]
    assert config_entry["template_id"] == "triton::mm"
    assert config_entry["template_hash"] == installed_template_hash("triton::mm")

    # Fresh caches: nothing Inductor or Triton saved before may answer for it.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))

    loggers = [logging.getLogger("torch._inductor.lookup_table.choices"),
               logging.getLogger("torch._inductor.select_algorithm")]
    collect = _Collect()
    old_levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(collect)
        lg.setLevel(logging.DEBUG)

    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16) * 0.1
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16) * 0.1

    def fn(x, y):
        return torch.mm(x, y)

    torch._dynamo.reset()
    counters.clear()
    try:
        with config.patch({"lookup_table.table": table, "force_disable_caches": True}), \
                V.set_choices_handler(LookupTableChoices()):
            compiled = torch.compile(fn, mode="max-autotune", dynamic=False)
            out, codes = run_and_get_code(compiled, a, b)
            out = out.clone()  # cudagraph-owned memory may be reused by a later replay
    finally:
        for lg, level in zip(loggers, old_levels):
            lg.removeHandler(collect)
            lg.setLevel(level)
        torch._dynamo.reset()

    log_text = "\n".join(collect.messages)
    # Inductor found our entry (LookupTableChoices._finalize_template_configs logs this) ...
    assert re.search(r"LookupChoices: lookup hit for mm\b.*triton::mm", log_text), log_text
    assert "Hash validation failed" not in log_text
    assert "lookup miss for mm" not in log_text
    # ... and benchmarked nothing: one choice goes straight to its output node.
    assert counters["inductor"]["select_algorithm_autotune"] == 0, dict(counters["inductor"])
    assert counters["inductor"]["select_algorithm_precompile"] == 0

    ref = a.float() @ b.float()
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(out, torch.mm(a, b), rtol=2e-2, atol=2e-2)

    code = "\n".join(codes)
    assert "triton_tem_" in code, code[:2000]  # a Triton template kernel, not extern mm
    assert "extern_kernels.mm(" not in code
    for name, value in (("BLOCK_M", 64), ("BLOCK_N", 64), ("BLOCK_K", 128), ("GROUP_M", 8)):
        assert re.search(rf"\b{name}\s*:\s*tl\.constexpr\s*=\s*{value}\b", code), name
    assert re.search(r"['\"]?num_stages['\"]?\s*[:=]\s*5\b", code), "num_stages=5 not in code"
