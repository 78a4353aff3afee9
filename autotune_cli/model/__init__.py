"""model/: the matrix multiplies in a saved model, as GemmProblems with counts.

Two formats are read; no file runs code unless the caller says it may:

* a torch.export program (`torch.export.save`, usually `.pt2`), read from the archive's
  serialized program by autotune itself, never unpickled (export_archive.py,
  export_program.py, export_graph.py, export_expr.py), the graphs of its higher-order
  ops (no_grad and autocast regions, torch.cond, ...) included, an einsum read as the bmm
  calls it runs (einsum.py), inner, tensordot and multi_dot as their mm calls
  (products.py); sizes may be symbolic (`torch.export.Dim`);
* TorchScript (`torch.jit.save`), which is code: run once under the profiler, and only
  when the caller says the file is trusted (torchscript.py).

A plain `torch.save` checkpoint is refused without being opened. Each matmul-like call is
mapped to a GEMM by the same rules for both formats (classify.py); dynamic dims take the
--hint values or defaults, and each combination gives concrete problems (dims.py);
`find_gemms` (find.py) puts it together. Imports run one way, down from find.py:

  find.py           -> export_archive, torchscript, dims, classify, found
  export_archive.py -> export_program, export_expr, text
  export_program.py -> export_graph, export_expr, classify
  export_graph.py   -> einsum, products, export_ops, export_expr, classify
  einsum.py         -> classify
  products.py       -> classify
  torchscript.py    -> classify, text
  dims.py           -> classify, export_expr, found, text
  export_expr.py    -> classify

text.py, found.py, export_ops.py and classify.py import no sibling; no module here imports this package.

shapes_file.py reads and writes the other list of problems: `autotune mm --from`'s JSON
file, which `autotune_cli.record` writes. It imports no sibling either.
"""

from .find import check_model, find_gemms, model_format
from .found import FoundGemm, NotTuned, plan_flops_share
from .text import parse_hints, parse_input_shape

__all__ = ["FoundGemm", "NotTuned", "parse_input_shape", "parse_hints", "find_gemms", "check_model",
           "model_format", "plan_flops_share"]
