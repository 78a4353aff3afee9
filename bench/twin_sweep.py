"""triton::mm configs beside their FIXED_NK twins (N and K written into the kernel, what the
tune adds for its best contenders: search/base.time_fixed_twins) and torch.mm, timed side by
side in one process (bench/common.SideBySide: a CUDA graph over rotating operand copies, or
events with the L2 flushed, interleaved passes), every kernel verified.

`--forms` adds forms of the twin, each nearer Inductor's kernel source (the tune offers none
of them: a route's kernel serves any strides of its layout): `strides` writes the strides of
A, B and C in, as Inductor's templates do for static shapes; `m` writes M in; `plain` starts
from the plain kernel instead of the twin. `--strides` is `--forms strides`.
`--inductor` adds Inductor's own kernel for the same config (max-autotune with a lookup table
naming only that config); every kernel then allocates its output at each call, as the
compiled function does. Inductor's kernel sources go to $OUT/twin_sweep_inductor.txt.
`--outs` times every kernel of a case in each of these output contexts, a row each: `shared`
(graph timing's copies of A and B all write one output, the tuner's way), `rotated` (each
copy its own output), `allocated` (a new output at each call, as a compiled function
allocates it). Default: allocated with `--inductor`, else shared.

PYTHONPATH=. python3 bench/twin_sweep.py [--cases "256x50257x768:128x128x64s3w4,128x128x64s3w8;..."]
    [--forms strides,m,strides+m] [--inductor] [--outs shared,rotated,allocated] [--rounds 8]
A case is MxNxK (bf16, B stored [N, K]) and its configs, BMxBNxBK s<stages> w<warps>.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import OUTPUTS, parse_tile, tile_label  # noqa: E402

CASES = ("256x50257x768:128x128x64s3w4,128x128x64s3w8;64x50257x768:64x128x64s3w4,64x64x64s4w4;"
         "64x32001x4096:64x128x64s3w4;128x4096x4096:64x64x128s5w4,64x128x128s4w4;256x4096x4096:64x128x128s4w4")
# The runtime arguments the `strides` form writes in (all but M, which a route's calls vary);
# the `m` form writes M in too.
WRITTEN = ("N", "K", "N_LOAD", "N_STORE", "stride_ab", "stride_am", "stride_ak", "stride_bb", "stride_bk",
           "stride_bn", "stride_cb", "stride_cm", "stride_cn")
FORMS = ("plain", "strides", "m")


def parse_config(text: str) -> dict:
    """A plain triton::mm config (bench/common.parse_tile, without a split or the twin's f)."""
    config = parse_tile(text)
    if set(config) & {"SPLIT_K", "FIXED_NK"}:
        raise SystemExit(f"config {text!r}: twin_sweep takes plain configs (BMxBNxBK s<stages> w<warps>)")
    return config


def parse_cases(text: str) -> list[tuple[tuple[int, int, int], list[dict]]]:
    cases = []
    for part in filter(None, text.split(";")):
        shape, configs = part.split(":")
        cases.append((tuple(map(int, shape.split("x"))), [parse_config(c) for c in configs.split(",")]))
    return cases


def with_written(source: str, values: dict, names) -> str:
    """The rendered kernel with the runtime arguments `names` renamed away and set as
    constexprs."""
    for name in names:
        source = re.sub(rf"\b{name}\b(?=,)", f"{name}_ARG", source, count=1)  # in the signature
    lines = source.splitlines()
    at = next(i for i, line in enumerate(lines) if "GROUP_M: tl.constexpr" in line)
    lines[at + 1:at + 1] = [f"    {name}: tl.constexpr = {values[name]}" for name in names]
    return "\n".join(lines) + "\n"


def form_source(source: str, form: str, values: dict) -> str:
    """The twin's rendered source in `form`: parts of FORMS joined by '+'."""
    parts = form.split("+")
    if not set(parts) <= set(FORMS):
        raise SystemExit(f"unknown form {form!r}: its parts must be among {', '.join(FORMS)}")
    names = (WRITTEN if "strides" in parts else ()) + (("M",) if "m" in parts else ())
    return with_written(source, values, [n for n in names if f"{n}_ARG" not in source])


def inductor_kernel(problem, config: dict, ops):
    """torch.mm compiled by Inductor's max-autotune with a lookup table that names only
    `config` of its triton::mm template: (a call on operands that returns its own output,
    the generated source)."""
    import torch
    from torch._inductor import config as inductor_config
    from torch._inductor.lookup_table import LookupTableChoices
    from torch._inductor.utils import run_and_get_code
    from torch._inductor.virtualized import V

    from autotune_cli.export import inductor_key, inductor_value

    value = inductor_value({"uid": "triton::mm", "params": config}, problem)
    table = {inductor_key(problem, torch.cuda.get_device_name()): [value]}
    torch._dynamo.reset()
    with inductor_config.patch({"lookup_table.table": table, "force_disable_caches": True}), \
            V.set_choices_handler(LookupTableChoices()):
        compiled = torch.compile(lambda x, y: torch.mm(x, y), mode="max-autotune-no-cudagraphs", dynamic=False)
        _, sources = run_and_get_code(compiled, ops.a, ops.b)
    source = "\n".join(sources)
    if "triton_tem_" not in source:
        raise SystemExit(f"Inductor did not run its triton::mm template for {config}: is the lookup table read?")
    return (lambda o: compiled(o.a, o.b)), source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default=CASES)
    parser.add_argument("--forms", default="", help="forms of the twin to add, comma-separated (see above)")
    parser.add_argument("--strides", action="store_true", help="the same as --forms strides")
    parser.add_argument("--inductor", action="store_true", help="add Inductor's kernel for each config")
    parser.add_argument("--outs", default="", help=f"output contexts, comma-separated, of {', '.join(OUTPUTS)}")
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    outs = [o for o in args.outs.split(",") if o] or (["allocated"] if args.inductor else ["shared"])
    if not set(outs) <= set(OUTPUTS):
        raise SystemExit(f"--outs: each of {', '.join(OUTPUTS)}")

    from bench.common import SideBySide, out_dir, write_json
    from autotune_cli.problem import make_problem
    from autotune_cli.runner.verify import make_operands
    from autotune_cli.templates import get_template
    from autotune_cli.templates.kernel_files import load_kernel
    from autotune_cli.templates.triton_base import OneLaunchKernel

    side = SideBySide()
    kernel_dir = tempfile.mkdtemp(prefix="twin-sweep-")
    template = get_template("triton::mm")
    forms = [f for f in args.forms.split(",") if f] or (["strides"] if args.strides else [])
    rows, inductor_sources = [], []
    for (m, n, k), configs in parse_cases(args.cases):
        problem = make_problem(m=m, n=n, k=k, dtype="bfloat16", layout="nt")
        ops = make_operands(problem, 1, "cuda")
        (sam, sak), (sbk, sbn), (scm, scn) = ops.a.stride(), ops.b.stride(), ops.out.stride()
        values = dict(M=m, N=n, K=k, N_LOAD=n, N_STORE=n, stride_ab=0, stride_am=sam, stride_ak=sak, stride_bb=0,
                      stride_bk=sbk, stride_bn=sbn, stride_cb=0, stride_cm=scm, stride_cn=scn)
        for config in configs:
            params = template.full_params(problem, config)
            plain = template.build(problem, params, kernel_dir)
            twin_params = template.full_params(problem, template.fixed_twin(config))
            runs, names = [plain, template.build(problem, twin_params, kernel_dir)], ["plain", "twin"]
            _, grid, arguments, _ = plain.launch_parts
            for form in forms:
                base = params if "plain" in form.split("+") else twin_params
                source = form_source(template.render(problem, base), form, values)
                runs.append(OneLaunchKernel(load_kernel(source, kernel_dir), base, grid, arguments))
                names.append(f"+{form}")
            if args.inductor:
                call, source = inductor_kernel(problem, params, ops)
                runs.append(call)
                names.append("inductor")
                inductor_sources.append(f"# {m}x{n}x{k} {config}\n{source}")
            runs.append(side.anchor(problem))
            names.append("torch.mm")
            tile = f"{m}x{n}x{k} {tile_label(config)}"
            for context in outs:  # Inductor's compiled function allocates its output in each
                times, verdicts = side.time_many(problem, runs, rounds=args.rounds, output=context)
                label = tile if len(outs) == 1 else f"{tile} {context}"
                rows.append({"case": label, **{name: t for name, t in zip(names, times)},
                             "verified": all(v.ok for v in verdicts)})
                print(f"{label}: " + " ".join(f"{name} {t * 1000:.2f} us" for name, t in zip(names, times)),
                      flush=True)
    write_json("twin_sweep.json", rows)
    if inductor_sources:
        (out_dir() / "twin_sweep_inductor.txt").write_text("\n\n".join(inductor_sources))
    names = [name for name in rows[0] if name not in ("case", "verified")]
    width = max(9, *map(len, names))
    print(f"\n{'case (bf16, nt)':42} " + " ".join(f"{name:>{width}}" for name in names) + "  twin x  ok")
    for row in rows:
        print(f"{row['case']:42} " + " ".join(f"{row[name] * 1000:{width}.2f}" for name in names)
              + f"  {row['plain'] / row['twin']:6.3f}  {'yes' if row['verified'] else 'NO'}")
    print("(us; twin x: plain / twin)")


if __name__ == "__main__":
    main()
