"""Planted templates for tests of the inputs the timing worker keeps between candidates:
`test::corrupt_after` writes the right product and then spoils its inputs in place (as a
kernel writing out of bounds into them would; each later call writes that first product
again), `test::corrupt_before` spoils them first and
so writes a wrong product, `test::writes_nothing` leaves the output as it found it.
`test::good` (faulty.py) is a correct one to follow them."""

from autotune_cli.heuristics import register_heuristic
from autotune_cli.heuristics.registry import Heuristic
from autotune_cli.templates import Template, register_template


class Corrupting(Template):
    ops = ("mm", "addmm", "bmm")
    backend = "test"

    def __init__(self, uid, when):
        self.uid = uid
        self.when = when

    def source_text(self):
        return f"{self.uid} v1"

    def build(self, problem, params, kernel_dir):
        import torch

        when = self.when
        first = []  # corrupt_after: the product of the inputs it was first given

        def spoil(ops):
            ops.a.mul_(-3.0).add_(1.0)
            ops.b.add_(2.0)
            if ops.bias is not None:
                ops.bias.mul_(5.0)

        def run(ops):
            if when == "never":
                return
            if when == "before":
                spoil(ops)
            if when == "after" and first:  # inputs it spoiled itself: their first product
                ops.out.copy_(first[0])
                spoil(ops)
                return
            if ops.bias is None:
                torch.matmul(ops.a, ops.b, out=ops.out)
            else:
                torch.addmm(ops.bias, ops.a, ops.b, out=ops.out)
            if when == "after":
                first.append(ops.out.clone())
                spoil(ops)

        return run


for _uid, _when in (("test::corrupt_after", "after"), ("test::corrupt_before", "before"),
                    ("test::writes_nothing", "never")):
    register_template(Corrupting(_uid, _when))


@register_heuristic("test::corrupt_after")
@register_heuristic("test::corrupt_before")
@register_heuristic("test::writes_nothing")
class OneConfig(Heuristic):
    def _impl(self, problem, search, space):
        yield {}
