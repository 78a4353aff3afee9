"""aten templates: cuBLAS on the GPU (or the CPU BLAS), one config each."""

from __future__ import annotations

from typing import Any

from ..problem import GemmProblem
from .base import Operands, Runnable, Template
from .registry import register_template


class AtenTemplate(Template):
    backend = "aten"
    vendor = True  # cuBLAS (search.pick)
    params_schema: dict = {}  # one config: torch's own call takes no params

    def __init__(self, op: str) -> None:
        self.op = op
        self.uid = f"aten::{op}"
        self.ops = (op,)

    def source_text(self) -> str:
        # The kernel is the library's: its identity is torch's version, already in the fingerprint.
        return f"aten::{self.op} v1"

    def build(self, problem: GemmProblem, params: dict[str, Any], kernel_dir: str) -> Runnable:
        import torch

        allow_tf32 = problem.allow_tf32

        def set_precision() -> None:
            if problem.device == "cuda":
                torch.backends.cuda.matmul.allow_tf32 = allow_tf32

        if self.op == "mm":
            def run(ops: Operands) -> None:
                set_precision()
                torch.mm(ops.a, ops.b, out=ops.out)
        elif self.op == "addmm":
            def run(ops: Operands) -> None:
                set_precision()
                torch.addmm(ops.bias, ops.a, ops.b, out=ops.out)
        else:
            def run(ops: Operands) -> None:
                set_precision()
                torch.bmm(ops.a, ops.b, out=ops.out)
        return run


# One template per op: the library's call is the op's own.
ATEN_TEMPLATES = {op: register_template(AtenTemplate(op)) for op in ("mm", "addmm", "bmm")}
