# The two commands of the README: `make demo` (set up + main job) and `make test` (set up + tests).
VENV ?= .venv
QUENCH = $(VENV)/bin/quench

.PHONY: setup demo test test-fast test-full

setup: $(VENV)/.quench-installed

$(VENV)/.quench-installed: pyproject.toml constraints-cpu.txt scripts/setup.sh
	VENV=$(VENV) scripts/setup.sh

# The demo: ReCode robustness on MBPP+ (base and EvalPlus' extra tests), one transformation per category, the 100
# problems on which the default model passes often enough for every metric to carry an interval.
DEMO_TRANSFORMS = SynonymSubstitution,FuncRenameCamelCase,DeadCodeInserter,new_line_afterdoc
demo: setup
	$(QUENCH) robustness --benchmark mbpp+ --limit 100 --transforms $(DEMO_TRANSFORMS) --seeds 1 --out runs/demo

# Two pytest-xdist workers, each test file on one of them (tests/conftest.py): the suite's processes wait on
# sandboxes, servers and subprocesses, so two workers use both cores of a 2-core machine.
PYTEST = $(VENV)/bin/python -m pytest -q -ra -n 2

test: setup
	$(PYTEST) -m "not full"

test-full: setup
	$(PYTEST) -m full

test-fast: setup
	$(PYTEST) -m "not slow and not full"
