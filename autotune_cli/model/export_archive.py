"""model/export_archive.py: a torch.export archive (`torch.export.save`, usually `.pt2`),
read by autotune itself: without importing torch, without unpickling, without opening a
weight.

A .pt2 written by torch.export.save is a zip whose records all lie in one folder; in it
`archive_format` holds "pt2", `archive_version` "0", and `models/model.json` the program
(read by export_program.py). Only those three small entries are read, each bounded both by
its declared size and by the bytes it inflates to (a zip entry can inflate a thousandfold):
at most MAX_PROGRAM_BYTES of program JSON. Anything the reader does not understand
(another schema major version, an argument form or symbolic expression it does not
handle, an entry past its cap) is a UserError naming it; the file is never handed to
`torch.export.load`, which unpickles what the archive holds.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from ..errors import UserError
from .export_expr import ArchiveUnreadable
from .export_program import ExportGraph, parse_exported_program
from .text import one_line, shown

# The most autotune inflates of one archive entry: the program's JSON (a few MB for a
# large model; the weights are never read), and the two one-word markers.
MAX_PROGRAM_BYTES = 128 << 20
_MAX_MARKER_BYTES = 64


def read_export(path: Path) -> ExportGraph:
    """The archive read by autotune's own reader, or a UserError naming what it did not
    understand. There is no fallback to torch.export.load: it unpickles what the archive
    holds, and a crafted pickle runs code."""
    try:
        return read_export_archive(path)
    except ArchiveUnreadable as exc:
        what = str(exc)
    except RecursionError:
        what = "nested too deeply"
    except Exception as exc:  # noqa: BLE001 - a crafted or damaged file: say so in one line
        what = f"unexpected content ({one_line(exc)})"
    raise UserError(f"cannot read exported program {path}: {shown(what)}; autotune reads "
                    ".pt2 files itself and never loads them with torch (that unpickles, which "
                    "can run code stored in the file)")


def read_export_archive(path: Path) -> ExportGraph:
    """Read the exported program from the archive's JSON, importing neither torch nor any
    weight. Raises ArchiveUnreadable (or another exception) on anything unexpected."""
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        if not names or "/" not in names[0]:
            raise ArchiveUnreadable("not a pt2 archive")
        root = names[0].split("/", 1)[0]  # torch's reader takes the first record's folder

        def read(name: str, cap: int) -> bytes:
            return read_entry(zf, f"{root}/{name}", cap)

        if (read("archive_format", _MAX_MARKER_BYTES) != b"pt2"
                or read("archive_version", _MAX_MARKER_BYTES) != b"0"):
            raise ArchiveUnreadable("unknown archive format or version")
        if f"{root}/models/model.json" not in names and any(
                name.startswith(f"{root}/data/aotinductor/") for name in names):
            raise ArchiveUnreadable("it is an AOTInductor package (compiled code, no program to read); "
                                    "give the torch.export.save file of the program it was compiled from")
        doc = json.loads(read("models/model.json", MAX_PROGRAM_BYTES))
    return parse_exported_program(doc)


def read_entry(zf: zipfile.ZipFile, name: str, cap: int) -> bytes:
    """One entry's bytes, refused if its declared size or the bytes it inflates to exceed
    cap (the declared size is the archive's word, not a bound)."""
    try:
        info = zf.getinfo(name)
    except KeyError:
        raise ArchiveUnreadable(f"no entry {name!r}") from None
    if info.file_size > cap:
        raise ArchiveUnreadable(f"entry {name!r} inflates to {info.file_size} bytes, more "
                                f"than the {cap} autotune reads")
    chunks: list[bytes] = []
    total = 0
    with zf.open(info) as stream:
        while True:
            block = stream.read(min(1 << 20, cap + 1 - total))
            if not block:
                break
            total += len(block)
            chunks.append(block)
            if total > cap:
                raise ArchiveUnreadable(f"entry {name!r} inflates to more than the {cap} "
                                        "bytes autotune reads")
    return b"".join(chunks)

