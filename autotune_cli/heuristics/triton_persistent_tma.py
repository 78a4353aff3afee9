"""Heuristics for triton::mm_persistent_tma (templates/triton_persistent_tma.py).

Persistent TMA: every mm/addmm gets the shipped list (scaled down to small problems); whether
the device, the Triton and the strides allow TMA is the template's `unavailable_reason`,
checked by the prune pipeline's "hardware" stage, so a refusal is reported, not hidden.
Its shipped lists carry FLATTEN, read by spaces.shipped_configs.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..templates.triton_persistent_tma import TritonPersistentTMATemplate
from .registry import register_heuristic
from .spaces import shipped_configs
from .triton_mm import TritonSpace



class _PersistentTMA(TritonSpace):
    def shipped_configs(self) -> Iterable[dict[str, Any]]:
        return shipped_configs(self.shipped)  # its lists carry FLATTEN


@register_heuristic(TritonPersistentTMATemplate.uid, "cuda")
class PersistentTMACuda(_PersistentTMA):
    shipped = "triton_persistent_tma_cuda"


@register_heuristic(TritonPersistentTMATemplate.uid, "cpu")
class PersistentTMACpu(_PersistentTMA):
    """Under the interpreter (which runs tensor descriptors since Triton 3.4): two tiles."""

    shipped = "triton_persistent_tma_cpu"
