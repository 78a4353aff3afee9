"""A Triton template's kernel against the same config rendered from an earlier version of its
jinja file, and torch.mm, side by side in one process (bench/common.SideBySide: interleaved
passes, each kernel verified): what a change to a template's source does, config by config.

The earlier files go in a folder under their own names, e.g. from a commit:

    mkdir -p before && for f in triton_mm triton_swap_ab triton_splitk; do
        git show REV:autotune_cli/templates/$f.py.jinja > before/$f.py.jinja; done
    PYTHONPATH=. python3 bench/template_ab.py --before before \\
        --cases "triton::mm@4096x4096x4096:128x128x64s4w4;triton::mm_swap_ab@16x4096x4096:16x64x128s4w4"

A case is UID@MxNxK (bf16, B stored [N, K]; `bMxNxKxB` for a batch) and its configs,
BMxBNxBK s<stages> w<warps> [k<split>] [f] (f: FIXED_NK, the twin), comma-separated.
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import parse_tile, tile_label  # noqa: E402

CASES = ("triton::mm@4096x4096x4096:128x128x64s4w4,128x256x64s3w8;triton::mm@256x50257x768:128x128x64s3w8f;"
         "triton::mm@128x4096x4096:64x64x128s5w4;triton::mm_swap_ab@16x4096x4096:16x64x128s4w4;"
         "triton::mm_splitk@32x4096x14336:32x64x128s4w4k4")


def parse_cases(text: str) -> list[tuple[str, tuple[int, ...], list[dict]]]:
    cases = []
    for part in filter(None, text.split(";")):
        head, configs = part.rsplit(":", 1)
        uid, shape = head.split("@")
        cases.append((uid, tuple(map(int, shape.split("x"))), [parse_tile(c) for c in configs.split(",")]))
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="folder of the earlier jinja files, by name")
    parser.add_argument("--cases", default=CASES)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()

    from bench.common import SideBySide, write_json
    from autotune_cli.problem import make_problem
    from autotune_cli.templates import get_template

    side = SideBySide()
    kernel_dir = tempfile.mkdtemp(prefix="template-ab-")
    rows = []
    for uid, shape, configs in parse_cases(args.cases):
        template = get_template(uid)
        earlier = Path(args.before) / template.template_file.name
        if not earlier.is_file():
            raise SystemExit(f"{earlier} is missing: the earlier {template.template_file.name}")
        before = copy.copy(template)
        before.template_file = earlier
        m, n, k, *batch = shape
        problem = make_problem(m=m, n=n, k=k, dtype="bfloat16", layout="nt", batch=batch[0] if batch else None)
        for config in configs:
            params = template.full_params(problem, config)
            runs = [before.build(problem, params, kernel_dir), template.build(problem, params, kernel_dir),
                    side.anchor(problem)]
            if template.render(problem, params) == before.render(problem, params):
                print(f"note: {uid} renders the same source from {earlier}", file=sys.stderr)
            times, verdicts = side.time_many(problem, runs, rounds=args.rounds)
            label = f"{uid.split('::')[1]} {'x'.join(map(str, shape))} {tile_label(config)}"
            rows.append({"case": label, "before": times[0], "now": times[1], "torch.mm": times[2],
                         "verified": all(v.ok for v in verdicts)})
            print(f"{label}: before {times[0] * 1000:.2f} us, now {times[1] * 1000:.2f} us, "
                  f"torch.mm {times[2] * 1000:.2f} us", flush=True)
    write_json("template_ab.json", rows)
    print(f"\n{'case (bf16, nt)':44} {'before':>9} {'now':>9} {'torch.mm':>9} {'before/now':>10}  ok")
    for row in rows:
        print(f"{row['case']:44} {row['before'] * 1000:9.2f} {row['now'] * 1000:9.2f} {row['torch.mm'] * 1000:9.2f} "
              f"{row['before'] / row['now']:10.3f}  {'yes' if row['verified'] else 'NO'}")
    print("(us; before/now > 1: the current template is faster)")


if __name__ == "__main__":
    main()
