# corral — the two set-up commands are `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DEMO   := .demo

.PHONY: all install sysdeps demo demo-down test lint unit integration bench clean

# System tools the tests and the demo use: e2fsprogs for the bundled OS definition
# (mkfs.ext4 and debugfs work on plain files, no mounts). Installed only when missing.
SYSDEPS_CMDS := mkfs.ext4 debugfs
SYSDEPS_PKGS := e2fsprogs

all: test

$(PY):
	$(PYTHON) -m venv $(VENV)

# Reinstall only when the package metadata changes; the install is editable.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,dev]'
	touch $@

install: $(STAMP)

sysdeps:
	@missing=""; for c in $(SYSDEPS_CMDS); do command -v $$c >/dev/null 2>&1 || \
	  [ -x /sbin/$$c ] || [ -x /usr/sbin/$$c ] || missing=1; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing $(SYSDEPS_PKGS)"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(SYSDEPS_PKGS) >/dev/null || \
	  { apt-get update -q >/dev/null && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(SYSDEPS_PKGS) >/dev/null; }; \
	fi

lint: $(STAMP)
	$(VENV)/bin/ruff check
	$(VENV)/bin/mypy

test: lint sysdeps
	$(VENV)/bin/pytest -q -p no:cacheprovider tests

unit: $(STAMP)
	$(VENV)/bin/pytest -q tests/unit

integration: $(STAMP) sysdeps
	$(VENV)/bin/pytest -q tests/integration

demo: $(STAMP) sysdeps
	@$(PY) -m corral.testbed down --dir $(DEMO) >/dev/null 2>&1 || true
	$(PY) -m corral.testbed up --nodes 3 --dir $(DEMO)
	@$(PY) -m corral.testbed demo --dir $(DEMO)

demo-down: $(STAMP)
	$(PY) -m corral.testbed down --dir $(DEMO)

bench: $(STAMP) sysdeps
	@for f in bench/*.py; do $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) $(DEMO) build dist src/*.egg-info .mypy_cache .ruff_cache .pytest_cache
