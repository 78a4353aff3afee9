"""aten::mm_aligned (mm and addmm): cuBLAS on operands copied into aligned buffers.

cuBLAS picks its fast kernels only when every matrix's leading dimension (the stride between
rows as stored) is a multiple of 16 bytes. With K = 777 in fp16 (A row-major) or N = 50257
(B and the output), it falls back to slow unaligned kernels (torch.mm on 1000x3000x777 fp16
runs at a tenth of the GPU's rate: bench/README.md, "Kernel speed"). This template copies
each input operand whose leading dimension is off into a buffer whose leading dimension is
rounded up to PAD_BYTES and runs cuBLAS there. The output is not copied: where its rows are
off, the template asks for it with rows padded the same way (`out_pitch`: a [M, N] view of
[M, Np] storage, as Inductor's max-autotune returns it, stride [50264, 1] for a vocabulary
of 50257 at 16 bytes) and cuBLAS writes into it directly. Configs:

  ZERO_PAD=0  only the leading dimensions grow; cuBLAS sees the true M, N, K;
  ZERO_PAD=1  the padded dimensions grow too, filled with zeros (zeros in K add nothing,
              extra columns of the output land in its row padding, extra rows in a
              buffer copied out): every size aligned.
  PAD_BYTES   what the padded sizes are rounded up to: 16 (the least cuBLAS needs), 128 or
              512. The width is not only alignment: on lm_head cuBLAS ran faster with a
              pitch of whole 128-column tiles than of 16 bytes, for the same copy
              (bench/README.md, "Kernel speed"). Which width a problem and a GPU run best is
              the tune's to say.

The copies are part of every call, so they are timed with it; whether it pays is for the
benchmark to say. Offered only where some leading dimension is misaligned.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..problem import GemmProblem
from .base import Operands, PaddedOperands, Template, torch_dtype
from .kernel import Kernel
from .params import Choice
from .registry import register_template

ALIGN_BYTES = 16  # what cuBLAS needs of a leading dimension: a misaligned one is smaller
PAD_BYTES = (16, 128, 512)  # the widths a padded size is rounded up to (the configs)


def misaligned_dims(problem: GemmProblem) -> set[str]:
    """The dims ("m", "n", "k") that are some matrix's leading dimension and are not a
    multiple of 16 bytes. A row-major A's rows run along K, a transposed A's along M; B's
    along N (or K transposed); the output, always row-major, along N."""
    size = problem.dtype_size
    leading = {"k" if not problem.a_transposed else "m", "n" if not problem.b_transposed else "k", "n"}
    extent = {"m": problem.m, "n": problem.n, "k": problem.k}
    return {d for d in leading if (extent[d] * size) % ALIGN_BYTES}


def padded_sizes(problem: GemmProblem, pad_bytes: int) -> dict[str, int]:
    """M, N and K with each misaligned one rounded up to `pad_bytes`: the buffers' leading
    dimensions (and, with ZERO_PAD, the sizes cuBLAS is given)."""
    step = max(1, pad_bytes // problem.dtype_size)
    padded = misaligned_dims(problem)
    return {d: (-(-v // step) * step if d in padded else v)
            for d, v in (("m", problem.m), ("n", problem.n), ("k", problem.k))}


class AtenAlignedTemplate(Template):
    uid = "aten::mm_aligned"
    ops = ("mm", "addmm")
    backend = "aten"
    keeps_buffers = True  # the padded copies of the operands
    params_schema = {"ZERO_PAD": Choice((0, 1)), "PAD_BYTES": Choice(PAD_BYTES)}

    def supports(self, problem: GemmProblem) -> bool:
        return problem.op in self.ops and bool(misaligned_dims(problem))

    def source_text(self) -> str:
        """This module and the copy kernels it runs on CUDA (templates/row_copy.py): a change
        to either expires the winners."""
        return Path(__file__).read_text() + Path(__file__).with_name("row_copy.py").read_text()

    def full_params(self, problem: GemmProblem, config: dict[str, Any]) -> dict[str, Any]:
        zero_pad = int(config.get("ZERO_PAD", 0))
        if zero_pad not in (0, 1):
            raise ValueError(f"{self.uid}: ZERO_PAD must be 0 or 1, got {config.get('ZERO_PAD')!r}")
        pad_bytes = int(config.get("PAD_BYTES", ALIGN_BYTES))
        if pad_bytes not in PAD_BYTES:
            raise ValueError(f"{self.uid}: PAD_BYTES must be one of {PAD_BYTES}, got {config.get('PAD_BYTES')!r}")
        return {"ZERO_PAD": zero_pad, "PAD_BYTES": pad_bytes}

    def out_pitch(self, problem: GemmProblem, params: dict[str, Any]) -> int | None:
        """N rounded up to PAD_BYTES where the output's rows are off (see the module)."""
        if "n" not in misaligned_dims(problem):
            return None
        return padded_sizes(problem, int(params.get("PAD_BYTES", ALIGN_BYTES)))["n"]

    def out_writes_padding(self, problem: GemmProblem, params: dict[str, Any]) -> bool:
        """Only ZERO_PAD's wider product lands in the output's padding."""
        return bool(params.get("ZERO_PAD"))

    def build(self, problem: GemmProblem, params: dict[str, Any], kernel_dir: str) -> AlignedMMKernel:
        if not self.supports(problem):
            raise ValueError(f"{self.uid} does not serve {problem.describe()}")
        return AlignedMMKernel(problem, bool(params["ZERO_PAD"]), int(params.get("PAD_BYTES", ALIGN_BYTES)),
                               self.out_pitch(problem, params))


class AlignedMMKernel(Kernel):
    """cuBLAS on copies of the misaligned operands (see the module), into the output as
    given where cuBLAS's product has its shape, else into the output's padded rows or a
    scratch buffer."""

    def __init__(self, problem: GemmProblem, zero_pad: bool, pad_bytes: int, pitch: int | None) -> None:
        import torch

        self.torch = torch
        self.dtype = torch_dtype(problem.dtype)
        self.device = "cuda" if problem.device == "cuda" else "cpu"
        padded = misaligned_dims(problem)
        self.m, self.n, k = problem.m, problem.n, problem.k
        self.lead = padded_sizes(problem, pad_bytes)
        self.used = used = self.lead if zero_pad else {"m": self.m, "n": self.n, "k": k}  # the sizes cuBLAS is given

        def needs_copy(dims: tuple[str, str], leading: str) -> bool:
            return leading in padded or (zero_pad and bool(padded & set(dims)))

        a_view = b_view = None
        if needs_copy(("m", "k"), "m" if problem.a_transposed else "k"):
            a_view = self.buffer("m", "k", problem.a_transposed)
        if needs_copy(("k", "n"), "k" if problem.b_transposed else "n"):
            b_view = self.buffer("k", "n", problem.b_transposed)
        self.pads = PaddedOperands(a_view, a_view[:self.m, :k] if a_view is not None else None,
                                   b_view, b_view[:k, :self.n] if b_view is not None else None, self.device)
        self.addmm = problem.op == "addmm"
        self.allow_tf32 = problem.allow_tf32
        # float32 only: fp16/bf16 never read it, and the API's caller keeps theirs
        self.set_tf32 = self.device == "cuda" and problem.dtype == "float32"
        self.pitch = pitch
        self.grown = (used["m"], used["n"]) != (self.m, self.n)  # cuBLAS's output is larger than [M, N]
        self.scratch = None  # a buffer for cuBLAS's output, made on the first call that needs it

    def buffer(self, rows: str, cols: str, transposed: bool):
        """A logical [rows, cols] view of zeroed storage whose leading dimension is padded."""
        torch, used, lead = self.torch, self.used, self.lead
        if transposed:  # stored [cols, rows], rows contiguous
            return torch.zeros(used[cols], lead[rows], dtype=self.dtype, device=self.device).t()[:used[rows], :]
        return torch.zeros(used[rows], lead[cols], dtype=self.dtype, device=self.device)[:, :used[cols]]

    def padded_rows(self, out):
        """Where ZERO_PAD's wider output goes without a copy: the padded rows of an output
        made with `pitch` (the padding is the output's own), or None (then a buffer)."""
        if self.used["m"] == self.m and out.stride() == (self.pitch, 1):
            return out.as_strided((self.m, self.used["n"]), (self.pitch, 1))
        return None

    def __call__(self, ops: Operands) -> None:
        torch = self.torch
        if self.set_tf32:
            torch.backends.cuda.matmul.allow_tf32 = self.allow_tf32
        a, b = self.pads(ops.a, ops.b)
        if not self.grown:  # straight into the output: with its padded pitch, aligned rows
            if self.addmm:
                torch.addmm(ops.bias, a, b, out=ops.out)
            else:
                torch.mm(a, b, out=ops.out)
            return
        wide = self.padded_rows(ops.out)
        if wide is not None:
            torch.mm(a, b, out=wide)
            if self.addmm:
                ops.out.add_(ops.bias)
            return
        if self.scratch is None:  # extra rows (M padded), or an output without the padded pitch
            self.scratch = self.buffer("m", "n", False)
        c_view = self.scratch
        m, n = self.m, self.n
        torch.mm(a, b, out=c_view)
        if self.addmm:  # the copy out and the bias in one pass
            torch.add(c_view[:m, :n], ops.bias, out=ops.out)
        else:
            ops.out.copy_(c_view[:m, :n])

    def bind(self, sample: Operands, reuse_b: bool = False):
        """The call for operands laid out as `sample` (see base.bound): each copy's launch
        bound, the branch for the output's strides chosen once; with `reuse_b`, B's copy
        skipped while B is an unchanged weight (base.copy_when_changed)."""
        if self.set_tf32 or (self.grown and self.padded_rows(sample.out) is None):
            return None  # float32's TF32 switch, or a scratch output: run as it is
        pad = self.pads.bind(sample.a, sample.b, reuse_b)
        mm, add, addmm = self.torch.mm, self.torch.addmm, self.addmm
        if not self.grown:
            def go(a, b, out, bias) -> None:
                a, b = pad(a, b)
                if addmm:
                    add(bias, a, b, out=out)
                else:
                    mm(a, b, out=out)
            return go
        strides = (self.pitch, 1)
        shape = (self.m, self.used["n"])

        def go_wide(a, b, out, bias) -> None:
            a, b = pad(a, b)
            mm(a, b, out=out.as_strided(shape, strides))
            if addmm:
                out.add_(bias)
        return go_wide


register_template(AtenAlignedTemplate())
