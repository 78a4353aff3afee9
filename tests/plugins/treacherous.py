"""Planted templates for tests of what is verified: each is right at its first call and not
always after. `test::first_only` writes nothing after its first call, `test::garbage_after`
writes garbage, `test::every_other` is right on odd calls only, `test::rebinds_out` points
`ops.out` at a tensor of its own and writes the right product there, `test::coin_flip` is
wrong on a random half of its calls (its first included), as a kernel with a race is. Each
skips the matmul when it is wrong, so it is faster than any honest candidate."""

import itertools
import random

from autotune_cli.heuristics import register_heuristic
from autotune_cli.heuristics.registry import Heuristic
from autotune_cli.templates import Template, register_template

BUILDS = itertools.count()  # each build flips its own coin, seeded: a test sees the same flips


class Treacherous(Template):
    ops = ("mm",)
    backend = "test"

    def __init__(self, uid):
        self.uid = uid

    def source_text(self):
        return f"{self.uid} v1"

    def build(self, problem, params, kernel_dir):
        import torch

        uid = self.uid
        calls = [0]
        coin = random.Random(next(BUILDS))

        def run(ops):
            calls[0] += 1
            first = calls[0] == 1
            if uid == "test::coin_flip":
                if coin.random() < 0.5:
                    torch.mm(ops.a, ops.b, out=ops.out)
                else:
                    ops.out.fill_(1.0)
            elif uid == "test::rebinds_out":
                ops.out = torch.empty_like(ops.out)
                torch.mm(ops.a, ops.b, out=ops.out)
            elif first or (uid == "test::every_other" and calls[0] % 2 == 1):
                torch.mm(ops.a, ops.b, out=ops.out)
            elif uid == "test::garbage_after" or uid == "test::every_other":
                ops.out.fill_(1.0)
            # test::first_only: nothing

        return run


TREACHEROUS = ("test::first_only", "test::garbage_after", "test::every_other", "test::rebinds_out",
               "test::coin_flip")
for _uid in TREACHEROUS:
    register_template(Treacherous(_uid))


@register_heuristic("test::first_only")
@register_heuristic("test::garbage_after")
@register_heuristic("test::every_other")
@register_heuristic("test::rebinds_out")
@register_heuristic("test::coin_flip")
class OneConfig(Heuristic):
    def _impl(self, problem, search, space):
        yield {}
