# autotune: set-up, tests and benchmarks.
#   make smoke   install (CPU torch where there is no GPU) and run a small tune
#   make test    install, check the wheel (wheel-smoke), and run the test suite (CPU; GPU
#                tests skip without a GPU)
#   make wheel-smoke  build the wheel, install it into a fresh venv, run it outside the checkout

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# CI pins torch/triton/numpy through this file; leave it empty on a GPU machine, where
# CUDA torch pins its own triton.
CONSTRAINTS ?=
TORCH_VERSION ?= 2.13.0
PIP_C := $(if $(CONSTRAINTS),-c $(CONSTRAINTS),)
STAMP := $(VENV)/.installed

.PHONY: install smoke test wheel-smoke bench-gpu clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, so the project's `torch>=2.4` is already met and pip pulls nothing else
	$(BIN)/python -m pip install -q $(PIP_C) torch==$(TORCH_VERSION)
	$(BIN)/python -m pip install -q $(PIP_C) -e '.[test]'
	touch $(STAMP)

smoke: install
	$(BIN)/autotune mm --m 128 --n 128 --k 128 --dtype float16
	$(BIN)/autotune cache show

# the smoke first, so that pytest's summary is the last thing printed
test: install wheel-smoke
	$(BIN)/python -m pytest -q

wheel-smoke:
	PYTHON=$(PYTHON) CONSTRAINTS=$(CONSTRAINTS) TORCH_VERSION=$(TORCH_VERSION) bash .ci/wheel_smoke.sh

bench-gpu:
	PYTHONPATH=. python3 bench/gpu_suite.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
