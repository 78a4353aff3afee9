#!/usr/bin/env bash
# The wheel as a user gets it: built from this checkout, installed (not editable) into a
# fresh venv, and run on the CPU from a folder outside the checkout. It catches what the
# tests cannot see, running on the checkout: a package or data file the wheel leaves out.
#   PYTHON       the interpreter for the venv (default python3)
#   CONSTRAINTS  a pip constraints file (CI: .ci/constraints.txt); empty: none
#   TORCH_VERSION  torch to install first (default 2.13.0; the local wheel where pip finds one)
#   TORCH_INDEX  an extra index to find it on (the Makefile's: PyTorch's CPU wheels); empty: none
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
pip_c=()
torch_index=()
if [ -n "${TORCH_INDEX:-}" ]; then torch_index=(--extra-index-url "$TORCH_INDEX"); fi
if [ -n "${CONSTRAINTS:-}" ]; then pip_c=(-c "$(cd "$(dirname "$CONSTRAINTS")" && pwd)/$(basename "$CONSTRAINTS")"); fi
work="$(mktemp -d "${TMPDIR:-/tmp}/wheel-smoke.XXXXXX")"
trap 'rm -rf "$work"' EXIT
step() { echo "wheel-smoke: [${SECONDS}s] $*" >&2; }

# The sources a commit would hold (tracked, and untracked files git does not ignore), copied:
# a build in the checkout could reuse a stale build/ folder.
step "copying the sources"
mkdir "$work/src"
git -C "$root" ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' name; do
    if [ -f "$root/$name" ]; then (cd "$root" && cp --parents -- "$name" "$work/src/"); fi
done
test -f "$work/src/pyproject.toml"

step "a fresh venv ($("$PYTHON" --version))"
"$PYTHON" -m venv "$work/venv"
vpy="$work/venv/bin/python"
"$vpy" -m pip install -q --upgrade pip
# torch first, so that the wheel's torch>=2.4 is already met (--no-compile: what runs is
# byte-compiled as it is imported, not all of torch up front)
"$vpy" -m pip install -q --no-compile "${pip_c[@]}" "${torch_index[@]}" "torch==$TORCH_VERSION"

step "building the wheel (isolated, as pip does for a user)"
"$vpy" -m pip wheel -q --no-deps -w "$work/dist" "$work/src"
wheel=("$work"/dist/gemm_autotune-*.whl)
test -f "${wheel[0]}"
step "installing ${wheel[0]##*/}"
"$vpy" -m pip install -q --no-compile "${pip_c[@]}" "${wheel[0]}"

mkdir "$work/run"
cd "$work/run"  # outside the checkout: only the installed package can be imported
export AUTOTUNE_CACHE_DIR="$work/cache"
unset PYTHONPATH
autotune="$work/venv/bin/autotune"
where="$("$vpy" -c 'import autotune_cli; print(autotune_cli.__file__)')"
case "$where" in
    "$work/venv/"*) ;;
    *) echo "wheel-smoke: autotune_cli imported from $where, not the venv" >&2; exit 1 ;;
esac

step "autotune --version"
"$autotune" --version | tee version.txt
grep -q '^autotune [0-9][^ ]* (gemm-autotune)$' version.txt

step "autotune mm"
"$autotune" mm --m 64 --n 64 --k 64 --dtype float16 --device cpu | tee mm.txt
grep -q '^winner: ' mm.txt

step "autotune model on a small torch.export program"
"$vpy" - <<'PY'
import torch


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(64, 128)
        self.down = torch.nn.Linear(128, 64)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


program = torch.export.export(Tiny().eval(), (torch.randn(32, 64),))
torch.export.save(program, "tiny.pt2")
PY
"$autotune" model tiny.pt2 --device cpu | tee model.txt
grep -q 'estimated GEMM time per forward pass' model.txt

step "autotune cache show"
"$autotune" cache show --json > show.json
"$vpy" -c 'import json, sys; n = len(json.load(open("show.json"))["entries"]); print(n, "entries"); sys.exit(n != 3)'
"$autotune" cache show
step "passed"
