"""A planted template for tests: its heuristic offers 100 000 configs, a millisecond each,
as a huge space file would: only a budget that covers the listing ends a tune in time."""

import time

from autotune_cli.heuristics import register_heuristic
from autotune_cli.heuristics.registry import Heuristic
from autotune_cli.templates import Template, register_template


class Endless(Template):
    uid = "test::endless"
    ops = ("mm",)
    backend = "test"

    def source_text(self):
        return "endless v1"

    def build(self, problem, params, kernel_dir):
        import torch

        def run(ops):
            torch.mm(ops.a, ops.b, out=ops.out)

        return run


register_template(Endless())


@register_heuristic("test::endless")
class Configs(Heuristic):
    def _impl(self, problem, search, space):
        for i in range(100_000):
            time.sleep(0.001)
            yield {"id": i}
