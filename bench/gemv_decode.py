"""Decode GEMMs (M <= 8) against the HBM floor: triton::gemv alone (its exhaustive space)
and then every template (the default search), each list tuned in one process through
`autotune mm --from` (fresh caches), the winners' kernel times beside bytes / 4.3 TB/s.

PYTHONPATH=. python3 bench/gemv_decode.py [--device cuda] [--shapes 1x4096x4096,4x4096x4096]

Shapes are MxNxK, bfloat16, layout nt (weights stored [n, k], as nn.Linear keeps them).
Writes $OUT/gemv_decode.json (or bench_out/).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotune_cli.roofline import HBM_BYTES_PER_S  # noqa: E402

SHAPES = "1x4096x4096,1x14336x4096,1x4096x14336,4x4096x4096,8x14336x4096,8x4096x4096"


def tune(shapes_file: Path, device: str, extra: list[str]) -> list[dict]:
    cache = tempfile.mkdtemp(prefix="autotune-gemv-")
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "autotune_cli", "mm", "--from", str(shapes_file),
                           "--device", device, "--json", *extra], env=env, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(proc.stderr[-2000:])
    return json.loads(proc.stdout)["problems"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shapes", default=SHAPES)
    args = parser.parse_args()
    entries = []
    for text in args.shapes.split(","):
        m, n, k = (int(part) for part in text.split("x"))
        entries.append({"m": m, "n": n, "k": k, "dtype": "bfloat16", "layout": "nt"})
    shapes_file = Path(tempfile.mkdtemp()) / "shapes.json"
    shapes_file.write_text(json.dumps(entries))
    alone = tune(shapes_file, args.device, ["--templates", "triton::gemv", "--search", "exhaustive"])
    every = tune(shapes_file, args.device, [])
    rows = []
    print(f"{'problem':28} {'floor us':>9} {'gemv us':>9} {'x floor':>8} {'winner us':>10}  winner")
    for entry, mine, best in zip(entries, alone, every):
        floor = 2 * (entry["m"] * entry["k"] + entry["k"] * entry["n"] + entry["m"] * entry["n"]) / HBM_BYTES_PER_S
        gemv_us = mine["winner"]["ms"] * 1e3 if mine["winner"] else None
        best_us = best["winner"]["ms"] * 1e3 if best["winner"] else None
        rows.append({"problem": entry, "floor_us": floor * 1e6, "gemv_us": gemv_us,
                     "gemv_params": mine["winner"]["params"] if mine["winner"] else None,
                     "winner_us": best_us, "winner": best["winner"]})
        print(f"{mine['describe']:28} {floor * 1e6:9.2f} "
              f"{gemv_us if gemv_us is not None else float('nan'):9.2f} "
              f"{(gemv_us or float('nan')) / (floor * 1e6):8.2f} "
              f"{best_us if best_us is not None else float('nan'):10.2f}  "
              f"{best['winner']['uid'] if best['winner'] else '-'}")
    out = Path(os.environ.get("OUT") or ROOT / "bench_out")
    out.mkdir(parents=True, exist_ok=True)
    (out / "gemv_decode.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
