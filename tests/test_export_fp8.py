"""Lookup-table export of float8 winners (scaled_mm keys): the keys for each scale form, the
values for each of our templates (or the note that skips one), and torch's own lookup code
building the same keys for torch._scaled_mm calls compiled on the CPU."""

from __future__ import annotations

import logging

import pytest

from autotune_cli.export import inductor_key, inductor_table, inductor_value

H200 = "NVIDIA H200"
FAKE = "FAKE GPU"
TILE = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_stages": 4, "num_warps": 8,
        "ACC_TYPE": "tl.float32", "ALLOW_TF32": False, "SCALE": "row", "OUT_DTYPE": "bfloat16", "FAST_ACCUM": False}


def fp8(m=2048, n=4096, k=4096, scale="row", bias=None, out_dtype="bfloat16", fast_accum=False):
    return {"op": "scaled_mm", "m": m, "n": n, "k": k, "b": 1, "dtype": "float8_e4m3fn", "layout": "nt",
            "bias": bias, "allow_tf32": False, "device": "cuda", "scale": scale, "out_dtype": out_dtype,
            "fast_accum": fast_accum}


def entry(prob, uid, params=None, device_name=H200, ms=0.05):
    return {"problem": prob, "winner": {"uid": uid, "params": dict(params or {}), "ms": ms, "tflops": 1.0},
            "fingerprint": {"device_name": device_name, "device_type": "cuda", "capability": "9.0",
                            "sm_count": 132}, "candidates": []}


def test_rowwise_and_tensorwise_keys():
    row = inductor_key(fp8(m=8, n=64, k=32), H200)
    assert row == ("NVIDIA H200+((torch.float8_e4m3fn, [8, 32], [32, 1]), (torch.float8_e4m3fn, [32, 64], [1, 32]), "
                   "(torch.float32, [8, 1], [1, 1]), (torch.float32, [1, 64], [64, 1]))+scaled_mm")
    tensor = inductor_key(fp8(m=8, n=64, k=32, scale="tensor", bias="n", out_dtype="float16"), None)
    assert tensor == ("((torch.float8_e4m3fn, [8, 32], [32, 1]), (torch.float8_e4m3fn, [32, 64], [1, 32]), "
                      "(torch.float32, [], []), (torch.float32, [], []), (torch.float16, [64], [1]))+scaled_mm")


def test_every_scale_form_gets_the_winner():
    table, notes = inductor_table([entry(fp8(scale="tensor"), "aten::_scaled_mm"),
                                   entry(fp8(m=16), "aten::_scaled_mm")])
    assert notes == []
    assert len(table) == 3 + 2  # per tensor: [], [1], [1, 1]; per row: scale_b's two strides
    assert all(v == [{"template_id": "aten::_scaled_mm"}] for v in table.values())
    forms = [k for k in table if "[2048, 4096], [4096, 1]" in k]
    assert any("(torch.float32, [1], [1]), (torch.float32, [1], [1])" in k for k in forms)
    assert any("(torch.float32, [1, 1], [1, 1]), (torch.float32, [1, 1], [1, 1])" in k for k in forms)
    rows = [k for k in table if "[16, 4096]" in k]
    assert {("[1, 4096], [4096, 1]" in k, "[1, 4096], [1, 1]" in k) for k in rows} == {(True, False), (False, True)}


def test_persistent_tma_winner_maps_to_inductors_epilogue_scaling_template():
    params = {**TILE, "FLATTEN": 1, "PROMOTE_IN_DOT": 1, "WARP_SPECIALIZE": 0}
    value = inductor_value({"uid": "triton::scaled_mm_persistent_tma", "params": params}, fp8(k=4000),
                           include_hash=False, sm_count=132)
    assert value == {"template_id": "triton::scaled_mm_device_tma_epilogue_scaling", "EVEN_K": False,
                     "USE_FAST_ACCUM": False, "ACC_TYPE": "tl.float32", "num_stages": 4, "num_warps": 8,
                     "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "hint_override": None, "GROUP_M": 8,
                     "TMA_SIZE": 128, "NUM_SMS": 132, "TMA_EXPERIMENTAL_API": False,
                     "SCALE_RECIPE_A": 1, "SCALE_RECIPE_B": 1}
    tensor = inductor_value({"uid": "triton::scaled_mm_persistent_tma", "params": params},
                            fp8(scale="tensor", fast_accum=True), include_hash=False, sm_count=132)
    assert (tensor["SCALE_RECIPE_A"], tensor["USE_FAST_ACCUM"], tensor["EVEN_K"]) == (0, True, True)
    table, notes = inductor_table([entry(fp8(), "triton::scaled_mm_persistent_tma", params)])
    assert len(table) == 2
    assert any("mapped without FLATTEN=1, PROMOTE_IN_DOT=1" in n for n in notes)
    # Inductor offers the TMA template (and so takes the entry) only with its switch on
    assert any("enable_persistent_tma_matmul = True" in n for n in notes)


def test_tiled_winner_maps_to_triton_mm_with_or_without_a_bias():
    value = inductor_value({"uid": "triton::scaled_mm", "params": {**TILE, "EVEN_K": True}}, fp8(bias="n"),
                           include_hash=False)
    assert value["template_id"] == "triton::mm" and "SCALE_RECIPE_A" not in value and "NUM_SMS" not in value
    assert (value["BLOCK_K"], value["USE_FAST_ACCUM"]) == (128, False)


def test_a_blockwise_winner_is_written_under_the_column_major_scales_aten_only():
    """Blockwise (1x128 of A, 128x128 of B): one key, the scales column-major as cuBLASLt
    takes them; cuBLASLt's winner is written, a tiled Triton winner is skipped with a note
    (Inductor's blockwise template is another kernel)."""
    prob = fp8(m=256, n=512, k=1024, scale="block", bias="n")
    assert inductor_key(prob, H200) == (
        "NVIDIA H200+((torch.float8_e4m3fn, [256, 1024], [1024, 1]), (torch.float8_e4m3fn, [1024, 512], [1, 1024]), "
        "(torch.float32, [256, 8], [1, 256]), (torch.float32, [8, 4], [1, 8]), (torch.bfloat16, [512], [1]))"
        "+scaled_mm")
    table, notes = inductor_table([entry(prob, "aten::_scaled_mm")])
    assert notes == [] and list(table.values()) == [[{"template_id": "aten::_scaled_mm"}]]
    # one row of A (decode): torch takes its [1, k/128] scale contiguous too; both forms written
    decode = inductor_table([entry(fp8(m=1, n=512, k=1024, scale="block"), "aten::_scaled_mm")])[0]
    assert len(decode) == 2
    assert any("(torch.float32, [1, 8], [1, 1])" in key for key in decode)
    assert any("(torch.float32, [1, 8], [8, 1])" in key for key in decode)
    params = {**TILE, "SCALE": "block"}
    table, notes = inductor_table([entry(fp8(m=256, n=512, k=1024, scale="block"), "triton::scaled_mm_blockwise",
                                         params)])
    assert table == {}
    (note,) = notes
    assert "triton::scaled_mm_blockwise" in note and "skipped" in note and "no Inductor lookup-table" in note


@pytest.mark.parametrize("uid, prob, why", [
    ("triton::scaled_mm_splitk", fp8(m=8), "no Inductor lookup-table equivalent"),
    ("triton::scaled_mm_persistent_tma", fp8(bias="n"), "only without one"),
])
def test_winners_inductor_has_no_choice_for_are_skipped_with_a_note(uid, prob, why):
    params = {**TILE, "SPLIT_K": 4} if "splitk" in uid else TILE
    table, notes = inductor_table([entry(prob, uid, params)])
    assert table == {}
    (note,) = notes
    assert uid in note and "skipped" in note and why in note and f"scaled_mm {prob['m']}x4096x4096" in note


# -- torch's own key building, on the CPU ---------------------------------------------------------

def test_torch_builds_our_scaled_mm_keys_and_uses_our_aten_entries():
    """Compile torch._scaled_mm calls (rowwise; tensorwise 0-d, [1] and [1, 1] scales with a
    bias) with Inductor on the CPU under max-autotune (ATen only), through a LookupTableChoices
    that sees our table: torch builds our keys, finds our entries, and the results are eager's."""
    import torch

    try:
        from torch._inductor import config
        from torch._inductor.lookup_table import LookupTableChoices
        from torch._inductor.virtualized import V
    except ImportError as exc:
        pytest.skip(f"this torch has no Inductor lookup table: {exc}")
    m, n, k = 16, 48, 64
    g = torch.Generator().manual_seed(0)
    a = (torch.randn(m, k, generator=g) * 4).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, generator=g) * 4).to(torch.float8_e4m3fn).t()
    bias = torch.randn(n, generator=g).to(torch.bfloat16)
    row_a, row_b = torch.rand(m, 1, generator=g) + 0.5, torch.rand(1, n, generator=g) + 0.5
    scales = [torch.tensor(0.5), torch.tensor([0.5]), torch.tensor([[0.5]])]
    probs = [fp8(m, n, k, "row"), fp8(m, n, k, "tensor", bias="n")]
    table, notes = inductor_table([entry(p, "aten::_scaled_mm", device_name=FAKE) for p in probs])
    assert notes == []
    keys = []

    class CpuLookup(LookupTableChoices):
        # The stock class turns itself off without CUDA and has no device key for a CPU.
        @staticmethod
        def _get_device_key(device):
            return FAKE

        def _get_lookup_table(self):
            return config.lookup_table.table or {}

        def _finalize_template_configs(self, template_choices, kernel_inputs, templates_in, op_name,
                                       kwarg_overrides=None):
            keys.append((op_name, self.make_lookup_key(kernel_inputs, op_name, include_device=True),
                         [t.uid for t in templates_in]))
            return super()._finalize_template_configs(template_choices, kernel_inputs, templates_in, op_name,
                                                      kwarg_overrides)

    def fn(a, b, bias, row_a, row_b, s0, s1, s2):
        return [torch._scaled_mm(a, b, row_a, row_b, out_dtype=torch.bfloat16)] + [
            torch._scaled_mm(a, b, s, s, bias=bias, out_dtype=torch.bfloat16) for s in (s0, s1, s2)]

    args = (a, b, bias, row_a, row_b, *scales)
    messages = []

    class Collect(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    logger = logging.getLogger("torch._inductor.lookup_table.choices")
    handler, level = Collect(level=logging.INFO), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    torch._dynamo.reset()
    try:
        with config.patch({"lookup_table.table": table, "force_disable_caches": True, "max_autotune": True,
                           "max_autotune_gemm_backends": "ATEN"}), V.set_choices_handler(CpuLookup()):
            got = torch.compile(fn, dynamic=False, fullgraph=True)(*args)
    except Exception as exc:  # noqa: BLE001 - no C++ compiler, or an Inductor that cannot lower this on the CPU
        pytest.skip(f"Inductor could not compile on this CPU: {type(exc).__name__}: {exc}")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        torch._dynamo.reset()
    assert [op for op, _, _ in keys] == ["scaled_mm"] * 4
    assert all("aten::_scaled_mm" in uids for _, _, uids in keys)
    assert {key for _, key, _ in keys} <= set(table), sorted({key for _, key, _ in keys} - set(table))
    assert len({key for _, key, _ in keys}) == 4
    assert sum("lookup hit for scaled_mm" in msg for msg in messages) == 4, messages
    for value, want in zip(got, fn(*args)):
        torch.testing.assert_close(value, want)
