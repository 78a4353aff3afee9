"""Inductor lookup-table export: keys, values, skip notes, and torch's own code accepting them.

The first tests need no torch. The last ones compile matmuls with Inductor on the CPU and
let torch's own LookupTableChoices build the keys and parse our table (its device check is
bypassed: on a CPU-only machine it would switch the table off).
"""

from __future__ import annotations

import hashlib
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from autotune_cli.export import (
    INDUCTOR_TRITON_ARGS,
    inductor_export,
    inductor_key,
    inductor_table,
    inductor_value,
    installed_template_hash,
)

H200 = "NVIDIA H200"
FAKE = "FAKE GPU"
REPO = Path(__file__).resolve().parents[1]


def problem(op="mm", m=1024, n=512, k=4096, b=1, dtype="bfloat16", layout="nn", bias=None,
            allow_tf32=False, device="cuda"):
    return {"op": op, "m": m, "n": n, "k": k, "b": b, "dtype": dtype, "layout": layout,
            "bias": bias, "allow_tf32": allow_tf32, "device": device}


def triton_winner(uid="triton::mm", ms=0.05, **overrides):
    params = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 8, "num_stages": 5,
              "num_warps": 4, "EVEN_K": True, "ACC_TYPE": "tl.float32", "ALLOW_TF32": False, "FIXED_NK": 1}
    params.update(overrides)
    return {"uid": uid, "params": params, "ms": ms, "tflops": 100.0}


def aten_winner(uid="aten::mm", ms=0.05):
    return {"uid": uid, "params": {}, "ms": ms, "tflops": 100.0}


def entry(prob, winner, device_name=H200, device_type="cuda", torch_version=None, sm_count=132):
    fingerprint = {"device_name": device_name, "device_type": device_type, "capability": "9.0",
                   "sm_count": sm_count}
    if torch_version is not None:
        fingerprint["torch"] = torch_version
    return {"problem": prob, "fingerprint": fingerprint, "winner": winner, "candidates": []}


# -- keys (expected strings derived from torch/_inductor/lookup_table/choices.py) -----------
def test_key_matches_the_one_seen_working_on_the_h200():
    # NOTES.md: this key, with a triton::mm config, gave "lookup hit" on an H200 (torch 2.11).
    assert inductor_key(problem(), H200) == (
        "NVIDIA H200+((torch.bfloat16, [1024, 4096], [4096, 1]), "
        "(torch.bfloat16, [4096, 512], [512, 1]))+mm")


@pytest.mark.parametrize("layout, a_stride, b_stride", [
    ("nn", [56, 1], [40, 1]),
    ("nt", [56, 1], [1, 56]),
    ("tn", [1, 24], [40, 1]),
    ("tt", [1, 24], [1, 56]),
])
def test_mm_key_every_layout(layout, a_stride, b_stride):
    key = inductor_key(problem(m=24, n=40, k=56, dtype="float16", layout=layout), H200)
    assert key == (f"NVIDIA H200+((torch.float16, [24, 56], {a_stride}), "
                   f"(torch.float16, [56, 40], {b_stride}))+mm")


@pytest.mark.parametrize("layout, a_stride, b_stride", [
    ("nn", [1344, 56, 1], [2240, 40, 1]),
    ("nt", [1344, 56, 1], [2240, 1, 56]),
    ("tn", [1344, 1, 24], [2240, 40, 1]),
    ("tt", [1344, 1, 24], [2240, 1, 56]),
])
def test_bmm_key_every_layout(layout, a_stride, b_stride):
    key = inductor_key(problem("bmm", m=24, n=40, k=56, b=3, dtype="float32", layout=layout), H200)
    assert key == (f"NVIDIA H200+((torch.float32, [3, 24, 56], {a_stride}), "
                   f"(torch.float32, [3, 56, 40], {b_stride}))+bmm")


def test_addmm_keys_for_both_bias_shapes():
    vec = problem("addmm", m=24, n=40, k=56, layout="nt", bias="n")
    tail = ("(torch.bfloat16, [24, 56], [56, 1]), (torch.bfloat16, [56, 40], [1, 56]))"
            "+alpha=1&beta=1+addmm")
    # Triton templates see a [n] bias expanded to [m, n] with stride [0, 1] ...
    assert inductor_key(vec, H200) == "NVIDIA H200+((torch.bfloat16, [24, 40], [0, 1]), " + tail
    # ... torch 2.13's ATen choices see it as it is.
    assert inductor_key(vec, H200, bias_expanded=False) == (
        "NVIDIA H200+((torch.bfloat16, [40], [1]), " + tail)
    full = problem("addmm", m=24, n=40, k=56, layout="nt", bias="mn")
    assert inductor_key(full, H200) == "NVIDIA H200+((torch.bfloat16, [24, 40], [40, 1]), " + tail
    assert inductor_key(full, H200, bias_expanded=False) == inductor_key(full, H200)


def test_device_agnostic_key_and_dtype_names():
    assert inductor_key(problem(m=2, n=3, k=4, dtype="float32"), None) == (
        "((torch.float32, [2, 4], [4, 1]), (torch.float32, [4, 3], [3, 1]))+mm")
    assert "torch.float16" in inductor_key(problem(dtype="float16"), H200)


def test_key_rejects_a_bad_problem():
    with pytest.raises(ValueError):
        inductor_key(problem("addmm", bias=None), H200)
    with pytest.raises(ValueError):
        inductor_key(problem(dtype="int8"), H200)


# -- values ----------------------------------------------------------------------------------
def test_triton_mm_value_has_every_inductor_argument_and_no_allow_tf32():
    value = inductor_value(triton_winner(), problem(), include_hash=False)
    assert value == {
        "template_id": "triton::mm", "EVEN_K": True, "USE_FAST_ACCUM": False,
        "ACC_TYPE": "tl.float32", "num_stages": 5, "num_warps": 4, "BLOCK_M": 64,
        "BLOCK_N": 64, "BLOCK_K": 128, "hint_override": None, "GROUP_M": 8,
    }
    assert set(value) - {"template_id"} == set(INDUCTOR_TRITON_ARGS)
    assert "ALLOW_TF32" not in value  # Inductor passes it itself; a copy is a duplicate kwarg


def test_triton_value_derives_missing_and_recomputes_problem_fixed_params():
    winner = triton_winner(BLOCK_K=64)
    del winner["params"]["GROUP_M"], winner["params"]["EVEN_K"], winner["params"]["ACC_TYPE"]
    value = inductor_value(winner, problem("addmm", k=1000, bias="n", dtype="float32"),
                           include_hash=False)
    assert value["template_id"] == "triton::mm"
    assert value["GROUP_M"] == 8
    assert value["EVEN_K"] is False  # 1000 % 64 != 0
    assert value["ACC_TYPE"] == "tl.float32"
    assert value["USE_FAST_ACCUM"] is False and value["hint_override"] is None


def test_triton_bmm_value():
    value = inductor_value(triton_winner("triton::bmm"), problem("bmm", b=8), include_hash=False)
    assert value["template_id"] == "triton::bmm"
    assert value["BLOCK_K"] == 128


@pytest.mark.parametrize("uid, op, expected", [
    ("aten::mm", "mm", "aten::mm"),
    ("aten::addmm", "addmm", "aten::addmm"),
    ("aten::bias_addmm", "addmm", "aten::bias_addmm"),
    ("aten::bmm", "bmm", "aten::bmm"),
])
def test_aten_values(uid, op, expected):
    prob = problem(op, bias="n" if op == "addmm" else None)
    assert inductor_value(aten_winner(uid), prob) == {"template_id": expected}


@pytest.mark.parametrize("winner, prob", [
    (aten_winner("aten::mm"), problem("bmm")),                      # op mismatch
    (triton_winner("triton::mm_swap_ab"), problem()),                # no equivalent here
    (triton_winner("triton::mm_persistent_tma"), problem()),         # no SM count given
    (triton_winner("cutlass::gemm"), problem()),
    (triton_winner(BLOCK_M=48), problem()),                          # not a power of two
    (triton_winner(SPLIT_K=4), problem()),                           # a knob Inductor lacks
    ({"uid": "triton::mm", "params": {"BLOCK_M": 64}}, problem()),   # incomplete
    (None, problem()),
])
def test_values_without_an_equivalent_are_none(winner, prob):
    assert inductor_value(winner, prob, include_hash=False) is None


# -- tables ----------------------------------------------------------------------------------
def test_table_keys_values_and_skip_notes():
    mm = entry(problem(), triton_winner())
    cpu = entry(problem(device="cpu"), triton_winner(), device_name="Some CPU", device_type="cpu")
    odd = entry(problem(m=8), triton_winner("triton::mm_swap_ab"))
    tf32 = entry(problem(m=16, dtype="float32", allow_tf32=True), aten_winner())
    table, notes = inductor_table([mm, cpu, odd, tf32], include_hash=False)
    assert list(table) == [inductor_key(problem(), H200)]
    assert table[inductor_key(problem(), H200)] == [inductor_value(triton_winner(), problem(),
                                                                   include_hash=False)]
    assert len(notes) == 3
    assert "cpu" in notes[0] and "CUDA" in notes[0]
    assert "mm_swap_ab" in notes[1] and "no Inductor" in notes[1]
    assert "TF32" in notes[2] and "allow_tf32=True" in notes[2]
    # Entries that share a reason are counted in one note; a reason of one entry names it.
    cpu2 = entry(problem(m=8, device="cpu"), triton_winner(), device_name="Some CPU", device_type="cpu")
    _, grouped = inductor_table([cpu, mm, cpu2, tf32], include_hash=False)
    assert grouped[0] == "2 entries skipped: tuned on cpu (Inductor's lookup table is CUDA-only)"
    assert len(grouped) == 2 and grouped[1] == notes[2]
    # The other precision mode is exported on request.
    table32, notes32 = inductor_table([tf32], allow_tf32=True)
    assert table32 == {inductor_key(tf32["problem"], H200): [{"template_id": "aten::mm"}]}
    assert notes32 == []


def test_each_entry_left_out_of_the_table_has_its_own_reason():
    """What `cache export --json` lists under "left_out": each entry not in the table, by its
    index, with its reason: skipped (no equivalent, a CPU's), or dropped for a faster one
    under the same key; an entry in the table is not there."""
    slow, fast = entry(problem(), aten_winner(ms=0.09)), entry(problem(), triton_winner(ms=0.05))
    cpu = entry(problem(device="cpu"), triton_winner(), device_name="Some CPU", device_type="cpu")
    odd = entry(problem(m=8), triton_winner("triton::mm_swap_ab"))
    built = inductor_export([slow, cpu, fast, odd], include_hash=False)
    assert list(built.table) == [inductor_key(problem(), H200)]
    assert set(built.left_out) == {0, 1, 3}
    assert built.left_out[0].startswith("dropped: ") and "is faster for the same key" in built.left_out[0]
    assert "CUDA-only" in built.left_out[1] and "no Inductor" in built.left_out[3]
    assert (built.table, built.notes) == inductor_table([slow, cpu, fast, odd], include_hash=False)


def test_table_aten_addmm_with_vector_bias_gets_both_keys():
    prob = problem("addmm", bias="n")
    table, notes = inductor_table([entry(prob, aten_winner("aten::addmm"))])
    # Under the key whose bias is expanded to [m, n], cuBLAS's bias epilogue (bias_addmm):
    # aten::addmm there would materialise the expansion first.
    assert table == {inductor_key(prob, H200): [{"template_id": "aten::bias_addmm"}],
                     inductor_key(prob, H200, bias_expanded=False): [{"template_id": "aten::addmm"}]}
    assert notes == []
    # A full [m, n] bias is plain addmm, under its one key.
    full = problem("addmm", bias="mn")
    table, _ = inductor_table([entry(full, aten_winner("aten::addmm"))])
    assert table == {inductor_key(full, H200): [{"template_id": "aten::addmm"}]}
    # A Triton winner is looked up with the expanded bias only.
    table, _ = inductor_table([entry(prob, triton_winner())], include_hash=False)
    assert list(table) == [inductor_key(prob, H200)]


def tma_winner(**overrides):
    return triton_winner("triton::mm_persistent_tma", **{"FLATTEN": 0, **overrides})


def test_persistent_tma_winner_is_mapped_with_its_tma_arguments():
    prob = problem("mm", m=2048, n=4096, k=1024, layout="nt")
    value = inductor_value(tma_winner(), prob, include_hash=False, sm_count=132)
    assert value["template_id"] == "triton::mm_persistent_tma"
    for key in INDUCTOR_TRITON_ARGS:
        assert key in value, key
    assert (value["BLOCK_M"], value["BLOCK_N"], value["BLOCK_K"], value["num_stages"]) == (64, 64, 128, 5)
    assert value["A_ROW_MAJOR"] is True and value["B_ROW_MAJOR"] is False  # layout nt
    assert value["NUM_SMS"] == 132 and value["TMA_SIZE"] == 128
    assert value["TMA_EXPERIMENTAL_API"] is False
    assert "FLATTEN" not in value and "ALLOW_TF32" not in value
    # No SM count (Inductor's NUM_SMS), or num_warps=2 (its TMA filter refuses it): no config.
    assert inductor_value(tma_winner(), prob, include_hash=False) is None
    assert inductor_value(tma_winner(num_warps=2), prob, include_hash=False, sm_count=132) is None
    # In a table the SM count comes from the fingerprint; FLATTEN=1 is mapped with a note.
    table, notes = inductor_table([entry(prob, tma_winner(FLATTEN=1), sm_count=78)], include_hash=False)
    (config,) = table[inductor_key(prob, H200)]
    assert config["NUM_SMS"] == 78
    assert len(notes) == 2 and "FLATTEN=1" in notes[0]
    # Inductor offers its TMA templates (and so takes the entry) only with its switch on
    assert "enable_persistent_tma_matmul = True" in notes[1]


def test_persistent_tma_config_names_the_arguments_the_installed_heuristic_adds():
    if torch is None:
        pytest.skip("torch is not installed")
    try:
        import inspect

        from torch._inductor.template_heuristics import triton as heuristics
        source = inspect.getsource(heuristics.TMATemplateConfigMixin)
    except (ImportError, AttributeError) as exc:
        pytest.skip(f"this torch has no TMA template heuristic: {exc}")
    value = inductor_value(tma_winner(), problem(), include_hash=False, sm_count=132)
    extra = set(value) - set(INDUCTOR_TRITON_ARGS) - {"template_id"}
    # Each TMA argument we write is a key of the installed heuristic's TMA options, and each
    # of those is ours.
    written = {key for key in extra if f'"{key}"' in source}
    assert written == extra
    import re
    block = source[source.index("tma_opts = {"):]
    block = block[:block.index("}")]
    assert set(re.findall(r'"(\w+)":', block)) == extra


def test_table_keeps_the_fastest_entry_per_key():
    slow = entry(problem(), triton_winner(ms=0.9))
    fast = entry(problem(), aten_winner(ms=0.1))
    other_gpu = entry(problem(), triton_winner(ms=2.0), device_name="NVIDIA A100-SXM4-80GB")
    table, notes = inductor_table([slow, fast, other_gpu], include_hash=False)
    assert table[inductor_key(problem(), H200)] == [{"template_id": "aten::mm"}]
    assert table[inductor_key(problem(), "NVIDIA A100-SXM4-80GB")][0]["template_id"] == "triton::mm"
    assert len(notes) == 1 and "dropped" in notes[0]


def test_table_warns_about_small_gpus_and_missing_device_names():
    small = entry(problem(), triton_winner(), device_name="NVIDIA T4", sm_count=40)
    nameless = entry(problem(), triton_winner(), device_name="")
    table, notes = inductor_table([small, nameless], include_hash=False)
    assert list(table) == [inductor_key(problem(), "NVIDIA T4")]
    assert any("68 SMs" in note for note in notes)
    assert any("no device name" in note for note in notes)


def test_export_module_does_not_import_torch():
    code = ("import sys, autotune_cli.export as e; "
            "e.inductor_table([]); e.inductor_key({'op':'mm','m':1,'n':1,'k':1,'dtype':'float16',"
            "'layout':'nn','bias':None}, 'x'); assert 'torch' not in sys.modules, 'torch imported'")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# -- against the installed torch -------------------------------------------------------------
try:
    import torch
except ImportError:  # the tests above need no torch
    torch = None


def _inductor():
    if torch is None:
        pytest.skip("torch is not installed")
    try:
        from torch._inductor import config
        from torch._inductor.kernel.bmm import bmm_template
        from torch._inductor.kernel.mm import mm_template
        from torch._inductor.lookup_table import LookupTableChoices
        from torch._inductor.virtualized import V
    except ImportError as exc:  # torch < 2.10 has no lookup table
        pytest.skip(f"this torch has no Inductor lookup table: {exc}")
    return config, mm_template, bmm_template, LookupTableChoices, V


def test_installed_template_hash_is_the_template_source_hash():
    _, mm_template, bmm_template, _, _ = _inductor()
    assert installed_template_hash("triton::mm") == mm_template.src_hash
    assert installed_template_hash("triton::bmm") == bmm_template.src_hash
    assert len(mm_template.src_hash) == 64 and mm_template.src_hash != bmm_template.src_hash
    assert installed_template_hash("aten::mm") is None
    assert installed_template_hash("nope::x") is None
    value = inductor_value(triton_winner(), problem())
    assert value["template_hash"] == mm_template.src_hash
    # A hash from another torch would be dropped by Inductor: leave it out, and say so.
    other = "1.0.0" if not torch.__version__.startswith("1.0.0") else "9.9.9"
    table, notes = inductor_table([entry(problem(), triton_winner(), torch_version=other)])
    assert "template_hash" not in next(iter(table.values()))[0]
    assert len(notes) == 1 and "template_hash left out" in notes[0]


LAYOUT_DTYPES = {"nn": "float32", "nt": "bfloat16", "tn": "float16", "tt": "float32"}
M, N, K, B = 24, 40, 56, 3


def _operand(shape, transposed, dtype):
    """A tensor of `shape` whose last two dims are stored transposed if asked."""
    if not transposed:
        return torch.randn(*shape).to(dtype)
    *lead, rows, cols = shape
    return torch.randn(*lead, cols, rows).to(dtype).transpose(-1, -2)


def _problems():
    out = []
    for layout, dtype in LAYOUT_DTYPES.items():
        out.append(problem("mm", M, N, K, dtype=dtype, layout=layout))
        out.append(problem("addmm", M, N, K, dtype=dtype, layout=layout, bias="n"))
        out.append(problem("addmm", M, N, K, dtype=dtype, layout=layout, bias="mn"))
        out.append(problem("bmm", M, N, K, b=B, dtype=dtype, layout=layout))
    return out


def _tensors(prob):
    dtype = getattr(torch, prob["dtype"])
    lead = (prob["b"],) if prob["op"] == "bmm" else ()
    a = _operand((*lead, prob["m"], prob["k"]), prob["layout"][0] == "t", dtype)
    b = _operand((*lead, prob["k"], prob["n"]), prob["layout"][1] == "t", dtype)
    if prob["op"] != "addmm":
        return (a, b)
    bias = torch.randn(prob["n"] if prob["bias"] == "n" else (prob["m"], prob["n"])).to(dtype)
    return (bias, a, b)


def _eager(prob, args):
    return {"mm": torch.mm, "addmm": torch.addmm, "bmm": torch.bmm}[prob["op"]](*args)


@pytest.fixture(scope="module")
def inductor_run():
    """Compile 16 matmuls (mm, addmm with both biases, bmm; every layout; three dtypes) once on
    the CPU under max-autotune with ATen only, through a LookupTableChoices that sees our
    table. Records what torch's own lookup code computed at each lowering."""
    config, mm_template, bmm_template, LookupTableChoices, V = _inductor()
    probs = _problems()
    aten_uid = {"mm": "aten::mm", "addmm": "aten::addmm", "bmm": "aten::bmm"}
    aten_table, notes = inductor_table([entry(p, aten_winner(aten_uid[p["op"]]), device_name=FAKE)
                                        for p in probs])
    assert notes == []
    triton_uid = {"mm": "triton::mm", "addmm": "triton::mm", "bmm": "triton::bmm"}
    triton_table, notes = inductor_table([entry(p, triton_winner(triton_uid[p["op"]], BLOCK_K=32),
                                                device_name=FAKE) for p in probs])
    assert notes == []
    table = {key: list(configs) for key, configs in aten_table.items()}
    for key, configs in triton_table.items():
        table.setdefault(key, []).extend(configs)
    templates = {"triton::mm": mm_template, "triton::bmm": bmm_template}
    calls = []

    class CpuLookup(LookupTableChoices):
        # The stock class turns itself off without CUDA and has no device key for a CPU:
        # bypass only those two; key building, parsing and hash checks stay torch's own.
        @staticmethod
        def _get_device_key(device):
            return FAKE

        def _get_lookup_table(self):
            return config.lookup_table.table or {}

        def _finalize_template_configs(self, template_choices, kernel_inputs, templates_in,
                                       op_name, kwarg_overrides=None):
            uid = "triton::bmm" if op_name == "bmm" else "triton::mm"
            template = templates[uid]
            record = {
                "op": op_name,
                "key": self.make_lookup_key(kernel_inputs, op_name, include_device=True),
                "agnostic": self.make_lookup_key(kernel_inputs, op_name, include_device=False),
                "uids": [t.uid for t in templates_in],
                # What torch makes of our Triton entry, with its real hash check ...
                "triton": self.lookup_template_configs(
                    kernel_inputs, op_name, [uid], {uid: template.src_hash}),
                # ... and with a hash that is not the installed template's.
                "triton_bad_hash": self.lookup_template_configs(
                    kernel_inputs, op_name, [uid], {uid: "0" * 64}),
                # The arguments Inductor's own heuristic gives this template here.
                "base_kwargs": None,
            }
            try:
                base = next(self.get_ktc(kernel_inputs, template, op_name))
                record["base_kwargs"] = base.params.to_kwargs()
            except StopIteration:
                pass
            calls.append(record)
            return super()._finalize_template_configs(
                template_choices, kernel_inputs, templates_in, op_name, kwarg_overrides)

    args = [_tensors(p) for p in probs]

    def fn(*flat):
        outs, i = [], 0
        for prob, group in zip(probs, args):
            outs.append(_eager(prob, flat[i:i + len(group)]))
            i += len(group)
        return outs

    flat = [t for group in args for t in group]
    messages = []

    class Collect(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    logger = logging.getLogger("torch._inductor.lookup_table.choices")
    handler, old_level = Collect(level=logging.INFO), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    torch._dynamo.reset()
    try:
        with config.patch({"lookup_table.table": table, "force_disable_caches": True,
                           "max_autotune": True, "max_autotune_gemm_backends": "ATEN"}), \
                V.set_choices_handler(CpuLookup()):
            compiled = torch.compile(fn, dynamic=False, fullgraph=True)(*flat)
    except Exception as exc:  # noqa: BLE001 - no C++ compiler, or an Inductor that cannot lower on the CPU
        pytest.skip(f"Inductor could not compile on this CPU: {type(exc).__name__}: {exc}")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        torch._dynamo.reset()
    return {"problems": probs, "args": args, "compiled": compiled, "eager": fn(*flat),
            "calls": calls, "messages": messages, "table": table,
            "triton_table": triton_table, "aten_table": aten_table}


def _keys_for(prob):
    keys = {inductor_key(prob, FAKE)}
    if prob["op"] == "addmm":
        keys.add(inductor_key(prob, FAKE, bias_expanded=False))
    return keys


def test_our_keys_are_the_keys_torch_builds(inductor_run):
    calls, probs = inductor_run["calls"], inductor_run["problems"]
    assert len(calls) >= len(probs)
    torch_keys = {call["key"] for call in calls}
    ours = {}
    for prob in probs:
        for key in _keys_for(prob):
            ours[key] = prob
    # Every key torch built is one of ours, and each problem's main key was built.
    assert torch_keys <= set(ours), sorted(torch_keys - set(ours))
    for prob in probs:
        assert inductor_key(prob, FAKE) in torch_keys, prob
    for call in calls:  # and the device-agnostic key is ours without the device part
        prob = ours[call["key"]]
        expanded = call["key"] == inductor_key(prob, FAKE)
        assert call["agnostic"] == inductor_key(prob, None, bias_expanded=expanded)


def test_torch_parses_our_triton_entries_and_checks_their_hash(inductor_run):
    seen = with_base = 0
    for call in inductor_run["calls"]:
        ours = inductor_run["triton_table"].get(call["key"])
        if ours is None:
            continue  # the key torch 2.13's ATen choices use for a [n] bias
        seen += 1
        uid = ours[0]["template_id"]
        assert "template_hash" in ours[0]
        expected = {k: v for k, v in ours[0].items() if k not in ("template_id", "template_hash")}
        assert call["triton"] == {uid: [expected]}
        assert call["triton_bad_hash"] == {}
        # Our config names exactly the arguments Inductor's own heuristic gives the template.
        if call["base_kwargs"] is not None:
            with_base += 1
            assert set(expected) == set(call["base_kwargs"])
            assert expected["ACC_TYPE"] == call["base_kwargs"]["ACC_TYPE"]
    assert seen >= len(inductor_run["problems"])
    assert with_base >= len(inductor_run["problems"])  # the heuristic check really ran


def test_torch_uses_our_aten_entries_and_the_result_is_right(inductor_run):
    hits = [m for m in inductor_run["messages"] if "lookup hit" in m]
    ops = {p["op"] for p in inductor_run["problems"]}
    # One hit per matmul: each lowering's ATen choices came from our table.
    assert len(hits) == len(inductor_run["problems"]), inductor_run["messages"]
    assert {op for op in ops if any(f"lookup hit for {op}" in m for m in hits)} == ops
    for prob, got, want in zip(inductor_run["problems"], inductor_run["compiled"],
                               inductor_run["eager"]):
        tol = 1e-4 if prob["dtype"] == "float32" else 2e-2
        torch.testing.assert_close(got, want, rtol=tol, atol=tol, msg=str(prob))


def test_template_hash_is_sha256_of_the_installed_template_source():
    _, mm_template, _, _, _ = _inductor()
    from torch._inductor.kernel.mm_common import load_kernel_template

    if torch.version.hip is None:
        source = load_kernel_template("triton_mm")
        assert installed_template_hash("triton::mm") == hashlib.sha256(source.encode()).hexdigest()


def test_notes_escape_what_the_cache_file_holds():
    # a uid and a device name with terminal escapes, as anyone who writes the file may put them
    odd_uid = entry(problem(), triton_winner("triton::mm\x1b[2J\x1b[31m"))
    odd_gpu = entry(problem(m=8), aten_winner(), device_name="GPU\x1b]0;owned\x07\r", sm_count=40)
    table, notes = inductor_table([odd_uid, odd_gpu], include_hash=False)
    assert any("triton::mm\\x1b[2J\\x1b[31m" in note for note in notes), notes
    assert all(note.isprintable() for note in notes), notes
