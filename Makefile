# commbench: `make demo` (install + 4 local MPI ranks on CPU: measure, fit, plan, report)
# and `make test`. The environment lives in .venv and is created on first use.

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
CB := $(PY) -m commbench
# CPU build of torch for the gloo backend; on GPU machines pass your CUDA build, e.g.
# `make install TORCH_SPEC=torch==2.5.1` (or TORCH_SPEC= to keep the one installed).
TORCH_SPEC ?= torch==2.13.0
NP ?= 4
RESULTS ?= results
# Open MPI from PyPI; for a system MPI: `make demo MPIRUN=mpirun`.
MPIRUN ?= $(BIN)/mpirun --oversubscribe
PYTEST_ARGS ?=
# export consumers run by `make test-all`: llm-analysis (pins an old huggingface-hub: own venv),
# and psutil + pandas for a Calculon checkout named by COMMBENCH_CALCULON_SRC
CONSUMERS_VENV ?= .venv-consumers

export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export PYTHONUNBUFFERED := 1
# Open MPI 5.0's libfabric BTL sleeps 1 s when it closes, in every MPI_Init of a machine without
# a fabric it can use (opal/mca/btl/ofi/btl_ofi_component.c); these local jobs need only sm and
# tcp. Yours wins: `make demo OMPI_MCA_btl=...`.
export OMPI_MCA_btl ?= ^ofi

.PHONY: install consumers-venv test test-all lint format demo demo-cluster report bench gpu-check browser clean help

help:
	@echo "make demo    install, then measure on $(NP) local MPI ranks, fit, plan and report"
	@echo "make test    install, then run the test suite"
	@echo "make test-all  every test, slow ones and the export consumers (llm-analysis venv) too"
	@echo "make report  build $(RESULTS)/report/index.html (runs a quick suite first if empty)"
	@echo "make bench   benchmarks of commbench itself"
	@echo "make demo-cluster  the demo on 2 emulated nodes x 2 ranks, links shaped to $(EMU_RATE) (root)"
	@echo "make gpu-check  the GPU path end to end on this machine's GPUs (nccl)"
	@echo "make lint    ruff check + format check + mypy"

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/activate
	$(if $(TORCH_SPEC),$(PY) -m pip install -q "$(TORCH_SPEC)")
	$(PY) -m pip install -q -e ".[mpi,torch,analysis,test]"
	touch $@

install: $(VENV)/.installed

$(CONSUMERS_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(CONSUMERS_VENV)
	$(CONSUMERS_VENV)/bin/python -m pip install -q "llm-analysis==0.2.2" psutil pandas
	touch $@

consumers-venv: $(CONSUMERS_VENV)/.installed

# Debian's chromium for the report's browser test (as root, when missing).
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	  || echo "note: chromium not installed; the browser check of the report will be skipped"; }

test: install browser
	$(BIN)/pytest -q -m "not slow" --durations=15 $(PYTEST_ARGS)

test-all: install browser consumers-venv
	COMMBENCH_CONSUMERS_PYTHON=$(abspath $(CONSUMERS_VENV))/bin/python $(BIN)/pytest -q $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

demo: install
	rm -rf $(RESULTS)/demo-collectives $(RESULTS)/demo-smoke
	$(MPIRUN) -n $(NP) $(CB) suite collectives --quick --backend mpi --results $(RESULTS) --run-id demo-collectives
	$(MPIRUN) -n $(NP) $(CB) suite smoke --backend mpi --results $(RESULTS) --run-id demo-smoke
	$(CB) fit $(RESULTS)/demo-collectives -o $(RESULTS)/demo-calibration.json
	$(CB) validate --calibration $(RESULTS)/demo-calibration.json $(RESULTS)/demo-smoke
	$(CB) plan --model llama-7b --gpus $(NP) --gpus-per-node $(NP) --calibration $(RESULTS)/demo-calibration.json --extrapolate --top 5
	$(CB) plan --model llama-70b --gpus 32 --gpus-per-node 8 --top 5 -o $(RESULTS)/demo-plan-llama-70b.json
	$(CB) report $(RESULTS)/demo-collectives $(RESULTS)/demo-smoke --calibration $(RESULTS)/demo-calibration.json --plan $(RESULTS)/demo-plan-llama-70b.json -o $(RESULTS)/report
	@echo "demo done: open $(RESULTS)/report/index.html"

# The demo across emulated nodes (root): 2 network namespaces x 2 ranks, one NIC per rank shaped
# to EMU_RATE, so the report shows intra (shared memory) against inter (the shaped link) curves.
EMU_RATE ?= 400mbit
EMU := $(CB) emulate --nodes 2 --ranks-per-node 2 --link-rate $(EMU_RATE) --
demo-cluster: install
	rm -rf $(RESULTS)/cluster-collectives $(RESULTS)/cluster-smoke
	$(EMU) suite collectives --quick --set max_bytes=8M --set factor=4 --results $(RESULTS) --run-id cluster-collectives
	$(EMU) suite smoke --results $(RESULTS) --run-id cluster-smoke
	$(CB) fit $(RESULTS)/cluster-collectives -o $(RESULTS)/cluster-calibration.json
	$(CB) validate --calibration $(RESULTS)/cluster-calibration.json $(RESULTS)/cluster-smoke
	$(CB) plan --model llama-7b --gpus 4 --gpus-per-node 2 --calibration $(RESULTS)/cluster-calibration.json --extrapolate --top 5
	$(CB) report $(RESULTS)/cluster-collectives $(RESULTS)/cluster-smoke --calibration $(RESULTS)/cluster-calibration.json -o $(RESULTS)/cluster-report
	@echo "demo-cluster done: open $(RESULTS)/cluster-report/index.html"

# With no run in $(RESULTS) yet, measure first: a quick collectives sweep (bandwidth curves and
# their fits) and the smoke suite (every strategy at toy sizes). The report fits in memory.
report: install
	@ls -d $(RESULTS)/*/records.jsonl >/dev/null 2>&1 || { \
	  $(MPIRUN) -n $(NP) $(CB) suite collectives --quick --backend mpi --results $(RESULTS) && \
	  $(MPIRUN) -n $(NP) $(CB) suite smoke --backend mpi --results $(RESULTS); }
	$(CB) report --results $(RESULTS) -o $(RESULTS)/report

bench: install
	$(PY) bench/run_all.py

# On a GPU host with a CUDA build of torch (make install TORCH_SPEC=torch): one table, exit 1 on
# any failed check, 2 where no GPU is usable.
gpu-check: install
	$(PY) bench/gpu_check.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache bench/_build
