"""The ptxas every Triton kernel of ours is built with: the one Inductor builds with.

Inductor points TRITON_PTXAS_PATH at the ptxas torch ships (torch/bin/ptxas) at its first
compile in a process, where it is unset. Triton looks its ptxas up once per process and keys
its cache by that ptxas's version, so a process that built a kernel before Inductor's first
compile keeps Triton's own ptxas while the worker processes it starts after get torch's: the
same kernel is built twice, by two assemblers, and the binary a compiled model runs is not
always the one the tune timed. Setting the variable first, as Inductor would, makes every
process agree. Finding torch's folder imports nothing.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

VARIABLE = "TRITON_PTXAS_PATH"


def torch_ptxas(package: str = "torch") -> Path | None:
    """torch's bundled ptxas (`package`'s bin/ptxas), where the installed torch ships one
    (CUDA builds do)."""
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    for folder in locations:
        ptxas = Path(folder) / "bin" / "ptxas"
        if ptxas.is_file() and os.access(ptxas, os.X_OK):
            return ptxas
    return None


def use_compilers_ptxas() -> str | None:
    """Point TRITON_PTXAS_PATH at torch's ptxas unless it is set (a user's choice stands);
    the value in force after, or None where neither is there."""
    if os.environ.get(VARIABLE) is None:
        ptxas = torch_ptxas()
        if ptxas is not None:
            os.environ[VARIABLE] = str(ptxas)
    return os.environ.get(VARIABLE)
