"""A planted slow template for tests: eight configs; config 5 is the fastest (it sleeps least).
A built kernel's first SLOW_CALLS calls, its first run and its timed runs (CPU timing: at most
five), each sleep 0.4 s (or $AUTOTUNE_TEST_SLEEP); later calls, the confirmation launches after
the timing (TimingPolicy.confirm_launches), do not, so that a candidate takes a few sleeps."""

import itertools
import os
import time

from autotune_cli.heuristics import register_heuristic
from autotune_cli.heuristics.registry import Heuristic
from autotune_cli.templates import Template, register_template
from autotune_cli.templates.params import Int

SLOW_CALLS = 6


class Sleepy(Template):
    uid = "test::sleepy"
    ops = ("mm",)
    backend = "test"
    params_schema = {"id": Int(0, 7)}

    def source_text(self):
        return "sleepy v1"

    def build(self, problem, params, kernel_dir):
        import torch

        base = float(os.environ.get("AUTOTUNE_TEST_SLEEP", "0.4"))
        delay = base - (base / 2 if params["id"] == 5 else 0.0)
        calls = itertools.count()

        def run(ops):
            if next(calls) < SLOW_CALLS:
                time.sleep(delay)
            torch.mm(ops.a, ops.b, out=ops.out)

        return run


register_template(Sleepy())


@register_heuristic("test::sleepy")
class EightConfigs(Heuristic):
    def _impl(self, problem, search, space):
        for i in range(8):
            yield {"id": i}
