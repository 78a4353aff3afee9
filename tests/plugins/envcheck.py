"""A planted template for tests: builds only where the caller's AUTOTUNE_ENV_MARK reached
the worker (a forkserver child would otherwise see the server's environment)."""

import os

from autotune_cli.heuristics import register_heuristic
from autotune_cli.heuristics.registry import Heuristic
from autotune_cli.templates import Template, register_template
from autotune_cli.templates.params import Text


class EnvCheck(Template):
    uid = "test::envcheck"
    ops = ("mm",)
    backend = "test"
    params_schema = {"mark": Text()}

    def source_text(self):
        return "envcheck v1"

    def build(self, problem, params, kernel_dir):
        import torch

        if os.environ.get("AUTOTUNE_ENV_MARK") != params["mark"]:
            raise RuntimeError(f"the worker sees AUTOTUNE_ENV_MARK={os.environ.get('AUTOTUNE_ENV_MARK')!r}")

        def run(ops):
            torch.mm(ops.a, ops.b, out=ops.out)

        return run


register_template(EnvCheck())


@register_heuristic("test::envcheck")
class MarkConfig(Heuristic):
    def _impl(self, problem, search, space):
        yield {"mark": os.environ.get("AUTOTUNE_ENV_MARK", "")}
