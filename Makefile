# The two set-up commands of the README: `make run` and `make test`.
# Each creates .venv (once), installs pagedbench into it, then runs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=
PYTEST_ARGS ?=

.PHONY: install run test bench device-rehearsal clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

run: install
	$(PY) run.py $(ARGS)

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

# The GPU check's dry run in an environment holding only torch, triton, transformers and numpy.
device-rehearsal:
	bash scripts/device_rehearsal.sh

bench: install
	$(PY) -m pytest tests/benchmarks --benchmark-enable $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache .benchmarks .rehearsal .device-site
