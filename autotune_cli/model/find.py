"""model/find.py: what a model file is, whether it may be read, and its matrix multiplies.

`model_format` tells a torch.export archive from TorchScript by the zip's listing alone (a
plain `torch.save` checkpoint, a pickle, is refused without being opened; a zip cut short is
said to be damaged); `check_model`
refuses TorchScript unless trusted; `find_gemms` reads the file the way its format needs
(export_archive.py, torchscript.py), classifies its calls, and makes the concrete problems
at each combination of dynamic-dim values (dims.py).
"""

from __future__ import annotations

import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..problem import MIN_GEMM_K, one_gemm
from .classify import UNTUNED_KINDS as UNTUNED_KIND_NAMES, VECTOR_PRODUCT, MatmulCall, Untuned
from .dims import concretize, export_bindings, outside_ranges
from .export_archive import read_export
from .found import GROUP_SOURCE, FoundGemm, NotTuned
from .text import one_line, shown
from .torchscript import read_torchscript


def model_format(path: Path) -> str:
    """"export" or "torchscript", read from the archive's listing (cheap: a caller checks the
    file with it before starting work); else a UserError that says what the file is."""
    if not path.exists():
        raise UserError(f"model file not found: {path}")
    if path.is_dir():
        raise UserError(f"not a model file: {path} is a directory")
    if not path.is_file():
        raise UserError(f"not a model file: {path} is not a regular file")
    try:
        cut = _cut_short(path)
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    if cut:
        raise UserError(f"{path} is damaged or truncated: it starts as a zip archive (as a .pt2 or TorchScript "
                        "file does) but does not end as one; copy or save it again")
    try:
        names = _zip_names(path)
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    if names is None:
        raise UserError(
            f"{path} is not a saved model: expected a torch.export program (.pt2) or TorchScript (.pt)")
    if any(n == "archive_format" or n.endswith("/archive_format") for n in names):
        return "export"
    if any("/code/" in n or n.startswith("code/") for n in names) and any(
        n.endswith("constants.pkl") for n in names
    ):
        return "torchscript"
    if any(n.endswith("data.pkl") for n in names):
        raise UserError(
            f"{path} is a torch.save checkpoint, not a program: save the model with "
            "torch.export.save or torch.jit.save")
    raise UserError(
        f"{path} is not a saved model: expected a torch.export program (.pt2) or TorchScript (.pt)")


def _zip_names(path: Path) -> list[str] | None:
    """The zip's listing; None for a file that is no zip archive. A zip whose listing does not
    read (zipfile raises what the damage leads it to: BadZipFile, a name that is no UTF-8, an
    unknown version) is damaged: a UserError that says so in one line, not a traceback."""
    if not zipfile.is_zipfile(path):
        return None
    try:
        with zipfile.ZipFile(path) as zf:
            return zf.namelist()
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001 - damage shows as any of zipfile's errors
        raise UserError(f"{path} is damaged or truncated: its zip listing does not read "
                        f"({shown(one_line(exc))}); copy or save it again") from None


_ZIP_START = b"PK\x03\x04"  # a zip archive's first local file header
_ZIP_END = b"PK\x05\x06"  # its end-of-central-directory record: 22 bytes, then a comment
_ZIP_END_SPAN = 22 + 0xFFFF  # the record and the longest comment


def _cut_short(path: Path) -> bool:
    """Whether a file that starts as a zip archive lacks an end record that ends it (a copy or
    download cut short). zipfile looks for the last end record near the end, and in a cut
    file finds that of an archive stored inside (a .pt2's weights), whose entries it lists."""
    with open(path, "rb") as f:
        if f.read(4) != _ZIP_START:
            return False
        size = f.seek(0, 2)
        f.seek(max(0, size - _ZIP_END_SPAN))
        tail = f.read()
    at = tail.rfind(_ZIP_END)
    return at < 0 or at + 22 > len(tail) or at + 22 + int.from_bytes(tail[at + 20:at + 22], "little") != len(tail)


def find_gemms(
    path: str | Path,
    *,
    input_shapes: list[tuple[tuple[int, ...], str]] | None = None,
    hints: dict[str, list[int]] | None = None,
    device: str = "cuda",
    allow_tf32: bool = False,
    trust_torchscript: bool = False,
    groups: bool = False,
    notes: list[str] | None = None,
    not_tuned: list[NotTuned] | None = None,
    scenarios: list[dict[str, int]] | None = None,
) -> list[FoundGemm]:
    """Every GEMM in one forward pass of the saved model at `path`, merged, with counts.

    The formats are read as export_archive.py and torchscript.py say, the calls mapped as
    classify.py says, dynamic dims given values as dims.py says. A TorchScript file is read
    only with trust_torchscript (reading it runs it). `groups`: each one GEMM of linears of
    one input follows (one_gemm_groups; a torch.export program's, whose graph names the
    input: a TorchScript run does not). What the list leaves out that the caller should know
    (matmuls inside a fused op, counts that are not exact) is appended to `notes`, one line
    each; the calls no listed problem stands for (convolutions, matrix-vector products,
    matmuls in other dtypes, ...) to `not_tuned`, one NotTuned per kind, and to `notes` as
    one "not tuned:" line. `scenarios` receives each set of dynamic-dim values the model was
    read at, by the names a FoundGemm's hint uses ([{}] where it has none): a forward pass
    runs at one of them, and every problem whose hint agrees with it.
    """
    path = Path(path)
    fmt = check_model(path, trust_torchscript=trust_torchscript)
    fused: list[str] = []
    autocast: dict[str, str] = {}  # autocast region's device type -> its matmuls' dtype
    names: dict[str, str] = {}  # symbol -> the name it is shown by: --hint's, else its input dim (x.0)
    if fmt == "export":
        graph = read_export(path)
        raws, untuned, autocast = graph.raws, graph.untuned, graph.autocast
        bindings = export_bindings(graph.raws, graph.inputs, graph.ranges, input_shapes, hints, names,
                                   graph.input_dtypes)
        if notes is not None:
            notes.extend(outside_ranges(bindings, graph.ranges, names, graph.inputs))
    else:
        if hints:
            raise UserError("--hint applies to exported programs with dynamic dims; "
                            "a TorchScript model takes its sizes from --input-shape")
        raws, fused, untuned, autocast = read_torchscript(path, input_shapes)
        bindings = [{}]

    calls = [r for r in raws if isinstance(r, MatmulCall)]
    kept = [r for r in calls if not _outer_product(r)]
    skipped = _not_tuned(raws, untuned, len(calls) - len(kept))
    if not_tuned is not None:
        not_tuned.extend(skipped)
    if len(kept) < len(calls) and notes is not None:
        small = len(calls) - len(kept)
        notes.append(f"{small} matmul{'s' if small != 1 else ''} with K = 1 (an outer product, pointwise "
                     "work the compiler fuses) not tuned")
    way_out = ("save the model with torch.export.export and torch.export.save, or trace it "
               "in train mode (model.train() before torch.jit.trace)")
    if not kept:
        if calls:
            raise UserError(f"no GEMMs found in {path}: its matmuls all have K = 1, outer products "
                            "(pointwise work the compiler fuses), which autotune does not tune")
        if fused:
            raise UserError(
                f"no matmuls found in {path}: they run inside {', '.join(fused)}, a fused op "
                "autotune does not look into (nn.Transformer layers traced in eval mode take "
                f"this fast path); {way_out}")
        other = sorted({r for r in raws if isinstance(r, str)})
        only = ([f"matmuls in {', '.join(other)}"] if other else []) + [
            item.many for item in skipped if item.what == VECTOR_PRODUCT]
        fused_ops = [item for item in skipped if item.what in UNTUNED_KIND_NAMES and item.what != VECTOR_PRODUCT]
        if fused_ops:  # a recurrent layer, a convolution: what the model does instead
            only.append(", ".join(item.said() for item in fused_ops))
        one = len(only) == 1 and len(fused_ops) == 1 and fused_ops[0].count == 1
        extra = f" (only {' and '.join(only)}, which {'is' if one else 'are'} not tuned)" if only else ""
        raise UserError(f"no matmuls found in {path}{extra}")
    said = [item.said() for item in skipped if item.what != _OUTER_PRODUCT]  # that one has its note
    if said and notes is not None:
        notes.append(f"not tuned: {', '.join(said)}, whose work is not a GEMM autotune tunes; each matmul's "
                     "share is of the matmuls listed, not of the model")
    if fmt == "export" and notes is not None:
        notes.extend(graph.notes)
    if notes is not None:
        notes.extend(f"the matmuls inside torch.autocast({kind!r}) are listed in {dtype}, as they run on "
                     f"{kind}; on {device} that region leaves them in their operands' dtypes"
                     for kind, dtype in autocast.items() if kind != device)
    if fused and notes is not None:
        notes.append(f"the matmuls inside {', '.join(fused)} (a fused op) are not listed; "
                     f"to list them, {way_out}")
    if groups and fmt != "export" and notes is not None:
        notes.append("--groups reads a torch.export program: a TorchScript run does not say which "
                     "linears share an input, so no group is listed")
    if groups and fmt == "export" and notes is not None and not any(c.source == "aten.linear" for c in kept):
        notes.append("--groups found no aten.linear to group: a program after run_decompositions() "
                     "holds mm and addmm instead; export it without decomposing to list groups")
    extra = one_gemm_groups(kept) if groups else []
    if scenarios is not None:
        scenarios.extend({names.get(s, s): value for s, value in at.items()} for at in bindings)
    given = None if input_shapes is None else "--input-shape " + " ".join(
        "x".join(map(str, shape)) + (f":{dtype}" if dtype else "") for shape, dtype in input_shapes)
    return concretize(kept + extra, bindings, device=device, allow_tf32=allow_tf32, names=names,
                      sizes_from=given)


_OUTER_PRODUCT = "matmul with K = 1"


def _not_tuned(raws: list[Any], untuned: dict[str, int], outer: int) -> list[NotTuned]:
    """The calls no listed problem stands for, one NotTuned per kind, by name: the ops the
    reader counted, matrix-vector products, matmuls in a dtype not tuned, outer products."""
    counts = dict(untuned)
    for raw in raws:
        what = raw.kind if isinstance(raw, Untuned) else f"matmul in {raw}" if isinstance(raw, str) else None
        if what:
            counts[what] = counts.get(what, 0) + 1
    if outer:
        counts[_OUTER_PRODUCT] = outer
    return [NotTuned(what, n) for what, n in sorted(counts.items())]


def one_gemm_groups(calls: list[MatmulCall]) -> list[MatmulCall]:
    """The one GEMM (problem.one_gemm) of each set of linears that read one input (attention's
    q, k and v): what autotune_cli.compile may run in their place, and looks up, so that a
    cache tuned from this list serves it. The compile groups a graph of static shapes alone
    (routing/groups.py), as torch.compile's first graph of a shape is: a dynamic M stays a
    symbol here, and concretize makes the group at each value M is read at, beside its
    linears."""
    by_input: dict[str, list[MatmulCall]] = {}
    for call in calls:
        if call.input is not None:
            by_input.setdefault(call.input, []).append(call)
    out = []
    for members in by_input.values():
        group = one_gemm(members)
        weights = [c.weight for c in members]
        if group is not None and None not in weights and len(set(weights)) == len(weights):  # one layer twice: no group
            out.append(replace(group, source=GROUP_SOURCE, input=None))
    return out


def _outer_product(call: MatmulCall) -> bool:
    """K is a number below MIN_GEMM_K (a dynamic K is tuned at its values)."""
    k = call.k
    return bool(getattr(k, "is_Number", isinstance(k, int))) and int(k) < MIN_GEMM_K


def check_model(path: Path, *, trust_torchscript: bool = False) -> str:
    """model_format(path), refusing TorchScript unless it is trusted: a TorchScript file is
    code, and reading it runs it (a caller checks this before starting work)."""
    fmt = model_format(path)
    if fmt == "torchscript" and not trust_torchscript:
        raise UserError(
            f"{path} is TorchScript, which is code: reading it loads and runs the model. "
            "Pass --trust-torchscript for a file you trust, or save the model with "
            "torch.export.save (a .pt2 is read without running anything)")
    return fmt
