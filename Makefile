# autotune: set-up, tests and benchmarks.
#   make smoke   install (CPU torch where there is no GPU: TORCH_INDEX) and run a small tune
#   make test    install, check the wheel (wheel-smoke), lint (ruff), and run the test suite
#                in TEST_WORKERS processes (CPU; GPU tests skip without a GPU)
#   make wheel-smoke  build the wheel, install it into a fresh venv, run it outside the checkout

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# CI pins torch/triton/numpy through this file; leave it empty on a GPU machine, where
# CUDA torch pins its own triton.
CONSTRAINTS ?=
TORCH_VERSION ?= 2.13.0
# Without a GPU (no nvidia-smi) torch comes from PyTorch's CPU wheel index, given beside the
# default one: the default index's torch is the CUDA build, ~3 GB of NVIDIA wheels. pip takes
# 2.13.0+cpu over 2.13.0 (a local version sorts higher); an index serving only one of them
# serves that one. TORCH_INDEX= (empty) leaves it out; so does CI, whose machines cannot
# reach it.
TORCH_INDEX ?= $(if $(shell command -v nvidia-smi 2>/dev/null),,https://download.pytorch.org/whl/cpu)
# The index if it answers within 5 s (a file: index if its folder exists), else nothing: pip
# retries an unreachable index five times, and hangs on one that drops the connection.
# Expanded where a recipe uses it.
INDEX_UP := import os, sys, urllib.parse as p, urllib.request as r; u = sys.argv[1]; \
	sys.exit(not os.path.exists(r.url2pathname(p.urlparse(u).path))) if u.startswith("file:") else r.urlopen(u, timeout=5)
TORCH_INDEX_UP = $(if $(TORCH_INDEX),$(shell $(PYTHON) -c '$(INDEX_UP)' '$(TORCH_INDEX)' >/dev/null 2>&1 && echo '$(TORCH_INDEX)'),)
PIP_C := $(if $(CONSTRAINTS),-c $(CONSTRAINTS),)
# pytest-xdist processes; Ray's tests share one of them (--dist loadgroup, their xdist_group)
TEST_WORKERS ?= 2
LINTED := autotune_cli tests examples bench setup.py
STAMP := $(VENV)/.installed

.PHONY: install smoke test wheel-smoke bench-gpu clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, so the project's `torch>=2.4` is already met and pip pulls nothing else
	$(eval TORCH_FROM := $(TORCH_INDEX_UP))
	$(if $(TORCH_INDEX),$(if $(TORCH_FROM),,@echo "note: $(TORCH_INDEX) cannot be reached; torch from the default index" >&2),)
	$(BIN)/python -m pip install -q $(PIP_C) $(if $(TORCH_FROM),--extra-index-url $(TORCH_FROM),) torch==$(TORCH_VERSION)
	$(BIN)/python -m pip install -q $(PIP_C) -e '.[test]'
	touch $(STAMP)

smoke: install
	$(BIN)/autotune mm --m 128 --n 128 --k 128 --dtype float16
	$(BIN)/autotune cache show

# the smoke first, so that pytest's summary is the last thing printed
test: install wheel-smoke
	$(BIN)/ruff check $(LINTED)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

wheel-smoke:
	PYTHON=$(PYTHON) CONSTRAINTS=$(CONSTRAINTS) TORCH_VERSION=$(TORCH_VERSION) TORCH_INDEX=$(TORCH_INDEX_UP) bash .ci/wheel_smoke.sh

bench-gpu:
	PYTHONPATH=. python3 bench/gpu_suite.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
