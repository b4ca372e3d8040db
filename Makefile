# The two commands of the README: `make demo` (set up + main job) and `make test` (set up + tests).
VENV ?= .venv
QUENCH = $(VENV)/bin/quench

.PHONY: setup demo test test-fast test-full

setup: $(VENV)/.quench-installed

$(VENV)/.quench-installed: pyproject.toml constraints-cpu.txt scripts/setup.sh
	VENV=$(VENV) scripts/setup.sh

demo: setup
	$(QUENCH) robustness --out runs/demo

test: setup
	$(VENV)/bin/python -m pytest -q -ra -m "not full"

test-full: setup
	$(VENV)/bin/python -m pytest -q -ra -m full

test-fast: setup
	$(VENV)/bin/python -m pytest -q -ra -m "not slow and not full"
