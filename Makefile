# `make train` and `make test` each set up .venv by themselves on a machine with only
# Python 3.11–3.13 (TensorFlow 2.21's range).
VENV := .venv
PYTHON := $(VENV)/bin/python
# The first interpreter on PATH in TensorFlow's range.
SYSTEM_PYTHON ?= $(shell for p in python3 python3.13 python3.12 python3.11; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))' 2>/dev/null \
	&& echo $$p && break; done)

.PHONY: train test test-fast lint clean

train: $(VENV)/.installed
	$(PYTHON) -m app train $(ARGS)

test: $(VENV)/.installed
	$(PYTHON) -m pytest $(ARGS)

# Every module's unit tests, none marked slow (pyproject.toml): the loop to run while editing.
test-fast: $(VENV)/.installed
	$(PYTHON) -m pytest -m "not slow" $(ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check app tests

$(VENV)/.installed: pyproject.toml
	@test -n "$(SYSTEM_PYTHON)" || { echo "error: needs Python 3.11, 3.12 or 3.13 on PATH (TensorFlow 2.21 supports those)." >&2; exit 1; }
	test -x $(PYTHON) || $(SYSTEM_PYTHON) -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet -e '.[dev]'
	touch $@

clean:
	rm -rf $(VENV) build *.egg-info
