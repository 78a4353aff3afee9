"""runner/forkserver_preload.py: what the forkserver imports before it forks a worker (torch,
triton, the worker and the templates), with SIGINT ignored meanwhile.

The forkserver shares the terminal's process group: a Ctrl-C during these imports (seconds)
would print the server's own traceback beside the command's one line. The handler it had is
put back after them, so the server records it as the one its children start with (its own
main ignores SIGINT only after the preload): a forkserver child of the user's program (a
DataLoader worker) takes Ctrl-C as before."""

import signal

MODULES = ("torch", "triton", "autotune_cli.runner.worker", "autotune_cli.templates")


def _preload() -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for name in MODULES:
            try:
                __import__(name)
            except ImportError:  # as the forkserver's own preload: the worker reports it
                pass
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)


_preload()
