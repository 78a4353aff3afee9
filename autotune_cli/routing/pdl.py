"""The programmatic-dependent-launch form of a routed winner: where Inductor launches a
graph's kernels so, our GEMVs are launched so too (the backend's `pdl`)."""

from __future__ import annotations

import functools
from dataclasses import replace

from ..api import Dispatch, Dispatcher

__all__ = ["PDL_UIDS", "pdl_form"]

PDL_UIDS = ("triton::gemv",)  # the templates with a programmatic dependent launch form (PDL=1)


def pdl_form(dispatcher: Dispatcher, info: Dispatch, built, device):
    """(info, built) of the winner as a programmatic dependent launch, where it is a PDL_UIDS
    kernel launched without one and the device and Triton can launch so (the template's
    `fit_to_device`): in a graph whose kernels Inductor launches so, each boundary of a
    decode step may then overlap the kernel before it draining. Else as given. The same
    kernel but for its first instruction (it waits for the kernel before it) and its launch."""
    from pathlib import Path

    from ..api import gpu_index

    if built is None or info.uid not in PDL_UIDS or info.params.get("PDL") or device.type != "cuda":
        return info, built
    made = _pdl_kernel(info.uid, built.problem, tuple(sorted(info.params.items())),
                       str(Path(dispatcher.cache_dir) / "kernels"), gpu_index(device))
    if made is None:
        return info, built
    params, kernel = made
    return replace(info, params=params), replace(built, kernel=kernel)


@functools.lru_cache(maxsize=None)
def _pdl_kernel(uid: str, problem, params: tuple, kernel_dir: str, gpu: int):
    """(params, kernel) of a winner's PDL form, or None where the device or Triton cannot
    launch so: built once per winner and GPU, as the dispatcher builds the plain form once
    per call signature (every layer's matmul of one problem asks again)."""
    from ..hardware.device import probe_device
    from ..templates import get_template

    template = get_template(uid)
    fitted = template.fit_to_device({**dict(params), "PDL": 1}, probe_device("cuda", gpu))
    if not fitted.get("PDL"):
        return None
    fitted = template.full_params(problem, fitted)
    return fitted, template.build(problem, fitted, kernel_dir)
