import json

import pytest

from autotune_cli.errors import UserError
from autotune_cli.problem import GemmProblem, make_problem, normalize_dtype, parse_mnk


def test_flags_pick_the_op():
    assert make_problem(m=8, n=16, k=32).op == "mm"
    addmm = make_problem(m=8, n=16, k=32, bias="n")
    assert addmm.op == "addmm" and addmm.bias_shape() == (16,)
    bmm = make_problem(m=8, n=16, k=32, batch=4)
    assert bmm.op == "bmm" and bmm.a_shape() == (4, 8, 32) and bmm.out_shape() == (4, 8, 16)


@pytest.mark.parametrize("kwargs, message", [
    (dict(m=0, n=1, k=1), "--m must be at least 1"),
    (dict(m=1, n=-3, k=1), "--n must be at least 1"),
    (dict(m=1, n=1, k=1, dtype="int8"), "unsupported dtype"),
    (dict(m=1, n=1, k=1, layout="nx"), "unknown layout"),
    (dict(m=1, n=1, k=1, allow_tf32=True, dtype="float16"), "only applies to float32"),
    (dict(m=1, n=1, k=1, bias="n", batch=2), "cannot be combined"),
    (dict(m=1, n=1, k=1, device="tpu"), "unknown device"),
])
def test_bad_values_are_user_errors(kwargs, message):
    with pytest.raises(UserError, match=message):
        make_problem(**kwargs)


def test_batch_only_for_bmm():
    with pytest.raises(UserError, match="only applies to bmm"):
        GemmProblem(op="mm", m=2, n=2, k=2, b=3)


def test_dtype_aliases():
    assert normalize_dtype("bf16") == "bfloat16"
    assert normalize_dtype("torch.float16") == "float16"
    assert normalize_dtype("FP32") == "float32"


def test_key_is_stable_and_distinguishes_what_matters():
    base = make_problem(m=64, n=32, k=16, dtype="float32")
    assert base.key() == make_problem(m=64, n=32, k=16, dtype="fp32").key()
    variants = [
        make_problem(m=64, n=32, k=16, dtype="float32", allow_tf32=True),
        make_problem(m=64, n=32, k=16, dtype="float32", layout="nt"),
        make_problem(m=64, n=32, k=16, dtype="float32", device="cpu"),
        make_problem(m=64, n=32, k=16, dtype="float32", bias="n"),
        make_problem(m=64, n=32, k=16, dtype="float32", bias="mn"),
        make_problem(m=32, n=64, k=16, dtype="float32"),
    ]
    keys = {v.key() for v in variants} | {base.key()}
    assert len(keys) == len(variants) + 1


def test_json_round_trip():
    problem = make_problem(m=3, n=5, k=7, batch=2, dtype="bf16", layout="tn", device="cpu")
    again = GemmProblem.from_dict(json.loads(json.dumps(problem.to_dict())))
    assert again == problem and hash(again) == hash(problem)


def test_from_dict_rejects_unknown_fields():
    with pytest.raises(UserError, match="unknown problem field"):
        GemmProblem.from_dict({"op": "mm", "m": 1, "n": 1, "k": 1, "colour": "red"})


def test_flops_and_bytes():
    problem = make_problem(m=2, n=3, k=4, batch=5, dtype="float16")
    assert problem.flops == 2 * 5 * 2 * 3 * 4
    assert problem.min_bytes == 2 * 5 * (2 * 4 + 4 * 3 + 2 * 3)


def test_parse_mnk():
    assert parse_mnk("1x2x3") == (1, 2, 3)
    with pytest.raises(UserError):
        parse_mnk("1x2")


@pytest.mark.parametrize("fields, precision, operands, mode", [
    ({"dtype": "float16"}, "float16", "float16", None),
    ({"dtype": "bfloat16"}, "bfloat16", "bfloat16", None),
    ({"dtype": "float32"}, "float32", "float32", "ieee"),
    ({"dtype": "float32", "allow_tf32": True}, "tf32", "tf32", "tf32"),
    ({"dtype": "float8_e4m3fn", "scale": "row"}, "bfloat16", "float8_e4m3fn", None),
    ({"dtype": "float8_e4m3fn", "scale": "tensor", "out_dtype": "float32"}, "float32", "float8_e4m3fn", None),
])
def test_each_meaning_of_precision_has_one_home(fields, precision, operands, mode):
    problem = make_problem(m=16, n=16, k=16, **fields)
    assert problem.precision == precision  # what the result's accuracy is judged by
    assert problem.operand_precision == operands  # what the matrix units read: their rate
    assert problem.fp32_mode == mode  # float32's part of the key
    assert (mode in problem.key().split("/")) if mode else ("ieee" not in problem.key() and "tf32" not in problem.key())


def test_dtype_names_are_torchs():
    pytest.importorskip("torch")
    from autotune_cli.problem import DTYPES, FLOAT_DTYPES
    from autotune_cli.templates.base import torch_dtype

    assert set(FLOAT_DTYPES) < set(DTYPES)
    for name in DTYPES:
        assert str(torch_dtype(name)) == f"torch.{name}"
    with pytest.raises(KeyError):
        torch_dtype("int8")


def test_one_gemm_of_linears_of_one_input():
    """The one rule for linears run as one GEMM (compile, record, model --groups): mm or
    addmm of one M, K, dtype, layout and bias kind, each B a weight's transpose; N summed."""
    from dataclasses import replace

    from autotune_cli.problem import one_gemm

    q = make_problem(m=8, n=64, k=32, dtype="bfloat16", layout="nt")
    k = replace(q, n=16)
    assert one_gemm([q, k, k]) == replace(q, n=96)
    assert one_gemm([q]) is None and one_gemm([q, None]) is None
    assert one_gemm([q, replace(k, k=16)]) is None  # another K
    assert one_gemm([q, replace(k, dtype="float16")]) is None
    nn_q = make_problem(m=8, n=64, k=32, dtype="bfloat16", layout="nn")
    assert one_gemm([nn_q, nn_q]) is None  # B not a weight's transpose
    with_bias = make_problem(m=8, n=64, k=32, dtype="bfloat16", layout="nt", bias="n")
    assert one_gemm([with_bias, with_bias]).n == 128 and one_gemm([with_bias, q]) is None
    column = make_problem(m=8, n=64, k=32, dtype="bfloat16", layout="nt", bias="mn")
    assert one_gemm([column, column]) is None
