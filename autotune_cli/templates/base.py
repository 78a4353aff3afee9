"""What a template is: data (uid, ops it serves, source hash) plus render and build.

A template never runs anything at import: `build` is called inside a worker process and
imports torch (and triton) there. `Operands` is what a built kernel receives; its output is
made by `empty_out`, with the row pitch the template asks for (`Template.out_pitch`).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from typing import Any, Callable, Literal

from ..problem import DTYPES, GemmProblem
from .kernel import Copier, Kernel, Launch, Operands


# What `build` returns: a Kernel (templates/kernel.py), or a plugin's plain callable.
Runnable = Callable[[Operands], None]


def empty_out(problem: GemmProblem, pitch: int | None, dtype, device):
    """An uninitialised output for `problem` whose rows are `pitch` elements apart: a
    logical [M, N] ([B, M, N] for bmm) view of [M, pitch] ([B, M, pitch]) storage, so every
    row, the last included, owns `pitch` elements (a kernel may write the padding). None (or
    N) is the usual contiguous output. Every output made for a kernel comes from here (the
    worker, the compile pool, the timing copies through `empty_out_like`, the Python API
    through `out_allocator`), so a kernel always sees the strides it was timed with."""
    return out_allocator(problem.out_shape(), pitch)(dtype, device)


def empty_out_like(out):
    """A fresh output with the shape, dtype, device and row pitch of `out` (one made by
    `empty_out`): `torch.clone` of a view with padded rows gives a contiguous tensor, and so
    the kernel other strides than the ones it was timed with."""
    import torch

    if out.stride(-1) == 1 and out.stride(-2) > out.shape[-1]:
        return out_allocator(tuple(out.shape), out.stride(-2))(out.dtype, out.device)
    return torch.empty_like(out)  # dense: the same strides


def out_allocator(shape: tuple[int, ...], pitch: int | None, whole_rows: bool = True) -> Callable[[Any, Any], Any]:
    """`empty_out` worked out once for an output shape and pitch: a function (dtype, device)
    -> output, for a caller that makes one per call (the Python API: a slice per call would
    cost microseconds). `whole_rows` False (a kernel that never writes the padding,
    `Template.out_writes_padding`): the last row's padding is not allocated, so the output
    is one allocation (torch.empty_strided), not an allocation and a view."""
    import torch

    empty = torch.empty_strided  # torch.empty parses its arguments more slowly
    cols = shape[-1]
    shape = tuple(shape)
    if pitch is None or pitch == cols:
        dense = [1]
        for size in reversed(shape[1:]):
            dense.append(dense[-1] * size)
        dense_strides = tuple(reversed(dense))
        return lambda dtype, device: empty(shape, dense_strides, dtype=dtype, device=device)
    if pitch < cols:
        raise ValueError(f"an output pitch of {pitch} is narrower than its {cols} columns")
    strides = [1, pitch]
    for size in reversed(shape[1:-1]):
        strides.append(strides[-1] * size)
    strides = tuple(reversed(strides))
    if not whole_rows:
        return lambda dtype, device: empty(shape, strides, dtype=dtype, device=device)
    elements, one = (strides[0] * shape[0],), (1,)  # the last row's padding included
    return lambda dtype, device: empty(elements, one, dtype=dtype, device=device).as_strided(shape, strides)


class _TorchCopier(Copier):
    def __init__(self, dst) -> None:
        self.fixed_copy = dst.copy_

    def __call__(self, src) -> None:
        self.fixed_copy(src)

    def fixed(self, src) -> Callable[[Any], None]:
        return self.fixed_copy


def operand_copier(device: str) -> Callable[[Any], Copier]:
    """How the alignment templates copy an operand into padded storage: `copier(dst)` gives
    the Copier into that one buffer. On CUDA a Triton kernel whose launch is worked out once
    per source layout (templates/row_copy.py: torch's copy_ into a view with another row
    pitch runs at a third of the bandwidth), elsewhere torch's copy_. Call in `build`."""
    if device == "cuda":
        from .row_copy import RowCopier

        return lambda dst: RowCopier(dst, owns_padding=True)  # dst: padded storage of its own
    return _TorchCopier


def stream_capturing(device: str) -> Callable[[], bool]:
    """Whether the current stream is capturing a CUDA graph (never off CUDA)."""
    if device == "cuda":
        import torch

        capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None)
        if capturing is not None:
            return capturing
    return lambda: False


class PaddedOperands:
    """A and B copied into buffers of an alignment template's kernel (rows padded to an
    aligned pitch; the padding stays zero, written as zeros or not at all). `a_buffer` is
    what the kernel is given in place of A, `a_into` its part the copy of A fills; None
    where A is used as given. The same for B."""

    def __init__(self, a_buffer, a_into, b_buffer, b_into, device: str) -> None:
        copier = operand_copier(device)
        self.a_buffer, self.b_buffer = a_buffer, b_buffer
        self.copy_a = copier(a_into) if a_buffer is not None else None
        self.copy_b = copier(b_into) if b_buffer is not None else None
        self.capturing = stream_capturing(device)

    def __call__(self, a, b) -> tuple[Any, Any]:
        """(A, B) as the kernel takes them: each one that is copied, copied and replaced by its buffer."""
        if self.copy_a is not None:
            self.copy_a(a)
            a = self.a_buffer
        if self.copy_b is not None:
            self.copy_b(b)
            b = self.b_buffer
        return a, b

    def bind(self, sample_a, sample_b, reuse_b: bool) -> Callable[[Any, Any], tuple[Any, Any]]:
        """This call for sources laid out as the samples: each copy's launch bound
        (`Copier.fixed`); with `reuse_b`, B's copy skipped while B is an unchanged weight
        (copy_when_changed)."""
        fill_a = self.copy_a.fixed(sample_a) if self.copy_a is not None else None
        fill_b = self.copy_b.fixed(sample_b) if self.copy_b is not None else None
        if fill_b is not None and reuse_b:
            fill_b = copy_when_changed(fill_b, self.capturing)
        a_buffer, b_buffer = self.a_buffer, self.b_buffer

        def pad(a, b) -> tuple[Any, Any]:
            if fill_a is not None:
                fill_a(a)
                a = a_buffer
            if fill_b is not None:
                fill_b(b)
                b = b_buffer
            return a, b

        return pad


def bound(runnable: Runnable, sample: Operands, *, reuse_b: bool = False) -> Launch:
    """`go(a, b, out, bias)`: `runnable(Operands(a, b, out, bias))` for operands with the
    shapes, strides, dtypes and device of `sample` (a plan's: only their addresses change),
    through the kernel's own `bind` where it has one (arguments worked out once, launches
    bound), else with an Operands per call. `reuse_b`: a template that copies B into a
    buffer of its own may skip the copy while B is unchanged (`copy_when_changed`)."""
    go = runnable.bind(sample, reuse_b=reuse_b) if isinstance(runnable, Kernel) else None
    if go is not None:
        return go

    def call(a, b, out, bias) -> None:
        runnable(Operands(a, b, out, bias))

    return call


def copy_when_changed(copy: Callable[[Any], None], capturing: Callable[[], bool]) -> Callable[[Any], None]:
    """`copy(b)` run only when B may differ from what the last call copied: a call whose B
    is the same weight (an nn.Parameter, or a view of one: same `_base`, same address, same
    version counter) as the last copied is skipped. torch bumps a tensor's version on every
    in-place write (`w.add_`, `w.copy_`, an optimizer's step, `load_state_dict`), so such a
    write is seen; a write torch does not see (through `w.data`, a Triton kernel of one's
    own, DLPack) is not: `autotune_cli.reset()` after one. Only parameters are remembered,
    never activations (a buffer refilled by a kernel torch does not see is common there),
    and never while a CUDA graph is captured (`capturing()`: a replay must copy)."""
    from weakref import ref

    from torch.nn import Parameter

    last: list = [None, None]  # a weak reference to the weight, (address, version)

    def run(b) -> None:
        base = b._base
        if base is None:
            base = b
        try:
            mark = (b.data_ptr(), b._version)
        except RuntimeError:  # an inference tensor: no version counter
            mark = None
        seen = last[0]
        if seen is not None and last[1] == mark and seen() is base and not capturing():
            return
        last[0] = None
        copy(b)
        if mark is not None and isinstance(base, Parameter) and not capturing():
            last[0], last[1] = ref(base), mark

    return run


def elements_spanned(t) -> int:
    """How many elements of its storage a non-empty tensor's view spans, from its first
    element to its last (a pitched row's padding between them, its overlaps once)."""
    return 1 + sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride()))


def torch_dtype(name: str):
    """The torch dtype a problem's dtype name stands for (imports torch: call in `build`)."""
    import torch

    if name not in DTYPES:
        raise KeyError(name)
    return getattr(torch, name)  # the names are torch's (problem.py)


class Template(ABC):
    """A family of kernels for some ops; its configs come from the heuristics registry."""

    uid: str = ""
    ops: tuple[str, ...] = ()
    backend: str = ""  # "aten", "triton", or a plugin's own
    # A plain vendor library call (cuBLAS): every other candidate must beat it by a margin
    # to win (search.pick), as its time is what the model runs untuned.
    vendor: bool = False
    # What the tile model (roofline.tile_seconds) may do with a Triton template's configs:
    # "prunes" where it describes the kernel (the default search drops far-behind configs,
    # choices.tile_model_stage), "ranks" where it sees the dot tile but misses other work
    # (split-K, swapped operands, scales: only the exhaustive search orders by it), "none"
    # where there is no dot tile (a GEMV). Default "ranks": a Triton tile is a dot.
    tile_model: Literal["prunes", "ranks", "none"] = "ranks"
    # Its tiles put A's rows in the matrix instruction's M slot (plain tiled, persistent and
    # split-K GEMMs): for a decode problem swap-AB serves it better (choices.decode_stage).
    rows_in_m_slot: bool = False
    # The uid of the template whose kernel this one runs on copies of the operands with
    # aligned rows (triton::mm_padded pads triton::mm): where both serve a problem whose
    # loads are misaligned, the one it pads is left out (choices.misaligned_stage).
    pads: str | None = None
    # Whether a built kernel writes buffers of its own on every call (the alignment
    # templates' padded copies of operands): two threads must not share one (the API builds
    # one per thread).
    keeps_buffers: bool = False
    # Every param `full_params` gives, name -> templates.params.Int / Bool / Choice / Text:
    # a stored winner whose params are not these is never built (see templates/params.py).
    # A template that declares none takes no params.
    params_schema: dict[str, Any] = {}

    @property
    def takes_configs(self) -> bool:
        """Whether a search or a user's --space lists configs for it (a Triton template's
        tiles; a library call takes none): what a space changes, and what it may list."""
        return self.backend == "triton"

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

    def fit_to_device(self, config: dict[str, Any], device) -> dict[str, Any]:
        """`config` as this device can run it: the heuristics are not told the device, so a
        config may ask for a feature the device lacks that the template can do without
        (triton::gemv's programmatic dependent launch before Hopper). As given here."""
        return config

    def full_params(self, problem: GemmProblem, config: dict[str, Any]) -> dict[str, Any]:
        """Every argument the kernel takes: the tuned config plus values fixed by the problem."""
        return dict(config)

    def fixed_twin(self, config: dict[str, Any]) -> dict[str, Any] | None:
        """`config` with the problem's sizes written into the kernel (one compile per
        problem, not shared), where the template offers that and `config` is not it
        already; else None. The search times it for its best contenders alone."""
        return None

    def out_pitch(self, problem: GemmProblem, params: dict[str, Any]) -> int | None:
        """The row pitch (elements from one output row to the next) this kernel wants its
        output made with, or None for the usual contiguous [M, N]. A pitch larger than N
        gives a view of padded rows (see `empty_out`), as Inductor's max-autotune returns
        when N's rows are misaligned (stride [50264, 1] for a vocabulary of 50257): the rows
        then start on 16-byte boundaries and the stores can be wide. Every output the
        harness, the compile pool and the Python API make for this kernel has this pitch,
        so the kernel is timed, compiled and run with the same strides."""
        return None

    def out_writes_padding(self, problem: GemmProblem, params: dict[str, Any]) -> bool:
        """Whether the kernel may write the padding of an output made with `out_pitch` (then
        every row, the last included, is allocated whole). A template that never does says
        False, and the Python API makes its output with one allocation."""
        return True

    def render(self, problem: GemmProblem, params: dict[str, Any]) -> str | None:
        """Source code of the kernel for these params, where the template has any."""
        return None

    @abstractmethod
    def build(self, problem: GemmProblem, params: dict[str, Any], kernel_dir: str) -> Runnable:
        """The kernel for these params (called in a worker): a Kernel (templates/kernel.py),
        which declares what it offers besides the call, or a plain callable of Operands."""

    def __repr__(self) -> str:
        return f"<template {self.uid}>"
