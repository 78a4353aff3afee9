"""What travels between the command and its worker processes: a `WorkerTask` (one
candidate's steps, to time or to compile), a `WorkerAnswer` (each message a worker sends
back), and a `CompileAnswer` (what a compile came to: in a compile process's answer, and what
the compile pool tells whoever asked for the kernel).

Frozen dataclasses, pickled through the workers' pipes: they never leave the process tree
that made them, so they are no file format, and a field may change with the code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from ..store.results import COMPILE_ERROR, SKIPPED

if TYPE_CHECKING:
    from ..candidates.choices import KernelTemplateChoice
    from ..problem import GemmProblem
    from ..settings import TimingPolicy
    from ..store.results import Candidate

# WorkerTask.mode
MEASURE = "measure"  # build, verify and time: a timing process
COMPILE = "compile"  # build and compile, launch nothing: a compile-pool process
# WorkerAnswer.kind
READY = "ready"  # the process is up and takes tasks
FAILED = "failed"  # the process could not start (why, and the trace)
RESULT = "result"  # a timed candidate
COMPILED = "compiled"  # a compiled kernel (or why not)


@dataclass(frozen=True, slots=True)
class WorkerTask:
    """One candidate's steps for a worker: the template's uid, the problem, the config, the
    seed of the random inputs, where built kernels go, and how to time it (`timing`; a
    compile task carries it too, unread)."""

    mode: str
    uid: str
    problem: GemmProblem
    config: Mapping[str, Any]
    seed: int
    kernel_dir: str
    timing: TimingPolicy | None = None

    @classmethod
    def for_choice(cls, choice: KernelTemplateChoice, mode: str, seed: int, kernel_dir: str,
                   timing: TimingPolicy | None) -> "WorkerTask":
        """The task that runs `choice` (what the executor and the compile pool send)."""
        return cls(mode, choice.uid, choice.problem, choice.config_dict, seed, kernel_dir, timing)


@dataclass(frozen=True, slots=True)
class CompileAnswer:
    """What a compile came to. `ok`: built, in `compile_s` seconds of the compile process,
    sent and done at `sent_at` and `done_at` (the pool's perf_counter times), `reused` where
    it was built for an earlier request or ahead of need. Else `status` and `error`, with
    `pool_failed` when no compile can be had from the pool any more, or `closed` when the pool
    was closed first (not the kernel's fault)."""

    ok: bool
    status: str = COMPILE_ERROR  # a failure's status
    error: str = ""
    compile_s: float = 0.0
    sent_at: float = 0.0
    done_at: float = 0.0
    reused: bool = False
    pool_failed: bool = False
    closed: bool = False

    @classmethod
    def built(cls, compile_s: float) -> "CompileAnswer":
        return cls(ok=True, compile_s=compile_s)

    @classmethod
    def failure(cls, error: str, status: str = COMPILE_ERROR) -> "CompileAnswer":
        return cls(ok=False, status=status, error=error)

    @classmethod
    def pool_closed(cls) -> "CompileAnswer":
        return cls(ok=False, status=SKIPPED, error="the compile pool was closed", closed=True)

    @classmethod
    def pool_failure(cls, reason: str) -> "CompileAnswer":
        return cls(ok=False, error=reason, pool_failed=True)


@dataclass(frozen=True, slots=True)
class WorkerAnswer:
    """One message from a worker process: `kind` says which fields it fills (READY: `pid`,
    and `compile_mode` for a CUDA compile process; FAILED: `error`, `trace`; RESULT:
    `candidate`; COMPILED: `compiled`). `fatal`: the process exits after this answer."""

    kind: str
    pid: int = 0
    compile_mode: str | None = None  # a compile process: "offline", or "cuda: <why not>"
    error: str = ""
    trace: str = field(default="", repr=False)
    candidate: Candidate | None = None
    compiled: CompileAnswer | None = None
    fatal: bool = False

    @classmethod
    def ready(cls, pid: int, compile_mode: str | None = None) -> "WorkerAnswer":
        return cls(READY, pid=pid, compile_mode=compile_mode)

    @classmethod
    def start_failed(cls, error: str, trace: str = "") -> "WorkerAnswer":
        return cls(FAILED, error=error, trace=trace)

    @classmethod
    def measured(cls, candidate: Candidate, fatal: bool) -> "WorkerAnswer":
        return cls(RESULT, candidate=candidate, fatal=fatal)

    @classmethod
    def compile_done(cls, answer: CompileAnswer, fatal: bool) -> "WorkerAnswer":
        return cls(COMPILED, compiled=answer, fatal=fatal)
