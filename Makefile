# `make train` and `make test` each set up .venv by themselves on a machine with only
# Python 3.11–3.13 (TensorFlow 2.21's range).
VENV := .venv
PYTHON := $(VENV)/bin/python
# The first interpreter on PATH in TensorFlow's range.
SYSTEM_PYTHON ?= $(shell for p in python3 python3.13 python3.12 python3.11; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))' 2>/dev/null \
	&& echo $$p && break; done)

.PHONY: train test test-all test-fast lint clean

train: $(VENV)/.installed
	$(PYTHON) -m app train $(ARGS)

# Two processes (pytest-xdist), each taking a whole file at a time so a file's fixtures are built
# once, in tests/conftest.py's order (the slowest files first; xdist would otherwise put the files
# with the most tests first, and the slow ones with few last, one process waiting on the other):
# 9.5 to 14 minutes on two cores, by how fast the machine runs (docs/performance.md, its budget tests/conftest.py).
# ARGS="-n 4" on a bigger machine, ARGS="-n 0" for one process. Leaves out the tests marked exhaustive:
# variants of paths it covers (pyproject.toml), which `make test-all` runs too.
test: $(VENV)/.installed
	$(PYTHON) -m pytest -n 2 --dist loadfile --no-loadscope-reorder -m "not exhaustive" $(ARGS)

test-all: $(VENV)/.installed
	$(PYTHON) -m pytest -n 2 --dist loadfile --no-loadscope-reorder $(ARGS)

# Every module's unit tests, none marked slow (pyproject.toml): the loop to run while editing, in
# two processes too (a minute on two cores).
test-fast: $(VENV)/.installed
	$(PYTHON) -m pytest -m "not slow" -n 2 --dist loadfile $(ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check app tests

$(VENV)/.installed: pyproject.toml
	@test -n "$(SYSTEM_PYTHON)" || { echo "error: needs Python 3.11, 3.12 or 3.13 on PATH (TensorFlow 2.21 supports those)." >&2; exit 1; }
	test -x $(PYTHON) || $(SYSTEM_PYTHON) -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet --no-compile -e '.[dev]'
	# pip compiles on one core, this on all; a file that does not compile is passed over, as pip does
	$(PYTHON) -m compileall -q -j 0 $(VENV)/lib > /dev/null || true
	touch $@

clean:
	rm -rf $(VENV) build *.egg-info
