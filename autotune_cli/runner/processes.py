"""Worker processes: how they start (a forkserver preloaded with torch, triton and the
templates, else spawn; never plain fork) and the handle the executor and the compile pool
keep for each (`WorkerProcess`: start, assign a task with a deadline, stop, kill)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

from ..errors import UserError
from ..hardware.device import DeviceInfo
from ..settings import START_METHODS, Switches
from .descendants import kill_descendants
from .messages import WorkerAnswer, WorkerTask
from .worker import worker_main


def _exit_reason(exitcode: int | None) -> str:
    if exitcode is None:
        return "worker vanished"
    if exitcode < 0:
        try:
            return f"worker killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"worker killed by signal {-exitcode}"
    return f"worker exited with code {exitcode}"


class WorkerProcess:
    def __init__(self, ctx, device: DeviceInfo, gpu_index: int, plugins: tuple[str, ...],
                 role: str, switches: Switches) -> None:
        self.ctx = ctx
        self.device = device
        self.gpu_index = gpu_index
        self.plugins = plugins
        self.role = role  # "measure" or "compile"
        self.switches = switches  # the environment's, read by the command: handed to the process
        self.process = None
        self.conn = None
        self.state = "down"  # down | starting | idle | busy
        self.deadline = 0.0
        self.task_index: int | None = None
        self.started_at = 0.0
        self.assigned_at = 0.0  # time.perf_counter() when its current task was sent

    def start(self, startup_timeout: float) -> None:
        """Start the process; if that fails (no process to be had now), nothing is left
        half-made and the error goes to the caller."""
        parent, child = self.ctx.Pipe()
        try:
            # The environment travels explicitly: a forkserver child would otherwise inherit
            # the server's environment from when it started, not the caller's of now.
            process = self.ctx.Process(
                target=worker_main,
                args=(child, self.device.device_type, self.gpu_index, self.plugins, self.device.l2_bytes,
                      worker_environment(self.ctx, self.device.device_type), self.role, self.device,
                      lifeline(), self.switches),
                daemon=True, name=f"autotune-{self.role}-{self.device.device_type}{self.gpu_index}",
            )
            self.started_at = time.monotonic()
            process.start()
        except BaseException:
            parent.close()
            child.close()
            raise
        child.close()
        self.process = process
        self.conn = parent
        self.state = "starting"
        self.deadline = time.monotonic() + startup_timeout

    def assign(self, index: int, task: WorkerTask, timeout: float) -> None:
        self.conn.send(task)
        self.assigned_at = time.perf_counter()
        self.state = "busy"
        self.task_index = index
        self.deadline = time.monotonic() + timeout

    def kill(self) -> None:
        """Kill the process and whatever its candidate started (its process group)."""
        if self.process is not None and self.process.pid is not None:  # it was started
            if self.process.is_alive():
                kill_group(self.process)
            self.process.join(timeout=5)
        if self.conn is not None:
            self.conn.close()
        self.process = self.conn = None
        self.state = "down"
        self.task_index = None

    def alive(self) -> bool:
        """Whether its process is running (a worker marked idle may have died since)."""
        return self.process is not None and self.process.is_alive()

    def receive(self) -> tuple[WorkerAnswer | None, str | None]:
        """(the next message, None), or (None, why) when the process has died: it is reaped
        and the reason read from its exit code. The caller decides what the death means."""
        try:
            return self.conn.recv(), None
        except (EOFError, OSError):
            pass
        if self.process is not None and self.process.pid is not None:
            self.process.join(timeout=5)
        return None, _exit_reason(self.process.exitcode if self.process is not None else None)

    def request_stop(self) -> None:
        """Ask the process to exit; it tears down (CUDA and all) on its own time."""
        if self.conn is not None and self.state in ("idle", "busy"):
            try:
                self.conn.send(None)
            except (OSError, BrokenPipeError):
                pass

    def stop(self, deadline: float | None = None) -> None:
        """Stop the process: asked first, killed if it is still there at `deadline`. One
        still starting has nothing to finish: it is killed at once."""
        if self.state == "starting":
            self.kill()
            return
        self.request_stop()
        if self.process is not None and self.process.pid is not None:
            wait_s = 2.0 if deadline is None else max(0.0, deadline - time.monotonic())
            self.process.join(timeout=wait_s)
        self.kill()


def kill_group(process) -> None:
    """SIGKILL to a worker's process group (a worker leads its own: worker._own_group), so
    that a candidate's children go with it; to the process alone where it has no group yet
    (just started) or is not the group's leader. First its descendants that left the
    group (descendants.py): read while the worker, their subreaper, still holds them."""
    pid = process.pid
    kill_descendants(pid, escaped_only=True)
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
            return
    except (OSError, AttributeError):  # gone already, or no process groups here
        pass
    process.kill()


# The write end of a pipe that only this process holds, for the life of the process: each
# worker gets the read end and watches it (worker._watch_parent); when this process dies,
# however it dies (kill -9 included), the read end sees EOF and the worker kills its group.
_lifeline: tuple[int, object, object] | None = None  # (pid, reader, writer)


def lifeline():
    """The read end of this process's lifeline (made at the first call in each process)."""
    global _lifeline
    with _forkserver_lock:
        if _lifeline is None or _lifeline[0] != os.getpid():
            reader, writer = multiprocessing.Pipe(duplex=False)
            _lifeline = (os.getpid(), reader, writer)
        return _lifeline[1]


def stop_all(workers) -> None:
    """Stop processes together: every one is asked first, so that they all tear down (CUDA
    and all) at once, then each is waited for, killed if still there after two seconds."""
    for worker in workers:
        worker.request_stop()
    deadline = time.monotonic() + 2.0
    for worker in workers:
        try:
            worker.stop(deadline)
        except Exception:  # noqa: BLE001 - the others are still stopped
            pass


# Modules a forkserver imports once, so that each worker it forks starts with them loaded
# instead of importing torch and triton again (seconds each, and nine at once contend).
# its imports, with a Ctrl-C on the terminal kept out of them (forkserver_preload.py)
FORKSERVER_PRELOAD = ["autotune_cli.runner.forkserver_preload"]

# Whether the forkserver this process started imported triton as Triton's interpreter
# (TRITON_INTERPRET=1: CPU workers) or not (GPU workers). Triton decorates its own library
# at import, so a server serves one kind only; the other kind is spawned.
_forkserver_interprets: bool | None = None
# Held while the forkserver is (re)started, which briefly changes os.environ, and while a
# worker's environment is copied (the tuners of several GPUs start workers in threads).
_forkserver_lock = threading.Lock()


def worker_context(method: str | None = None, device_type: str = "cuda"):
    """The multiprocessing context workers start from: `method` (Switches.start_method, from
    AUTOTUNE_START_METHOD), else a preloaded forkserver where the platform has one, else
    spawn. Never plain fork: the caller may have CUDA up."""
    method = method or ("forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn")
    if method not in START_METHODS:
        raise UserError(f"AUTOTUNE_START_METHOD must be forkserver or spawn, not {method!r}")
    interprets = device_type == "cpu"
    if method == "forkserver":
        with _forkserver_lock:
            if _forkserver_interprets is None:
                _ensure_forkserver(interprets)
            if _forkserver_interprets != interprets:
                method = "spawn"
    return multiprocessing.get_context(method)


def _ensure_forkserver(interprets: bool) -> None:
    """Start the forkserver, or start it again if it died, under the environment it must
    import with: TRITON_INTERPRET for its kind, and this process's sys.path (Python 3.11's
    forkserver does not take it over; PYTHONSAFEPATH keeps the working folder out, so that a
    folder named torch or triton there is not imported instead). Call with the lock held."""
    global _forkserver_interprets
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(FORKSERVER_PRELOAD)
    import sys

    server_env = {
        "TRITON_INTERPRET": "1" if interprets else "0",
        "PYTHONPATH": os.pathsep.join(os.getcwd() if p == "" else p for p in sys.path),
        "PYTHONSAFEPATH": "1",
    }
    saved = {name: os.environ.get(name) for name in server_env}
    os.environ.update(server_env)
    try:
        forkserver.ensure_running()  # a no-op while the server lives
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    _forkserver_interprets = interprets


def worker_environment(ctx, device_type: str) -> dict[str, str]:
    """The caller's environment for a new worker, copied under the lock; first, for a
    forkserver worker, the server is made sure of (restarted in its kind if it died)."""
    with _forkserver_lock:
        if ctx.get_start_method() == "forkserver":
            _ensure_forkserver(device_type == "cpu")
        return dict(os.environ)


def prestart_workers(device_type: str, start_method: str | None = None) -> None:
    """Start the forkserver now, so that its imports of torch and triton run beside the
    caller's own (the CLI calls this before it imports torch) rather than after them. (The
    CUDA driver is not brought up beside them: cuInit on a thread beside torch's import
    slowed that import by as long as cuInit takes; bench/README.md, "Cold tuning".)"""
    worker_context(start_method, device_type)


def stop_forkserver() -> None:
    """Stop the forkserver this process started, at once, even in the middle of its preload.
    It inherited the command's stdout and stderr: left to notice the command's exit on its
    own, it held them open until its imports were done, so a reader of the command's output
    through a pipe (`autotune ... --json | jq`, a script's subprocess.run) waited seconds
    for nothing (a cached `autotune mm` on the CPU: 0.6 s for the command, 4.3 s until the
    pipe closed). Call only once every worker it forked is stopped. Best effort: the
    forkserver is multiprocessing's, reached through its module's state."""
    global _forkserver_interprets
    from multiprocessing import forkserver

    with _forkserver_lock:
        if _forkserver_interprets is None:
            return
        server = getattr(forkserver, "_forkserver", None)
        pid = getattr(server, "_forkserver_pid", None)
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGTERM)
            server._stop()  # closes its pipe, reaps it, removes its socket
        except Exception:  # noqa: BLE001 - another Python's layout, or it was gone already
            for name in ("_forkserver_pid", "_forkserver_alive_fd", "_forkserver_address"):
                if hasattr(server, name):
                    setattr(server, name, None)  # the next worker starts a new server
        _forkserver_interprets = None
