"""triton::mm configs beside their FIXED_NK twins (N and K written into the kernel, what the
tune adds for its best contenders: search/base.time_fixed_twins) and torch.mm, timed side by
side in one process (bench/common.SideBySide: a CUDA graph over rotating operand copies, or
events with the L2 flushed, interleaved passes), every kernel verified. `--strides` adds
a third form that also writes the strides of A, B and C in, as Inductor's templates do for
static shapes: what that would add (the tune does not offer it: a route's kernel serves any
strides of its layout).

PYTHONPATH=. python3 bench/twin_sweep.py [--cases "256x50257x768:128x128x64s3w4,128x128x64s3w8;..."]
    [--strides] [--rounds 8]
A case is MxNxK (bf16, B stored [N, K]) and its configs, BMxBNxBK s<stages> w<warps>.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CASES = ("256x50257x768:128x128x64s3w4,128x128x64s3w8;64x50257x768:64x128x64s3w4,64x64x64s4w4;"
         "64x32001x4096:64x128x64s3w4;128x4096x4096:64x64x128s5w4,64x128x128s4w4;256x4096x4096:64x128x128s4w4")
# The runtime arguments the --strides form writes in (all but M, which a route's calls vary).
WRITTEN = ("N", "K", "N_LOAD", "N_STORE", "stride_ab", "stride_am", "stride_ak", "stride_bb", "stride_bk",
           "stride_bn", "stride_cb", "stride_cm", "stride_cn")


def parse_config(text: str) -> dict:
    bm, bn, bk, stages, warps = map(int, re.fullmatch(r"(\d+)x(\d+)x(\d+)s(\d+)w(\d+)", text).groups())
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_stages": stages, "num_warps": warps}


def parse_cases(text: str) -> list[tuple[tuple[int, int, int], list[dict]]]:
    cases = []
    for part in filter(None, text.split(";")):
        shape, configs = part.split(":")
        cases.append((tuple(map(int, shape.split("x"))), [parse_config(c) for c in configs.split(",")]))
    return cases


def with_strides_written(source: str, values: dict) -> str:
    """The rendered kernel with WRITTEN's arguments renamed away and set as constexprs."""
    for name in WRITTEN:
        source = re.sub(rf"\b{name}\b(?=,)", f"{name}_ARG", source, count=1)  # in the signature
    lines = source.splitlines()
    at = next(i for i, line in enumerate(lines) if "GROUP_M: tl.constexpr" in line)
    lines[at + 1:at + 1] = [f"    {name}: tl.constexpr = {values[name]}" for name in WRITTEN]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default=CASES)
    parser.add_argument("--strides", action="store_true")
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()

    from bench.common import SideBySide, write_json
    from autotune_cli.problem import make_problem
    from autotune_cli.runner.verify import make_operands
    from autotune_cli.templates import get_template
    from autotune_cli.templates.triton_base import OneLaunchKernel, load_kernel

    side = SideBySide()
    kernel_dir = tempfile.mkdtemp(prefix="twin-sweep-")
    template = get_template("triton::mm")
    rows = []
    for (m, n, k), configs in parse_cases(args.cases):
        problem = make_problem(m=m, n=n, k=k, dtype="bfloat16", layout="nt")
        ops = make_operands(problem, 1, "cuda")
        (sam, sak), (sbk, sbn), (scm, scn) = ops.a.stride(), ops.b.stride(), ops.out.stride()
        values = dict(N=n, K=k, N_LOAD=n, N_STORE=n, stride_ab=0, stride_am=sam, stride_ak=sak, stride_bb=0,
                      stride_bk=sbk, stride_bn=sbn, stride_cb=0, stride_cm=scm, stride_cn=scn)
        for config in configs:
            params = template.full_params(problem, config)
            plain = template.build(problem, params, kernel_dir)
            twin = template.build(problem, template.full_params(problem, template.fixed_twin(config)), kernel_dir)
            runs, names = [plain, twin], ["plain", "twin"]
            if args.strides:
                kernel, grid, arguments, _ = plain.launch_parts
                written = load_kernel(with_strides_written(template.render(problem, params), values), kernel_dir)
                runs.append(OneLaunchKernel(written, params, grid, arguments))
                names.append("+strides")
            runs.append(side.anchor(problem))
            names.append("torch.mm")
            times, verdicts = side.time_many(problem, runs, rounds=args.rounds)
            label = (f"{m}x{n}x{k} {config['BLOCK_M']}x{config['BLOCK_N']}x{config['BLOCK_K']} "
                     f"s{config['num_stages']} w{config['num_warps']}")
            rows.append({"case": label, **{name: t for name, t in zip(names, times)},
                         "verified": all(v.ok for v in verdicts)})
            print(f"{label}: " + " ".join(f"{name} {t * 1000:.2f} us" for name, t in zip(names, times)), flush=True)
    write_json("twin_sweep.json", rows)
    names = [name for name in ("plain", "twin", "+strides", "torch.mm") if name in rows[0]]
    print(f"\n{'case (bf16, nt)':32} " + " ".join(f"{name:>9}" for name in names) + "  twin x  ok")
    for row in rows:
        print(f"{row['case']:32} " + " ".join(f"{row[name] * 1000:9.2f}" for name in names)
              + f"  {row['plain'] / row['twin']:6.3f}  {'yes' if row['verified'] else 'NO'}")
    print("(us; twin x: plain / twin)")


if __name__ == "__main__":
    main()
