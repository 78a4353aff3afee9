"""The worker process: a timing or compile process's life on one device (its set-up, its
ties to the command, its request loop).

Started from a preloaded forkserver (torch and triton already imported, CUDA not
initialised) or by spawn. The environment is set up first thing, before CUDA is touched or a
kernel is loaded: the caller's variables, TRITON_INTERPRET=1 for the CPU,
CUDA_VISIBLE_DEVICES for one GPU. Each task is one candidate's steps
(candidate.CandidateRunner); a candidate that fails comes back as a typed result, never an
exception across the pipe. After a CUDA error the context may be unusable, so the worker
reports the result and exits; the executor starts a fresh one.
"""

from __future__ import annotations

import os
import time
import traceback

from ..settings import Switches
from .candidate import CandidateRunner, short_error
from .descendants import become_subreaper, kill_descendants
from .messages import COMPILE, CompileAnswer, WorkerAnswer

# A compile process runs at this niceness: on a host whose cores all compile, the timing
# process (which launches each timed run right after a ~50 µs GPU wait, runner/timing.py) and
# the command itself come first.
COMPILE_NICENESS = 10


def _setup_environment(device_type: str, device_index: int, environ: dict[str, str] | None = None) -> None:
    if environ is not None:  # the caller's environment of now (a forkserver child has the server's)
        os.environ.clear()
        os.environ.update(environ)
    if device_type == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    else:
        visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        os.environ["CUDA_VISIBLE_DEVICES"] = visible[device_index] if visible else str(device_index)
        os.environ.pop("TRITON_INTERPRET", None)


def _own_group() -> None:
    """Lead a process group of its own: the executor kills the group (runner/processes
    kill_group), so a candidate's children die with it, and the terminal's Ctrl-C reaches
    the command alone, which stops the workers itself. Out of the terminal's group, SIGINT
    raises KeyboardInterrupt (whatever handler the process started with)."""
    import signal

    try:
        os.setpgid(0, 0)
    except (OSError, AttributeError):
        pass
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _kill_group() -> None:
    """Kill this process, its group and whatever left the group (what a candidate
    started) at once."""
    import signal

    kill_descendants(os.getpid())
    try:
        if os.getpgrp() == os.getpid():
            os.killpg(0, signal.SIGKILL)
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGKILL)


def _die_with_parent() -> None:
    """On Linux, the kernel kills this process when its parent (the forkserver, or the
    command for a spawned worker) dies: a hung candidate cannot outlive the command. Best
    effort elsewhere; the watchdog (_watch_parent) covers the rest."""
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _watch_parent(lifeline, every_s: float = 0.5) -> None:
    """A thread that kills this process's group once the command is gone: `lifeline` (a
    pipe whose write end only the command holds) reads EOF, or the parent process changes.
    It runs beside a hung candidate; the group goes, so its children go too."""
    import threading

    parent = os.getppid()

    def watch() -> None:
        while True:
            try:
                if lifeline is not None:
                    if lifeline.poll(every_s):
                        lifeline.recv_bytes()  # nothing is ever sent: EOF is the message
                else:
                    time.sleep(every_s)
            except (EOFError, OSError):
                break
            if os.getppid() != parent:
                break
        _kill_group()

    threading.Thread(target=watch, daemon=True, name="autotune-parent-watch").start()


def _quiet_stdout() -> None:
    """Whatever a worker prints (a plugin's candidate, a library's notice) goes to stderr:
    the command's stdout carries its data alone (`--json` must parse)."""
    import sys

    try:
        sys.stdout.flush()
        os.dup2(2, 1)
    except (OSError, ValueError, AttributeError):
        pass

def _prepare_compiler() -> None:
    """Bring up what a compile-pool process's first compile would (CUDA, Triton's driver and
    its target) before reporting ready, while the caller builds its choices. Best effort."""
    try:
        from triton.runtime.driver import driver

        driver.active.get_current_target()
        driver.active.get_current_device()
    except Exception:  # noqa: BLE001 - best effort: the first candidate brings the driver up
        pass


def _warm_triton(runner, mode: str) -> None:
    """Triton's one-time work in this process, done now (runner/warmup.py): a task sent
    meanwhile waits in the pipe. Best effort: a failure here is the first candidate's to
    meet and report."""
    try:
        from .warmup import warm

        warm(runner.torch, mode)
    except (Exception, KeyboardInterrupt):  # noqa: BLE001 - Ctrl-C here: the task loop below ends quietly
        pass


def worker_main(conn, device_type: str, device_index: int, plugins: tuple[str, ...],
                l2_bytes: int, environ: dict[str, str] | None, role: str, device_info, lifeline,
                switches: Switches) -> None:
    """A worker's life (runner/processes.WorkerProcess starts it). `switches`: the
    environment's switches as the command read them; this process never reads them itself."""
    _own_group()
    become_subreaper()  # a candidate's daemons stay below this process (descendants.py)
    _die_with_parent()
    _watch_parent(lifeline)
    _quiet_stdout()
    _setup_environment(device_type, device_index, environ)
    if role == "compile":  # compiles yield the cores to the timing process and the caller
        try:
            os.nice(COMPILE_NICENESS)
        except OSError:
            pass
    offline = None  # a compile process: why it brings CUDA up after all (None: it does not)
    try:
        from .. import templates  # noqa: F401  (registers the built-ins)
        from ..plugins import load_plugins

        load_plugins(plugins)
        runner = CandidateRunner(device_type, l2_bytes)
        if role == "measure":
            runner.timer  # noqa: B018  (CUDA comes up now, while the caller builds its choices)
        elif device_type == "cuda":
            from .offline_compile import OPERAND_DEVICE, install

            if not switches.offline_compile:
                offline = "turned off (AUTOTUNE_OFFLINE_COMPILE=0)"
            elif device_info is None:
                offline = "no device description"
            else:
                offline = install(device_info)
            if offline is None:
                runner.compile_device = OPERAND_DEVICE
            else:
                _prepare_compiler()
    except BaseException as exc:  # noqa: BLE001 - the parent is told why this worker cannot start
        conn.send(WorkerAnswer.start_failed(short_error(exc), traceback.format_exc()))
        return
    compile_mode = None
    if role == "compile" and device_type == "cuda":  # how it compiles: without CUDA, or why not
        compile_mode = "offline" if offline is None else f"cuda: {offline}"
    conn.send(WorkerAnswer.ready(os.getpid(), compile_mode))
    if role == "measure" and device_type == "cuda":
        if switches.warm_triton != "0":  # checked by the executor before it started this process
            _warm_triton(runner, switches.warm_triton)
    try:
        _serve(conn, runner)
    finally:  # nothing a candidate started outlives the worker
        kill_descendants(os.getpid())


def _serve(conn, runner) -> None:
    """The request loop: a WorkerTask (one candidate's steps) at a time, each answered by one
    WorkerAnswer, until told to stop (None)."""
    while True:
        try:
            task = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if task is None:
            return
        try:
            if task.mode == COMPILE:
                compiled, fatal = runner.compile(task)
                answer = WorkerAnswer.compile_done(compiled, fatal)
            else:
                candidate, fatal = runner.run(task)
                answer = WorkerAnswer.measured(candidate, fatal)
        except Exception:  # noqa: BLE001 - a bug in the runner itself: report it, keep the trace
            error = "worker: " + traceback.format_exc()[-600:]
            fatal = True
            if task.mode == COMPILE:
                answer = WorkerAnswer.compile_done(CompileAnswer.failure(error), fatal)
            else:
                from ..store.results import RUNTIME_ERROR, Candidate

                answer = WorkerAnswer.measured(
                    Candidate(uid=task.uid, params=dict(task.config), status=RUNTIME_ERROR, error=error), fatal)
        kill_descendants(os.getpid(), escaped_only=True)  # the group goes with the worker
        conn.send(answer)
        if fatal:
            return
