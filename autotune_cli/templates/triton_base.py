"""What every Triton template shares: the jinja environment, the params
every kernel takes, the render context every template fills the same way, and the kernels
they build (`TritonKernel`: the call and the warm-up; `OneLaunchKernel`: one function on
one grid, its bound launch and its launch parts).

A subclass names its `.jinja` file, its required config keys and optional defaults, adds
the params it alone derives in `extra_params`, and passes its own variables to `render`.
"""

from __future__ import annotations

import hashlib
import os
import sys
from abc import abstractmethod
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

from ..problem import GemmProblem
from .base import Operands, Template
from .kernel import Kernel
from .launch import Launcher
from .params import Bool, Choice, Int, check_params

DIGEST_MARK = "__DIGEST__"
TILE_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_stages", "num_warps")
BLOCK = Int(16, 1024, power_of_two=True)  # tl.arange needs a power of two; 16: the dot's least
ZERO_ONE = Choice((0, 1))
# The params of every Triton template: the tile, and what full_params fixes for all.
TILE_SCHEMA = {
    "BLOCK_M": BLOCK, "BLOCK_N": BLOCK, "BLOCK_K": BLOCK, "GROUP_M": Int(1, 256),
    "num_stages": Int(1, 8), "num_warps": Choice((1, 2, 4, 8, 16, 32)),
    "ACC_TYPE": Choice(("tl.float32",)), "ALLOW_TF32": Bool(),
}


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@lru_cache(maxsize=None)
def jinja_template(path: Path):
    import jinja2

    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    return env.from_string(path.read_text())


def bias_arguments(ops: Operands, row_vector: bool) -> tuple[Any, tuple[int, ...]]:
    """The bias pointer and its (row, column) strides, as every Triton template takes them:
    with no bias the output stands in (strides 0, never read); a [N] row vector (`row_vector`)
    is read with row stride 0; an [M, N] matrix with its own strides."""
    if ops.bias is None:
        return ops.out, (0, 0)
    if row_vector:
        return ops.bias, (0, ops.bias.stride(0))
    return ops.bias, tuple(ops.bias.stride())


Step = tuple[Launcher, tuple, tuple]  # (launcher, grid, every argument): one launch


class TritonKernel(Kernel):
    """What a Triton template builds: Triton functions launched in order on fixed grids,
    each through a Launcher (cheap after the first launch). A subclass says what one call
    launches (`steps`); the call and the warm-up are written here once, so that a warm-up
    compiles exactly what a call launches."""

    compiles = True
    launcher: Launcher  # the first launch's
    # device -> (workspace, counters or None) the kernel keeps and writes on every call
    # (a split-K sum's): none by default
    workspaces: Mapping[Any, tuple] = MappingProxyType({})

    @abstractmethod
    def steps(self, ops: Operands) -> tuple[Step, ...]:
        """The launches of one call on `ops`, in order."""

    def before_launch(self, ops: Operands) -> None:
        """Done before a call's launches, after its arguments are worked out (not before a
        warm-up, which launches nothing): nothing by default."""

    def __call__(self, ops: Operands) -> None:
        steps = self.steps(ops)
        self.before_launch(ops)
        for launcher, grid, args in steps:
            launcher(grid, *args)

    def warmup(self, ops: Operands) -> list:
        """Compile what a call on `ops` launches, with its arguments and launch options,
        without launching (a compile-pool process calls this; the timing process then finds
        the binaries in Triton's cache). The compiled kernels; none under the interpreter,
        which has nothing to compile."""
        if not hasattr(self.launcher.kernel, "warmup"):
            return []
        return [launcher.kernel.warmup(*args, grid=grid, **launcher.options)
                for launcher, grid, args in self.steps(ops)]


class OneLaunchKernel(TritonKernel):
    """One Triton function on one grid, launched with `arguments(ops)`: every argument,
    positionally. Its `launch_parts` let a caller launch it its own way (torch.compile's
    wrap_triton); its `bind` works out the arguments after the tensors once."""

    def __init__(self, kernel, params: dict[str, Any], grid: tuple, arguments: Callable[[Operands], tuple]) -> None:
        self.launcher = Launcher(kernel, params["num_warps"], params["num_stages"], bool(params.get("PDL")))
        self.grid = grid
        self.arguments = arguments
        self.launch_parts = (kernel, grid, arguments, dict(self.launcher.options))

    def steps(self, ops: Operands) -> tuple[Step, ...]:
        return ((self.launcher, self.grid, self.arguments(ops)),)

    def __call__(self, ops: Operands) -> None:  # one launch: no steps to build
        self.launcher(self.grid, *self.arguments(ops))

    def bind(self, sample: Operands, reuse_b: bool = False):
        """(a, b, out, bias) -> launch, for operands laid out as `sample` (see base.bound):
        the arguments after the tensors worked out once, the launch bound. None where the
        arguments are not tensors of the call followed by plain numbers."""
        args = self.arguments(sample)
        lead = 0
        while lead < len(args) and hasattr(args[lead], "data_ptr"):
            lead += 1
        tail = args[lead:]
        if not plain_numbers(tail):
            return None
        fields = (sample.a, sample.b, sample.out, sample.bias)
        if len({id(f) for f in fields if f is not None}) < sum(f is not None for f in fields):
            return None  # one tensor in two places: which argument is which is not known
        picks = []
        for x in args[:lead]:
            found = [i for i, f in enumerate(fields) if f is x]
            if not found:
                return None  # a tensor the arguments made (a view, a descriptor's base)
            picks.append(found[0])
        go = self.launcher.bind(self.grid, tail, trusted=tuple(i for i, pick in enumerate(picks) if pick == 2))
        if picks == [0, 1, 2, 3]:
            return go
        if picks == [0, 1, 2, 2]:  # no bias: the output stands in
            return lambda a, b, out, bias: go(a, b, out, out)
        return lambda a, b, out, bias: go(*[(a, b, out, bias)[i] for i in picks])


def plain_numbers(values: tuple) -> bool:
    """Whether every value is an int, float or bool: what a bound launch's fixed tail may hold."""
    return all(type(x) in (int, float, bool) for x in values)


class TritonTemplate(Template):
    backend = "triton"
    template_file: Path
    config_keys: tuple[str, ...] = TILE_KEYS
    defaults: dict[str, int] = {}  # tuned too, but optional in a config
    params_schema = TILE_SCHEMA

    def source_text(self) -> str:
        """The jinja file and the Python of every Triton template class this one is built
        from, so that a change to any of them expires the winners."""
        modules = []
        for cls in type(self).__mro__:
            if issubclass(cls, TritonTemplate) and cls.__module__ not in modules:
                modules.append(cls.__module__)
        return self.template_file.read_text() + "".join(
            Path(sys.modules[name].__file__).read_text() for name in modules)

    def full_params(self, problem: GemmProblem, config: dict[str, Any]) -> dict[str, Any]:
        missing = [key for key in self.config_keys if key not in config]
        if missing:
            raise ValueError(f"{self.uid} config lacks {', '.join(missing)}: {config}")
        params = {key: int(config[key]) for key in self.config_keys}
        for key, default in self.defaults.items():
            params[key] = int(config.get(key, default))
        self.extra_params(problem, params)
        params["ACC_TYPE"] = "tl.float32"
        params["ALLOW_TF32"] = bool(problem.allow_tf32)
        return params

    def extra_params(self, problem: GemmProblem, params: dict[str, Any]) -> None:
        """Add (in place) the params this template derives from the problem."""

    def render_context(self, problem: GemmProblem, params: dict[str, Any]) -> dict[str, Any]:
        """The variables every Triton template's jinja file takes. Names carry DIGEST_MARK,
        which `finish` replaces by a hash of the rendered text: a kernel is named by what it
        is, not by the problem it was first rendered for, so problems that render the same
        source (M, N, K are runtime arguments) share one module and one compiled binary.
        The params are checked against `params_schema` first (BadParams, a ValueError): only
        declared ints, bools and known strings reach the source, which is imported."""
        check_params(self, params)
        upcast = problem.device == "cpu" and problem.dtype != "float32"
        if problem.dtype == "float32" and not upcast:
            precision = "tf32" if params["ALLOW_TF32"] else "ieee"
        else:
            precision = ""
        context = {
            "uid": self.uid,
            "digest": DIGEST_MARK,
            "params_desc": ", ".join(f"{k}={v!r}" for k, v in params.items()),
            "kernel_name": f"{self.uid.split('::')[1]}_{DIGEST_MARK}",
            "BLOCK_M": params["BLOCK_M"], "BLOCK_N": params["BLOCK_N"], "BLOCK_K": params["BLOCK_K"],
            "ACC_TYPE": params["ACC_TYPE"],
            "UPCAST": upcast, "INPUT_PRECISION": precision, "HAS_BIAS": problem.op == "addmm",
        }
        if "GROUP_M" in params:  # the kernels that group their tiles (not triton::mm_swap_ab)
            context["GROUP_M"] = params["GROUP_M"]
        return context

    @staticmethod
    def finish(source: str) -> str:
        """Replace DIGEST_MARK by the hash of the rendered text."""
        digest = hashlib.sha256(source.encode()).hexdigest()[:12]
        return source.replace(DIGEST_MARK, digest)

    def render_with(self, problem: GemmProblem, params: dict[str, Any], **own: Any) -> str:
        return self.finish(jinja_template(self.template_file).render(**self.render_context(problem, params), **own))

    def source_for_build(self, problem: GemmProblem, params: dict[str, Any]) -> str:
        """The rendered kernel source `build` loads, for a problem whose op this template
        serves (else ValueError)."""
        if problem.op not in self.ops:
            raise ValueError(f"{self.uid} does not serve {problem.op}")
        return self.render(problem, params)


def output_tiles(problem: GemmProblem, params: dict[str, Any]) -> int:
    """BLOCK_M x BLOCK_N tiles over one [M, N] output."""
    return -(-problem.m // params["BLOCK_M"]) * -(-problem.n // params["BLOCK_N"])
