"""Use the winners from Python.

    import autotune_cli

    autotune_cli.lookup(m=1024, n=4096, k=4096, dtype="bfloat16")  # the cached winner, or None
    out = autotune_cli.mm(a, b)          # runs this machine's cached winner for a @ b
    out = autotune_cli.addmm(bias, a, b)
    out = autotune_cli.bmm(a, b)
    out = autotune_cli.linear(x, weight, bias)  # x [..., K] folded, B = weight.T
    out = autotune_cli.scaled_mm(a8, b8, scale_a, scale_b, out_dtype=torch.bfloat16)  # float8

A call builds the GemmProblem from its tensors (shape, dtype, device, and the layout read
from the strides), finds the entry `autotune mm …` stored for it under this machine's
fingerprint, and runs its winner: an aten::mm|addmm|bmm winner is the torch call itself,
any other the template's kernel (built once; a Triton kernel into the cache's kernels
folder). Everything up to the kernel is worked out on the first call with given shapes,
strides and dtype and remembered, so a later call is one dict lookup away from the kernel.
Re-tuned in the same process? Call `reset()`.

The output is made as the winner was timed: where N's rows are misaligned, the alignment
templates (triton::mm_padded, aten::mm_aligned) ask for rows padded to 16 bytes or more
(`Template.out_pitch`), as Inductor's max-autotune does (stride [50264, 1] for a vocabulary
of 50257), so the result is a [M, N] view of wider rows and `out.is_contiguous()` is False.
Its values are those of torch.mm; call `.contiguous()` where a packed tensor is needed.

With nothing cached for a problem (or a problem autotune cannot express) the call falls back
to torch.mm / addmm / bmm and warns once per problem with an AutotuneFallbackWarning (with
nothing cached, once for all the row counts of a product). Tensors
that need gradients go to torch too: the Triton kernels have no backward.

The fingerprint that selects an entry is the tuner's own, computed for the template
selection the entry was tuned with (api/lookup.py); so an entry from another machine, or
one whose template source has changed since, is never used.

The alignment templates copy B into a padded buffer; a call whose B is the same weight as the
call before (an nn.Parameter or a view of one, at the same address, with the same version
counter) skips that copy. torch counts every in-place write (`w.add_`, `w.copy_`, an optimizer
step, `load_state_dict`); after a write it does not see (through `w.data`, a kernel of one's
own), call `reset()`.

The modules: api/lookup.py (which entry serves a problem here), api/problems.py (tensors ->
problem, the plan key), api/calls.py (a built kernel -> a cheap call), api/dispatcher.py
(plans and dispatches); this one holds the default dispatcher and its functions.
"""

from __future__ import annotations

from .calls import Built
from .dispatcher import Dispatch, Dispatcher, current_gpu, gpu_index
from .lookup import AutotuneFallbackWarning

__all__ = [
    "AutotuneFallbackWarning", "Built", "Dispatch", "Dispatcher", "addmm", "bmm", "current_gpu", "default_dispatcher",
    "dispatch_info", "gpu_index", "linear", "lookup", "lookup_entry", "mm", "reset", "scaled_mm",
]


# -- the default dispatcher: autotune_cli.mm and friends -------------------------------------------

default_dispatcher = Dispatcher()
mm = default_dispatcher.mm
addmm = default_dispatcher.addmm
bmm = default_dispatcher.bmm
linear = default_dispatcher.linear
scaled_mm = default_dispatcher.scaled_mm
lookup = default_dispatcher.lookup
lookup_entry = default_dispatcher.lookup_entry
dispatch_info = default_dispatcher.dispatch_info
reset = default_dispatcher.reset
