"""A planted template for tests: a correct candidate that prints to stdout while it builds
and at every call, from Python and straight to file descriptor 1."""

import os

from autotune_cli.heuristics import register_heuristic
from autotune_cli.heuristics.registry import Heuristic
from autotune_cli.templates import Template, register_template


class Chatty(Template):
    uid = "test::chatty"
    ops = ("mm",)
    backend = "test"

    def source_text(self):
        return "chatty v1"

    def build(self, problem, params, kernel_dir):
        import torch

        print("chatty: building", flush=True)

        def run(ops):
            print("chatty: running {")
            os.write(1, b"chatty: raw }\n")
            torch.mm(ops.a, ops.b, out=ops.out)

        return run


register_template(Chatty())


@register_heuristic("test::chatty")
class OneConfig(Heuristic):
    def _impl(self, problem, search, space):
        yield {}
