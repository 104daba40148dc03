# Two commands from a fresh clone:  make test   and   make demo
# The virtualenv lives outside the clone (see scripts/env.sh), keyed on requirements.txt, and is
# created on first use, reused afterwards.
SHELL := /bin/bash
.DEFAULT_GOAL := help
ENV := scripts/env.sh
# The second environment (transformers + CPU PyTorch) for the Hugging Face export checks.
ENV_HF := scripts/env_hf.sh
# The environment's python: its path is the last line env.sh prints.
PYTHON_PATH := $(ENV) | tail -n 1
PYTEST_ARGS ?=
# pytest-xdist workers: two, one per core of the 2-core boxes the suite's budget is set on
# (docs/TESTING.md); `make test PYTEST_WORKERS=0` runs it in one process.
PYTEST_WORKERS ?= 2

.PHONY: help env python-path test test-fast demo data fuzz

help:
	@echo "make test         create/reuse the environment, then run the test suite"
	@echo "make test-fast    the in-process tests only (not those marked e2e): a few minutes"
	@echo "make demo         build the demo data if needed, pretrain BERT-tiny on it, evaluate"
	@echo "make data         build the bundled demo corpus, vocabulary and TFRecords (cached)"
	@echo "make fuzz         run every reader's fuzz target for FUZZ_SECONDS (600) each"
	@echo "make env          create/reuse the environments only (TensorFlow; transformers)"
	@echo "make -s python-path   print the environment's python (last line)"
	@echo "source scripts/activate   (in your shell) the environment's python and horovodrun on PATH"

env:
	@$(ENV) >/dev/null && $(ENV_HF) >/dev/null

python-path:
	@$(PYTHON_PATH)

# Both environments: the TensorFlow one runs pytest; the transformers + PyTorch one
# (`scripts/env_hf.sh`) runs the Hugging Face export's checks, in subprocesses.
test:
	@PY="$$($(PYTHON_PATH))" && HF_PY="$$($(ENV_HF) | tail -n 1)" && \
	  BERT_HF_PYTHON="$$HF_PY" "$$PY" -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

# Leaves out the tests that start processes (scripts, launchers, clusters, the original release):
# tests/conftest.py refuses a process start in a test not marked e2e, so none slips in here.
test-fast:
	@PY="$$($(PYTHON_PATH))" && "$$PY" -m pytest -n $(PYTEST_WORKERS) -m "not e2e" $(PYTEST_ARGS)

# The demo corpus (standard-library docstrings), its vocabulary and TFRecords, under $(DEMO_DATA).
# Cached: scripts/build_demo_data.py does nothing when data/demo/stats.json is up to date.
DEMO_DATA := data/demo
data:
	@PY="$$($(PYTHON_PATH))" && "$$PY" scripts/build_demo_data.py --output_dir=$(DEMO_DATA)

# Pretrains BERT-tiny on the demo data with 2 Horovod workers, evaluates, plots (output/demo).
demo: data
	@PY="$$($(PYTHON_PATH))" && scripts/demo.sh "$$PY"

# Every fuzz target (fuzz/target_*.py) under atheris for FUZZ_SECONDS each (docs/TESTING.md).
FUZZ_SECONDS ?= 600
fuzz:
	@PY="$$($(PYTHON_PATH))" && "$$PY" -m fuzz.run --seconds=$(FUZZ_SECONDS)
