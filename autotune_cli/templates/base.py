"""What a template is: data (uid, ops it serves, source hash) plus render and build.

A template never runs anything at import: `build` is called inside a worker process and
imports torch (and triton) there. `Operands` is what a built kernel receives.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable

from ..problem import GemmProblem


@dataclass
class Operands:
    """The tensors of one call: `out` is written by the kernel."""

    a: Any
    b: Any
    out: Any
    bias: Any = None


Runnable = Callable[[Operands], None]


def torch_dtype(name: str):
    """The torch dtype a problem's dtype name stands for (imports torch: call in `build`)."""
    import torch

    return {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[name]


class Template(ABC):
    """A family of kernels for some ops; its configs come from the heuristics registry."""

    uid: str = ""
    ops: tuple[str, ...] = ()
    backend: str = ""  # "aten", "triton", or a plugin's own

    def supports(self, problem: GemmProblem) -> bool:
        return problem.op in self.ops

    def unavailable_reason(self, problem: GemmProblem, device) -> str | None:
        """Why this template cannot run on `device` (a DeviceInfo), or None if it can.
        E.g. a TMA template needs compute capability >= 9.0. Checked by the prune pipeline."""
        return None

    @abstractmethod
    def source_text(self) -> str:
        """The text whose hash goes in the fingerprint: change it and old winners expire."""

    def source_hash(self) -> str:
        """Read once per process: every fingerprint needs it."""
        if "_source_hash" not in self.__dict__:
            self._source_hash = hashlib.sha256(self.source_text().encode()).hexdigest()[:16]
        return self._source_hash

    def full_params(self, problem: GemmProblem, config: dict[str, Any]) -> dict[str, Any]:
        """Every argument the kernel takes: the tuned config plus values fixed by the problem."""
        return dict(config)

    def render(self, problem: GemmProblem, params: dict[str, Any]) -> str | None:
        """Source code of the kernel for these params, where the template has any."""
        return None

    @abstractmethod
    def build(self, problem: GemmProblem, params: dict[str, Any], kernel_dir: str) -> Runnable:
        """Return a callable that runs the kernel on operands (called in a worker)."""

    def __repr__(self) -> str:
        return f"<template {self.uid}>"
