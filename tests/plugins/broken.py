"""A planted template whose kernel does not compile."""

from autotune_cli.heuristics import register_heuristic
from autotune_cli.heuristics.registry import Heuristic
from autotune_cli.templates import Template, register_template


class Broken(Template):
    uid = "test::broken"
    ops = ("mm",)
    backend = "test"

    def source_text(self):
        return "broken v1"

    def build(self, problem, params, kernel_dir):
        compile("def kernel(:\n", "broken_kernel.py", "exec")  # raises SyntaxError


register_template(Broken())


@register_heuristic("test::broken")
class OneConfig(Heuristic):
    def _impl(self, problem, search, space):
        yield {}
