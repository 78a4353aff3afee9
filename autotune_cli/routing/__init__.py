"""torch.compile with a model's matmuls routed to this machine's cached winners.

    import autotune_cli

    compiled = autotune_cli.compile(model)        # torch.compile's kwargs pass through
    compiled = autotune_cli.compile(model, mode="default", routes=log)  # no CUDA graphs
    compiled = autotune_cli.compile(model, tune=False)  # route what is cached, tune nothing

`compile` is `torch.compile(model, backend=<ours>, ...)`. Our backend gets each graph
Dynamo captured (torch-level ops, fake tensors), replaces every matmul with a cached winner
for this machine by a call of one of our ops, and hands the graph to Inductor (or to the
backend named by `backend=`). Nothing breaks the graph: the replacement happens after Dynamo,
and each op is one a compiler keeps in its graph:

  * a one-kernel Triton winner (triton::mm, triton::bmm, triton::mm_swap_ab) becomes
    `autotune::triton_gemm`, a `torch.library.triton_op` launching the kernel through
    `wrap_triton`: AOT traces into it, so Inductor sees the kernel itself, launches it from
    its own generated code and can capture it in a CUDA graph;
  * any other winner (cuBLAS on padded copies, split-K's two kernels, the persistent TMA
    kernel, and under Triton's interpreter every Triton winner, which wrap_triton cannot
    trace) becomes `autotune::gemm`, an opaque custom op with a fake implementation that
    runs the winner's kernel as `autotune_cli.mm` does in eager code (its buffers made at
    compile time, so that CUDA graphs of the compiled model can be captured);
  * an aten winner stays torch's op (Inductor's ATen choice is that same cuBLAS call),
    except under max-autotune, where Inductor would tune it again: there it is pinned
    through `autotune::gemm` too.

A matmul with no cached winner for this machine's fingerprint (or one tuned on another
machine, or with a template source that has changed since) is left as it was: Inductor
handles it as it would without us. What is routed: linear (x [..., K] folded to [M, K],
B = W.T), mm, addmm (alpha = beta = 1), bmm, matmul / @ of 2-D by 2-D, N-D by 2-D and
3-D by 3-D operands, and an einsum of two tensors that is one bmm (einsum.py), with static
shapes; in an exported program's module, the aten ops of each. A matmul recording gradients
is routed in the forward and backward graphs AOTAutograd makes, under Inductor only
(training.py); any other backend leaves it on torch's op (the kernels have no backward).

torch._scaled_mm calls (float8, scales per tensor, row or block, a [n] bias, out_dtype and
use_fast_accum constants) are routed alike, to `autotune::triton_scaled_gemm` (the tiled or
blockwise float8 kernel, a triton_op) or `autotune::scaled_gemm` (the opaque op: the persistent TMA
kernel, split-K, every Triton winner under the interpreter, and aten::_scaled_mm pinned
under max-autotune); an aten::_scaled_mm winner otherwise stays torch's call.

Linears that read one input (q, k and v) run as one GEMM over their weights placed side by
side, where that GEMM's tuned time beats theirs summed, through the opaque
`autotune::gemm_group` (groups.py; by default under CUDA graphs only).

Grouped-query attention that repeats its K and V heads for SDPA (transformers' repeat_kv, at
decode) runs over them once, the query heads of a group folded into its rows (gqa.py), or
through our split-key kernel, `autotune::gqa_attention` (decode_attention.py), where it beat
the other form timed on this GPU (split_choice.py).

The modules: gqa.py (that fold), decode_attention.py (the split-key kernel and its op),
split_choice.py (whether the kernel runs: timed as the graph compiles),
sites.py (which graph nodes are matmuls, read as a GEMM's operands), tuning.py (the problems
a graph meets with no winner, tuned as it compiles), dynamic.py (a dynamic M routed per
call), groups.py (linears of one input as one GEMM), ops.py (the ops a routed matmul
becomes, and their routes), scaled.py (a torch._scaled_mm node's route), training.py (a
training step's matmuls), report.py (the line a compile prints of its routes),
backend.py (the torch.compile backend that rewrites the graph, and `compile`).
"""

from .backend import routing_backend
from .torch_compile import DEFAULT_MODE, compile

__all__ = ["DEFAULT_MODE", "compile", "routing_backend"]
