"""triton::mm (mm and addmm) and triton::bmm: a tiled Triton GEMM rendered from jinja.

The tuned config (BLOCK_M/N/K, GROUP_M, num_stages, num_warps) and the values the problem
fixes (EVEN_K, ACC_TYPE, ALLOW_TF32, UPCAST, HAS_BIAS, BATCHED) are written into the kernel
source as literals, so each choice is one readable file of real Triton code. Strides are
runtime arguments, so one kernel serves every layout.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..problem import GemmProblem
from .base import Operands, Runnable, Template
from .registry import register_template

TEMPLATE_FILE = Path(__file__).with_name("triton_mm.py.jinja")
CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_stages", "num_warps")


@lru_cache(maxsize=1)
def _jinja_template():
    import jinja2

    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    return env.from_string(TEMPLATE_FILE.read_text())


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


class TritonMMTemplate(Template):
    backend = "triton"

    def __init__(self, uid: str, ops: tuple[str, ...]) -> None:
        self.uid = uid
        self.ops = ops

    def source_text(self) -> str:
        return TEMPLATE_FILE.read_text() + Path(__file__).read_text()

    def full_params(self, problem: GemmProblem, config: dict[str, Any]) -> dict[str, Any]:
        missing = [key for key in CONFIG_KEYS if key not in config]
        if missing:
            raise ValueError(f"{self.uid} config lacks {', '.join(missing)}: {config}")
        params = {key: int(config[key]) for key in CONFIG_KEYS}
        params["EVEN_K"] = problem.k % params["BLOCK_K"] == 0
        params["ACC_TYPE"] = "tl.float32"
        params["ALLOW_TF32"] = bool(problem.allow_tf32)
        return params

    def render(self, problem: GemmProblem, params: dict[str, Any]) -> str:
        upcast = problem.device == "cpu" and problem.dtype != "float32"
        if problem.dtype == "float32" and not upcast:
            precision = "tf32" if params["ALLOW_TF32"] else "ieee"
        else:
            precision = ""
        digest = hashlib.sha256(
            repr((self.uid, problem.key(), sorted(params.items()), upcast)).encode()
        ).hexdigest()[:12]
        return _jinja_template().render(
            uid=self.uid,
            problem_desc=problem.describe(),
            params_desc=", ".join(f"{k}={v}" for k, v in params.items()),
            kernel_name=f"{self.uid.split('::')[1]}_{digest}",
            BLOCK_M=params["BLOCK_M"], BLOCK_N=params["BLOCK_N"], BLOCK_K=params["BLOCK_K"],
            GROUP_M=params["GROUP_M"], ACC_TYPE=params["ACC_TYPE"], EVEN_K=params["EVEN_K"],
            UPCAST=upcast, INPUT_PRECISION=precision,
            HAS_BIAS=problem.op == "addmm", BATCHED=problem.op == "bmm",
        )

    def build(self, problem: GemmProblem, params: dict[str, Any], kernel_dir: str) -> Runnable:
        source = self.render(problem, params)
        kernel = load_kernel(source, kernel_dir)
        num_warps = params["num_warps"]
        num_stages = params["num_stages"]
        bm, bn = params["BLOCK_M"], params["BLOCK_N"]
        m, n, k = problem.m, problem.n, problem.k
        grid = (((m + bm - 1) // bm) * ((n + bn - 1) // bn), problem.b if problem.op == "bmm" else 1)
        batched = problem.op == "bmm"
        bias_strides_n = problem.op == "addmm" and problem.bias == "n"

        def arguments(ops: Operands) -> tuple:
            a, b, c = ops.a, ops.b, ops.out
            sa, sb, sc = a.stride(), b.stride(), c.stride()
            if batched:
                a_args, b_args, c_args = sa, sb, sc
            else:
                a_args, b_args, c_args = (0, *sa), (0, *sb), (0, *sc)
            if ops.bias is None:
                bias, bias_args = c, (0, 0)
            elif bias_strides_n:
                bias, bias_args = ops.bias, (0, ops.bias.stride(0))
            else:
                bias, bias_args = ops.bias, ops.bias.stride()
            return (a, b, c, bias, m, n, k, *a_args, *b_args, *c_args, *bias_args)

        def run(ops: Operands) -> None:
            kernel[grid](*arguments(ops), num_warps=num_warps, num_stages=num_stages)

        def warmup(ops: Operands) -> None:
            """Compile for these operands without launching: a compile-pool process calls
            this, and the timing process then finds the binary in Triton's cache."""
            if hasattr(kernel, "warmup"):  # the interpreter has nothing to compile
                kernel.warmup(*arguments(ops), grid=grid, num_warps=num_warps, num_stages=num_stages)

        run.warmup = warmup  # type: ignore[attr-defined]
        return run


def load_kernel(source: str, kernel_dir: str):
    """The one @triton.jit function of a rendered source."""
    (kernel,) = load_kernels(source, kernel_dir, count=1)
    return kernel


def load_kernels(source: str, kernel_dir: str, count: int) -> list:
    """Write rendered source to a file (Triton reads a kernel's source from its file), import
    it once per process, and return its @triton.jit functions in the order they are defined."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    module_name = f"autotune_kernel_{digest}"
    module = sys.modules.get(module_name)
    if module is None:
        directory = Path(kernel_dir)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{module_name}.py"
        if not path.exists() or path.read_text() != source:
            fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
            with os.fdopen(fd, "w") as handle:
                handle.write(source)
            os.replace(tmp, path)
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(module_name, None)
            raise
    kernels = [v for v in vars(module).values() if hasattr(v, "run") and hasattr(v, "fn")]
    if len(kernels) != count:
        raise RuntimeError(f"{module.__file__} defines {len(kernels)} kernels, expected {count}")
    return kernels


register_template(TritonMMTemplate("triton::mm", ("mm", "addmm")))
register_template(TritonMMTemplate("triton::bmm", ("bmm",)))
