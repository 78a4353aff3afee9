"""Planted faulty templates for tests: one aborts its process, one raises, one hangs,
one is a correct reference that should win among them; `test::hang_child` (after the good
one) starts a child process, ignores SIGTERM and hangs."""

import os
import signal
import subprocess
import time

from autotune_cli.heuristics import register_heuristic
from autotune_cli.heuristics.registry import Heuristic
from autotune_cli.templates import Template, register_template


class Faulty(Template):
    ops = ("mm",)
    backend = "test"

    def __init__(self, fault):
        self.fault = fault
        self.uid = f"test::{fault}"

    def source_text(self):
        return f"faulty {self.fault}"

    def build(self, problem, params, kernel_dir):
        import torch

        fault = self.fault

        def run(ops):
            if fault == "abort":
                os.abort()
            if fault == "raise":
                raise RuntimeError("planted failure")
            if fault == "hang":
                time.sleep(3600)
            if fault == "hang_child":
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                subprocess.Popen(["sleep", "3600"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(3600)
            torch.mm(ops.a, ops.b, out=ops.out)

        return run


for _fault in ("abort", "raise", "hang", "good", "hang_child"):
    register_template(Faulty(_fault))


@register_heuristic("test::abort")
@register_heuristic("test::raise")
@register_heuristic("test::hang")
@register_heuristic("test::good")
@register_heuristic("test::hang_child")
class OneConfig(Heuristic):
    def _impl(self, problem, search, space):
        yield {}
