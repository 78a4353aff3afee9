"""Inductor's lookup-table keys: `inductor_key` (and `as_problem`, the check that a
problem is one the table can hold).

The key is ``"<device>+<inputs>+<op>"``:
  * ``<device>`` is ``torch.cuda.get_device_properties(i).gcnArchName``, which on NVIDIA
    GPUs is the device name ("NVIDIA H200"). Inductor also tries the key without the
    device part; ``inductor_key(problem, None)`` builds that one. CPU tensors never match.
  * ``<inputs>`` is ``str(tuple((dtype, list(size), list(stride)) for each input))``, e.g.
    ``((torch.bfloat16, [1024, 4096], [4096, 1]), (torch.bfloat16, [4096, 512], [512, 1]))``,
    followed for addmm by ``+alpha=1&beta=1`` (its scalars, sorted, joined by ``&``).
  * ``<op>`` is the lowering's name: ``mm``, ``addmm``, ``bmm``.
  addmm's inputs are (bias, mat1, mat2). Triton templates see the bias expanded to
  ``[m, n]``; a ``[n]`` bias becomes stride ``[0, 1]``. ATen choices see the bias as given
  (``[n]``, stride ``[1]``) in torch 2.13 (and in 2.11 without max-autotune), but expanded
  in 2.11 under max-autotune; an ATen addmm winner is therefore written under both keys.
  Under the expanded key it is ``aten::bias_addmm``: ``aten::addmm`` there would make
  Inductor materialise the [m, n] expansion (an elementwise kernel) before cuBLAS, where
  ``bias_addmm`` passes the [n] row to cuBLASLt's bias epilogue, as eager addmm does.

A float8 problem's keys are export/scaled.py's. Imports no torch.
"""

from __future__ import annotations

from ..errors import UserError
from ..problem import FLOAT_DTYPES, GemmProblem
from .scaled import check_scaled_problem, scaled_keys

__all__ = ["inductor_key", "as_problem"]

_OPS = ("mm", "addmm", "bmm", "scaled_mm")


def _fmt_inputs(inputs: list[tuple[str, list[int], list[int]]]) -> str:
    # Same text as str() of a tuple of (torch.dtype, list, list) tuples.
    return "(" + ", ".join(f"({dt}, {size!r}, {stride!r})" for dt, size, stride in inputs) + ")"


def _operand_strides(problem: GemmProblem) -> tuple[list[int], list[int]]:
    m, n, k = problem.m, problem.n, problem.k
    a = [1, m] if problem.a_transposed else [k, 1]
    b = [1, k] if problem.b_transposed else [n, 1]
    if problem.op == "bmm":
        a = [m * k, *a]
        b = [k * n, *b]
    return a, b


def as_problem(problem: GemmProblem | dict) -> GemmProblem:
    """The problem, if Inductor's lookup table can hold it; ValueError saying why not. A dict
    (a problem's JSON object) is checked field by field first."""
    if not isinstance(problem, GemmProblem):
        _check_dict(problem)
        try:
            problem = GemmProblem.from_dict(problem)
        except (UserError, TypeError) as exc:
            raise ValueError(str(exc)) from None
    if problem.op not in _OPS:
        raise ValueError(f"unsupported op {problem.op!r} (Inductor export knows {', '.join(_OPS)})")
    if problem.op == "scaled_mm":
        check_scaled_problem(problem)
    elif problem.dtype not in FLOAT_DTYPES:
        raise ValueError(f"unsupported dtype {problem.dtype!r}")
    return problem


def _check_dict(problem: dict) -> None:
    if not isinstance(problem, dict):
        raise ValueError(f"a problem must be a dict, got {type(problem).__name__}")
    op = problem.get("op")
    if op not in _OPS:
        raise ValueError(f"unsupported op {op!r} (Inductor export knows {', '.join(_OPS)})")
    for name in ("m", "n", "k"):
        value = problem.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"problem field {name!r} must be a positive int, got {value!r}")
    if op == "scaled_mm":
        return  # checked as a problem (scaled.check_scaled_problem)
    if problem.get("dtype") not in FLOAT_DTYPES:
        raise ValueError(f"unsupported dtype {problem.get('dtype')!r}")
    layout = problem.get("layout", "nn")
    if layout not in ("nn", "nt", "tn", "tt"):
        raise ValueError(f"unknown layout {layout!r}")
    if op == "bmm":
        b = problem.get("b", 1)
        if isinstance(b, bool) or not isinstance(b, int) or b < 1:
            raise ValueError(f"problem field 'b' must be a positive int, got {b!r}")
    if op == "addmm" and problem.get("bias") not in ("n", "mn"):
        raise ValueError(f"addmm needs bias 'n' or 'mn', got {problem.get('bias')!r}")
    if op != "addmm" and problem.get("bias") is not None:
        raise ValueError(f"a bias only applies to addmm (op is {op})")


def inductor_key(problem: GemmProblem | dict, device_name: str | None, *, bias_expanded: bool = True) -> str:
    """Inductor's lookup key for `problem` on a device named `device_name`.

    `device_name` None (or "") gives the device-agnostic key, which Inductor tries second.
    `bias_expanded` (addmm with a [n] bias only): True gives the key the Triton templates
    (and, in torch 2.11 under max-autotune, every choice) are looked up with, the bias seen
    as [m, n] with stride [0, 1]; False the key of torch 2.13's ATen choices, bias [n].
    A scaled_mm's key is the one with contiguous scales (scaled.scaled_keys gives
    every form the table is written under).
    """
    problem = as_problem(problem)
    op = problem.op
    if op == "scaled_mm":
        return scaled_keys(problem, device_name)[0]
    dt = f"torch.{problem.dtype}"  # as str() of the torch dtype
    m, n, k = problem.m, problem.n, problem.k
    a_stride, b_stride = _operand_strides(problem)
    if op == "bmm":
        b = problem.b
        inputs = [(dt, [b, m, k], a_stride), (dt, [b, k, n], b_stride)]
    else:
        inputs = [(dt, [m, k], a_stride), (dt, [k, n], b_stride)]
    scalars = ""
    if op == "addmm":
        if problem.bias == "mn":
            bias = (dt, [m, n], [n, 1])
        elif bias_expanded:
            bias = (dt, [m, n], [0, 1])
        else:
            bias = (dt, [n], [1])
        inputs.insert(0, bias)
        # Inductor's addmm lowering records alpha and beta (python ints, 1 by default).
        scalars = "+alpha=1&beta=1"
    body = _fmt_inputs(inputs) + scalars
    parts = [device_name, body, op] if device_name else [body, op]
    return "+".join(parts)
