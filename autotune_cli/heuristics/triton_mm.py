"""Which Triton GEMM configs to try: the shipped lists, scaled to the problem."""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from ..problem import GemmProblem
from ..templates.triton_mm import TritonBMMTemplate, TritonMMTemplate
from ..templates.triton_mm_padded import TritonMMPaddedTemplate
from .registry import Heuristic, register_heuristic
from .spaces import exhaustive_space, shipped_space


def _next_pow2(value: int) -> int:
    return 1 << max(0, (value - 1).bit_length())


def scale_to_problem(config: dict[str, Any], problem: GemmProblem) -> dict[str, Any]:
    """Shrink blocks that are larger than the problem (never below 16, the dot minimum)."""
    scaled = dict(config)
    for key, dim in (("BLOCK_M", problem.m), ("BLOCK_N", problem.n), ("BLOCK_K", problem.k)):
        scaled[key] = min(config[key], max(16, _next_pow2(dim)))
    return scaled


def scaled_unique(configs: Iterable[dict[str, Any]], problem: GemmProblem) -> Iterator[dict[str, Any]]:
    """Each config scaled to the problem, duplicates (after scaling) dropped."""
    seen: set[tuple] = set()
    for config in configs:
        scaled = scale_to_problem(config, problem)
        ident = tuple(sorted(scaled.items()))
        if ident not in seen:
            seen.add(ident)
            yield scaled


class TritonSpace(Heuristic):
    """A user's --space, the exhaustive space, or the shipped list named `shipped`."""

    shipped: str = ""

    def shipped_configs(self) -> Iterable[dict[str, Any]]:
        return shipped_space(self.shipped)

    def _impl(
        self, problem: GemmProblem, search: str, space: list[dict] | None
    ) -> Iterator[dict[str, Any]]:
        if space is not None:
            configs = space
        elif search == "exhaustive":
            configs = exhaustive_space()
        else:
            configs = self.shipped_configs()
        yield from scaled_unique(configs, problem)


@register_heuristic(TritonMMTemplate.uid, "cuda")
@register_heuristic(TritonBMMTemplate.uid, "cuda")
@register_heuristic(TritonMMPaddedTemplate.uid, "cuda")
class TritonMMCuda(TritonSpace):
    shipped = "triton_mm_cuda"


@register_heuristic(TritonMMTemplate.uid, "cpu")
@register_heuristic(TritonBMMTemplate.uid, "cpu")
@register_heuristic(TritonMMPaddedTemplate.uid, "cpu")
class TritonMMCpu(TritonSpace):
    """Under the interpreter a config costs seconds: a few small tiles."""

    shipped = "triton_mm_cpu"
