"""The files a rendered Triton source is loaded from: written where the kernels folder is
(or, where it cannot be written, a private folder of the process's), then run as a module.
Kept apart from the templates: how a file is placed never changes a kernel, so it is no
part of a template's source hash (TritonTemplate.source_text)."""

from __future__ import annotations

import atexit
import errno
import hashlib
import linecache
import os
import shutil
import sys
import tempfile
import types
from functools import lru_cache
from pathlib import Path


# kernel files this process has written or found right: where it was asked to write each,
# and where it is (another folder where that one cannot be written)
_WRITTEN: dict[Path, Path] = {}
READ_ONLY_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


@lru_cache(maxsize=None)
def _private_folder() -> Path:
    """This process's own folder for kernel files, made where the kernels folder cannot be
    written (a cache deployed read-only): new and private (0700), so nothing of another user's
    is in it; removed at exit."""
    folder = tempfile.mkdtemp(prefix="autotune-kernels-")
    atexit.register(shutil.rmtree, folder, True)
    return Path(folder)


def _write_source(directory: Path, path: Path, source: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        handle.write(source)
    os.replace(tmp, path)


def load_kernel(source: str, kernel_dir: str):
    """The one @triton.jit function of a rendered source."""
    (kernel,) = load_kernels(source, kernel_dir, count=1)
    return kernel


def _holds(path: Path, source: str) -> bool:
    """Whether `path` is a regular file holding exactly `source` (a FIFO or a device put in
    its place is not read, nor more bytes than the source has)."""
    from ..safe_read import read_regular_file

    expected = source.encode()
    try:
        return read_regular_file(path, limit=len(expected)) == expected
    except OSError:
        return False


def load_kernels(source: str, kernel_dir: str, count: int) -> list:
    """Write rendered source to a file (Triton reads a kernel's source from its file), run
    it as a module once per process, and return its @triton.jit functions in the order they
    are defined. The module runs the text rendered here, never what the file or a .pyc beside
    it holds (the kernels folder may be shared, and written between our write and our read),
    and linecache is pinned to that text, which is what Triton reads the functions from."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    module_name = f"autotune_kernel_{digest}"
    directory = Path(kernel_dir)
    asked = directory / f"{module_name}.py"
    path = _WRITTEN.get(asked)
    if path is None:  # each file checked once per process, kept where the user can read it
        path = asked
        if not _holds(path, source):
            try:
                _write_source(directory, path, source)
            except OSError as exc:
                if exc.errno not in READ_ONLY_ERRNOS:
                    raise
                path = _private_folder() / asked.name
                _write_source(path.parent, path, source)
        _WRITTEN[asked] = path
    module = sys.modules.get(module_name)
    if module is None:
        filename = str(path)
        module = types.ModuleType(module_name)
        module.__file__ = filename
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        sys.modules[module_name] = module
        try:
            exec(compile(source, filename, "exec"), module.__dict__)
        except BaseException:
            sys.modules.pop(module_name, None)
            raise
    kernels = [v for v in vars(module).values() if hasattr(v, "run") and hasattr(v, "fn")]
    if len(kernels) != count:
        raise RuntimeError(f"{module.__file__} defines {len(kernels)} kernels, expected {count}")
    return kernels


def interpreter_mismatch() -> str:
    """Why a kernel loaded now would not run in the mode autotune reads
    (triton_base.interpreting: the variable), or "": `@triton.jit` reads triton's setting at
    each decoration, and triton's own helpers (tl.cdiv, ...) were made when it was imported,
    so a kernel whose kind differs from its helpers' fails on its first call
    (InterpreterError). Nothing to say before triton is imported."""
    from .triton_base import interpreting

    triton = sys.modules.get("triton")
    if triton is None:
        return ""
    knobs = getattr(triton, "knobs", None)  # triton >= 3.4; before it, jit read the variable itself
    now = bool(knobs.runtime.interpret) if knobs is not None else interpreting()
    helper = getattr(sys.modules.get("triton.language"), "cdiv", None)  # a @triton.jit of triton's own
    at_import = type(helper).__name__ == "InterpretedFunction" if helper is not None else now
    if now and not at_import:
        return "triton was imported before TRITON_INTERPRET=1 was set (set it before anything imports triton)"
    if at_import and not now:
        return "triton was imported under TRITON_INTERPRET=1, which is off now"
    if now != interpreting():
        return f"triton reads TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET', '')!r} as {'on' if now else 'off'}"
    return ""
