"""On a GPU: an exported lookup table of float8 winners makes Inductor's max-autotune of
torch._scaled_mm use our choice without autotuning (the aten call, the TMA epilogue-scaling
template, triton::mm with the scaling epilogue; the aten call for blockwise scales too), with
torch._scaled_mm's results. Written against torch 2.11 (the GPU host's) and 2.13.

As tests/test_gpu_inductor_lookup.py: the compiles run in a child process (the test session
sets TRITON_INTERPRET=1; the child gets empty Inductor and Triton caches of its own).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
M, N, K = 1024, 512, 4096
TILE = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_stages": 3, "num_warps": 8,
        "ACC_TYPE": "tl.float32", "ALLOW_TF32": False, "OUT_DTYPE": "bfloat16", "FAST_ACCUM": False}
CASES = {  # name: (our uid, scale, bias)
    "aten": ("aten::_scaled_mm", "row", True),
    "tma": ("triton::scaled_mm_persistent_tma", "tensor", False),
    "tiled": ("triton::scaled_mm", "row", True),
    "block": ("aten::_scaled_mm", "block", False),  # 1x128 / 128x128 scales, column-major
}
RESULT_MARK = "AUTOTUNE-RESULT "


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def _child() -> dict:
    import torch

    try:
        from torch._inductor import config
        from torch._inductor.lookup_table import LookupTableChoices
        from torch._inductor.utils import run_and_get_code
        from torch._inductor.virtualized import V
    except ImportError as exc:
        return {"skip": f"this torch has no Inductor lookup table: {exc}"}
    from torch._dynamo.utils import counters

    from autotune_cli.export import inductor_table

    props = torch.cuda.get_device_properties(0)
    if props.multi_processor_count < 68 or props.major < 9:
        return {"skip": "needs an sm_90 GPU with >= 68 SMs (Inductor's TMA and Triton templates)"}
    device_name = torch.cuda.get_device_name()
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    for name in ("torch._inductor.lookup_table.choices", "torch._inductor.select_algorithm"):
        logger = logging.getLogger(name)
        logger.addHandler(Collect(level=logging.DEBUG))
        logger.setLevel(logging.DEBUG)
    torch.manual_seed(0)
    a = (torch.randn(M, K, device="cuda") * 4).to(torch.float8_e4m3fn)
    b = (torch.randn(N, K, device="cuda") * 4).to(torch.float8_e4m3fn).t()
    bias = torch.randn(N, device="cuda").to(torch.bfloat16)
    scales = {"row": (torch.rand(M, 1, device="cuda") / 16 + 1e-3, torch.rand(1, N, device="cuda") / 16 + 1e-3),
              "tensor": (torch.tensor(0.05, device="cuda"), torch.tensor(0.02, device="cuda")),
              # stored transposed: the column-major [M, K/128] and [K/128, N/128] cuBLASLt takes
              "block": ((torch.rand(K // 128, M, device="cuda") / 16 + 1e-3).t(),
                        (torch.rand(N // 128, K // 128, device="cuda") / 16 + 1e-3).t())}
    seen_kwargs: dict = {}

    class Recording(LookupTableChoices):
        """Records the arguments this torch's own heuristics give each template offered (so
        that a failing entry says what this version expects)."""

        def _finalize_template_configs(self, *args, **kwargs):
            try:
                _, kernel_inputs, templates, op_name = args[:4]
                overrides = (args[4] if len(args) > 4 else kwargs.get("kwarg_overrides")) or {}
            except Exception as exc:  # noqa: BLE001 - another signature in this torch
                seen_kwargs["?"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                templates = ()
            for template in templates:
                try:
                    ktc = next(self.get_ktc(kernel_inputs, template, op_name, overrides.get(template.uid, {})))
                    seen_kwargs[template.uid] = ktc.params.to_kwargs()
                except Exception as exc:  # noqa: BLE001 - no config, or another signature in this torch
                    seen_kwargs[template.uid] = f"{type(exc).__name__}: {str(exc)[:200]}"
            return super()._finalize_template_configs(*args, **kwargs)

    results = {}
    for case, (uid, scale, with_bias) in CASES.items():
        problem = {"op": "scaled_mm", "m": M, "n": N, "k": K, "b": 1, "dtype": "float8_e4m3fn", "layout": "nt",
                   "bias": "n" if with_bias else None, "allow_tf32": False, "device": "cuda", "scale": scale,
                   "out_dtype": "bfloat16", "fast_accum": False}
        params = {} if uid.startswith("aten") else {**TILE, "SCALE": scale, "EVEN_K": True, "FLATTEN": 0}
        if uid == "triton::scaled_mm":
            params.pop("FLATTEN")
        entry = {"problem": problem, "winner": {"uid": uid, "params": params, "ms": 0.01, "tflops": 1.0},
                 "fingerprint": {"device_name": device_name, "device_type": "cuda", "sm_count":
                                 props.multi_processor_count, "capability": f"{props.major}.{props.minor}",
                                 "torch": torch.__version__}, "candidates": []}
        table, notes = inductor_table([entry])
        sa, sb = scales[scale]
        bias_arg = bias if with_bias else None

        def fn(a, b, sa, sb, bias):
            return torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16)

        torch._dynamo.reset()
        counters.clear()
        del messages[:]
        seen_kwargs.clear()
        error = None
        try:
            # Inductor offers its TMA templates only with this switch on (export.TMA_SWITCH); seen on
            # torch 2.11: without it the TMA entry's key is found and the entry is a miss
            switches = {"triton.enable_persistent_tma_matmul": True} if case == "tma" else {}
            with config.patch({"lookup_table.table": table, "force_disable_caches": True, **switches}), \
                    V.set_choices_handler(Recording()):
                compiled = torch.compile(fn, mode="max-autotune-no-cudagraphs", dynamic=False)
                out, codes = run_and_get_code(compiled, a, b, sa, sb, bias_arg)
            want = fn(a, b, sa, sb, bias_arg)
            err = ((out.float() - want.float()).abs().max() / want.float().abs().max()).item()
        except Exception as exc:  # noqa: BLE001 - the failure is recorded in the results
            error, codes, err = f"{type(exc).__name__}: {str(exc)[:1500]}", [], None
        results[case] = {
            "table": table, "notes": notes, "error": error, "rel_err_vs_torch": err,
            "messages": [m[:400] for m in messages if "ookup" in m or "autotun" in m.lower()][:20],
            "counters": {k: v for k, v in counters["inductor"].items() if "select_algorithm" in k},
            "triton_kernel": any("triton_tem_" in c for c in codes),
            "extern_scaled_mm": any("_scaled_mm" in c and "extern_kernels" in c for c in codes),
            "inductor_kwargs": {k: v if isinstance(v, str) else {a: str(b) for a, b in v.items()}
                                for k, v in seen_kwargs.items()},
        }
    return {"torch": torch.__version__, "results": results}


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("case", list(CASES))
def test_float8_lookup_table_drives_inductor_max_autotune(case, tmp_path_factory):
    res = _run_child(tmp_path_factory)
    if "skip" in res:
        pytest.skip(res["skip"])
    got = res["results"][case]
    said = json.dumps(got, default=str)[:8000]
    assert got["error"] is None, said
    log_text = "\n".join(got["messages"])
    assert "lookup hit for scaled_mm" in log_text, said
    assert got["counters"].get("select_algorithm_autotune", 0) == 0, said
    assert got["rel_err_vs_torch"] < 2e-2, said
    if CASES[case][0].startswith("aten::"):
        assert got["extern_scaled_mm"] and not got["triton_kernel"], said
    else:
        assert got["triton_kernel"], said


_CHILD_RESULT: dict = {}


def _run_child(tmp_path_factory) -> dict:
    if not _CHILD_RESULT:
        tmp = tmp_path_factory.mktemp("fp8_lookup")
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp / "inductor")
        env["TRITON_CACHE_DIR"] = str(tmp / "triton")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        proc = subprocess.run([sys.executable, __file__], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=300)
        lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARK)]
        assert proc.returncode == 0 and lines, f"child failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
        _CHILD_RESULT.update(json.loads(lines[-1][len(RESULT_MARK):]))
    return _CHILD_RESULT


if __name__ == "__main__":
    print(RESULT_MARK + json.dumps(_child(), default=str), flush=True)
