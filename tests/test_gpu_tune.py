"""On a GPU: the CLI tunes real problems, Triton candidates compile and pass verification."""

import json

import pytest


@pytest.mark.gpu
@pytest.mark.parametrize("args", [
    ["--m", "512", "--n", "384", "--k", "256", "--dtype", "bfloat16"],
    ["--m", "300", "--n", "200", "--k", "100", "--dtype", "float32", "--layout", "tt", "--bias"],
    ["--m", "128", "--n", "256", "--k", "64", "--dtype", "float16", "--batch", "4", "--layout", "nt"],
])
def test_cuda_tune_end_to_end(cli, cache_dir, args):
    code, out, err = cli("mm", "--device", "cuda", "--json", *args)
    assert code == 0, err
    doc = json.loads(out)
    ok = [c for c in doc["candidates"] if c["status"] == "ok"]
    assert any(c["uid"].startswith("triton::") for c in ok), doc["candidates"]
    assert doc["winner"]["ms"] == min(c["ms"] for c in ok)
    assert doc["fingerprint"]["device_type"] == "cuda" and doc["fingerprint"]["sm_count"] > 0


@pytest.mark.gpu
@pytest.mark.parametrize("args", [
    ["--m", "256", "--n", "1001", "--k", "100", "--dtype", "float16"],
    ["--m", "200", "--n", "777", "--k", "333", "--dtype", "bfloat16", "--bias", "--layout", "nt"],
])
def test_cuda_alignment_templates_copy_and_verify(cli, cache_dir, args):
    """Misaligned rows on a GPU: the alignment templates copy operands with the Triton row
    copy into padded storage and write outputs with padded rows; every one verifies."""
    code, out, err = cli("mm", "--device", "cuda", "--json", *args)
    assert code == 0, err
    doc = json.loads(out)
    aligned = [c for c in doc["candidates"] if c["uid"] in ("aten::mm_aligned", "triton::mm_padded")]
    assert {c["uid"] for c in aligned} == {"aten::mm_aligned", "triton::mm_padded"}
    assert all(c["status"] == "ok" for c in aligned), [(c["uid"], c["status"], c.get("error")) for c in aligned]
