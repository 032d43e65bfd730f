# The README's two set-up commands. Both install what they need first, so they work on a
# fresh machine. torch is installed on its own first: `torch==2.13.0` resolves to the local
# CPU wheel on CPU machines (an unpinned torch would pull several GB of CUDA packages).
PYTHON ?= python3
PIP = $(PYTHON) -m pip
STATE ?= grpolab-state

.PHONY: install install-test run test bench

install:
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e .

install-test: install
	$(PIP) install -q -e ".[test]"

# The main job on the embedded defaults.
run: install
	$(PYTHON) -m grpolab.cli --state $(STATE) run experiments/addition_grpo.yaml

test: install-test
	$(PYTHON) -m pytest -q -p no:cacheprovider tests

bench: install
	$(PYTHON) -m grpolab.cli --state $(STATE) bench
