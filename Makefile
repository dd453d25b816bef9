# corral — the two set-up commands are `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DEMO   := .demo

.PHONY: all install demo demo-down test lint unit integration bench clean

all: test

$(PY):
	$(PYTHON) -m venv $(VENV)

# Reinstall only when the package metadata changes; the install is editable.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,dev]'
	touch $@

install: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check
	$(VENV)/bin/mypy

test: lint
	$(VENV)/bin/pytest -q -p no:cacheprovider tests

unit: $(STAMP)
	$(VENV)/bin/pytest -q tests/unit

integration: $(STAMP)
	$(VENV)/bin/pytest -q tests/integration

demo: $(STAMP)
	@$(PY) -m corral.testbed down --dir $(DEMO) >/dev/null 2>&1 || true
	$(PY) -m corral.testbed up --nodes 3 --dir $(DEMO)
	@$(PY) -m corral.testbed demo --dir $(DEMO)

demo-down: $(STAMP)
	$(PY) -m corral.testbed down --dir $(DEMO)

bench: $(STAMP)
	@for f in bench/*.py; do $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) $(DEMO) build dist src/*.egg-info .mypy_cache .ruff_cache .pytest_cache
