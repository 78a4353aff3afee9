"""A planted template for tests: faster than anything, and wrong in one element."""

from autotune_cli.heuristics import register_heuristic
from autotune_cli.heuristics.registry import Heuristic
from autotune_cli.templates import Template, register_template


class WrongMM(Template):
    uid = "test::wrong_mm"
    ops = ("mm", "addmm", "bmm")
    backend = "test"

    def source_text(self):
        return "wrong v1"

    def build(self, problem, params, kernel_dir):
        import torch

        def run(ops):
            # The right product, then one element spoiled: only a real check catches it.
            if ops.bias is None:
                torch.matmul(ops.a, ops.b, out=ops.out)
            else:
                torch.addmm(ops.bias, ops.a, ops.b, out=ops.out)
            ops.out.view(-1)[ops.out.numel() // 2] += 1000.0

        return run


register_template(WrongMM())


@register_heuristic("test::wrong_mm")
class OneConfig(Heuristic):
    def _impl(self, problem, search, space):
        yield {}
