"""A planted template whose kernel leaves processes behind that killing the worker's process
group does not reach: one in its own process group, one in a new session (setsid), and an
orphan of a shell that exits at once (a daemon's double fork). Each writes its pid to the
file $AUTOTUNE_TEST_PIDS; the kernel itself is torch.mm."""

import os
import subprocess

from autotune_cli.heuristics import register_heuristic
from autotune_cli.heuristics.registry import Heuristic
from autotune_cli.templates import Template, register_template

_started = []


def _leave_behind(path):
    own_group = subprocess.Popen(["sleep", "3600"], process_group=0)
    new_session = subprocess.Popen(["sleep", "3600"], start_new_session=True)
    subprocess.run(["sh", "-c", f"sleep 3600 & echo $! >> '{path}'"], start_new_session=True, check=True)
    with open(path, "a") as handle:
        handle.write(f"{own_group.pid}\n{new_session.pid}\n")


class Daemonizing(Template):
    uid = "test::daemonizing"
    ops = ("mm",)
    backend = "test"

    def source_text(self):
        return "daemonizing v1"

    def build(self, problem, params, kernel_dir):
        import torch

        def run(ops):
            path = os.environ.get("AUTOTUNE_TEST_PIDS")
            if path and not _started:
                _started.append(True)
                _leave_behind(path)
            torch.mm(ops.a, ops.b, out=ops.out)

        return run


register_template(Daemonizing())


@register_heuristic("test::daemonizing")
class OneConfig(Heuristic):
    def _impl(self, problem, search, space):
        yield {}
