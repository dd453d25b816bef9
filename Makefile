# corral — the two set-up commands are `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DEMO   := .demo
# The tiny guest the demo's kvm instance boots, built once from the host's packages and
# rebuilt only when they change (corral.testbed.guest); 'make clean' removes it.
TINY_GUEST := build/tiny-guest

.PHONY: all install prerequisites sysdeps rapi-clients placement-clients demo demo-down test lint unit integration system bench clean

# System tools the tests and the demo use: e2fsprogs for the bundled OS definition
# (mkfs.ext4 and debugfs work on plain files, no mounts); faketime (libfaketime, 60 kB)
# to run one node daemon with a skewed clock in the gnt-cluster verify test; lvm2 for
# plain (LVM) disks and the LVM storage units, tested on loop devices; zstd, the
# compression tool of disk transfers (corral.impexp). Installed only
# when missing.
SYSDEPS_CMDS := mkfs.ext4 debugfs faketime
SYSDEPS_PKGS := e2fsprogs faketime
# RAPI clients the RAPI tests drive: Ganeti's own Python client, run under the system
# python3 (ganeti-3.0 ships it; with its dependencies, lvm2, openssh-server, socat and a
# dozen Python modules, some 25 packages and 6 MB: about 15 s; python3-pycurl is its
# transport), and Ganeti's htools, whose hscan reads a cluster through RAPI (3 MB, 4 s).
RAPI_CLIENT := /usr/share/ganeti/3.0/ganeti/rapi/client.py
HSCAN       := /usr/lib/ganeti/3.0/usr/bin/hscan
# The tiny guest the system tests boot (corral.testbed.guest): qemu, a kernel and busybox,
# without recommended packages (qemu's GUI, the kernel's firmware and AppArmor). On a fresh
# Debian 12 about 70 MB to download (the kernel 27 MB, qemu and its libraries the rest):
# about a minute, of which 20 s are the kernel's postinst building an initrd for /boot
# that nothing here uses (it works without a terminal, systemd or udev).
GUEST_PKGS  := qemu-system-x86 linux-image-cloud-amd64 busybox-static
# The single-node Ceph the rbd tests start (corral.testbed.ceph: a monitor, a manager
# and an OSD, without systemd), Ceph's rbd and ceph commands, and qemu's rbd block
# driver (qemu-block-extra), without recommended packages: 93 packages, 72 MB to download
# on a fresh Debian 12 (most of them the manager's Python dependencies).
CEPH_PKGS   := ceph-mon ceph-osd ceph-mgr ceph-common qemu-block-extra

all: test

$(PY):
	$(PYTHON) -m venv $(VENV)

# Reinstall only when the package metadata changes; the install is editable. Its
# modules are byte-compiled as a wheel install's are: with PYTHONDONTWRITEBYTECODE set
# (as on these machines) every gnt-* command would otherwise compile what it imports,
# doubling its start-up (a later edit only makes Python ignore that file's stale .pyc).
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,dev]'
	$(PY) -m compileall -q src >/dev/null
	touch $@

install: $(STAMP)

sysdeps:
	@pkgs=""; for c in $(SYSDEPS_CMDS); do command -v $$c >/dev/null 2>&1 || \
	  [ -x /sbin/$$c ] || [ -x /usr/sbin/$$c ] || pkgs="$(SYSDEPS_PKGS)"; done; \
	command -v lvcreate >/dev/null 2>&1 || [ -x /sbin/lvcreate ] || \
	  [ -x /usr/sbin/lvcreate ] || pkgs="$$pkgs lvm2"; \
	[ -f $(RAPI_CLIENT) ] || pkgs="$$pkgs ganeti-3.0"; \
	[ -x $(HSCAN) ] || pkgs="$$pkgs ganeti-htools-3.0"; \
	/usr/bin/python3 -c 'import pycurl' >/dev/null 2>&1 || pkgs="$$pkgs python3-pycurl"; \
	command -v zstd >/dev/null 2>&1 || pkgs="$$pkgs zstd"; \
	if [ -n "$$pkgs" ]; then \
	  echo "installing $$pkgs"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$pkgs >/dev/null || \
	  { apt-get update -q >/dev/null && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$pkgs >/dev/null; }; \
	fi
	@pkgs=""; for p in $(GUEST_PKGS) $(CEPH_PKGS); do \
	  dpkg-query -W -f '$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || pkgs="$$pkgs $$p"; \
	done; \
	if [ -n "$$pkgs" ]; then \
	  echo "installing$$pkgs"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$pkgs \
	    >/dev/null || \
	  { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -q --no-install-recommends $$pkgs >/dev/null; }; \
	fi

# gentleman, the other Python RAPI client (PyPI, 2015), into the venv for the RAPI client
# test. Its release cannot be installed as published (no requirements.txt nor version.txt,
# Python 2 code): the script fetches it with pip, supplies the files, converts it with
# lib2to3 and keeps the result in build/ (no network needed after the first time). A
# failure only warns: the test then skips, saying why.
rapi-clients: $(STAMP)
	@$(PY) tests/integration/install_gentleman.py --python $(PY) --cache build || \
	  echo "warning: gentleman is not installed; its RAPI client test will skip"

# osc-placement (the OpenStack client's placement commands) in a virtualenv of its own,
# build/osc-venv (it brings many OpenStack libraries that corral does not use), for the
# /placement/ test. A failure only warns: that test then skips, saying why.
OSC := build/osc-venv/bin/openstack
placement-clients:
	@test -x $(OSC) || { python3 -m venv build/osc-venv && \
	  build/osc-venv/bin/pip install -q osc-placement python-openstackclient >/dev/null; } || \
	  echo "warning: osc-placement is not installed; its /placement/ test will skip"

lint: $(STAMP)
	$(VENV)/bin/ruff check
	$(VENV)/bin/mypy

# What the tests need is made two jobs at a time (a sub-make with -j2, whatever make was
# given): the OpenStack client's venv (placement-clients, ~35 s of pip) and the system
# packages do not wait for the project's venv, and mypy runs beside gentleman's install;
# on a clean clone they took 66 s instead of 112 s one after another (load 3-4).
# The unit tests start no daemons and run on two workers (a file's tests stay on one
# worker); the tests with daemons, guests and loop devices run one at a time after them.
prerequisites:
	@$(MAKE) --no-print-directory -j2 --output-sync=target lint sysdeps rapi-clients \
	  placement-clients

test: prerequisites
	$(VENV)/bin/pytest -q -p no:cacheprovider -n 2 --dist loadfile --durations=10 tests/unit
	$(VENV)/bin/pytest -q -p no:cacheprovider --durations=15 --ignore=tests/unit tests

unit: $(STAMP)
	$(VENV)/bin/pytest -q -n 2 --dist loadfile tests/unit

integration: $(STAMP) sysdeps rapi-clients placement-clients
	$(VENV)/bin/pytest -q tests/integration

system: $(STAMP) sysdeps
	$(VENV)/bin/pytest -q tests/system

# A running demo is never replaced without asking: on a terminal `make demo` asks, and
# elsewhere (CI, no standard input) it refuses at once rather than wait for an answer.
# The cluster runs fake instances and one real qemu guest (kvm hypervisor, TCG);
# 'make demo-down' stops the daemons and every guest.
demo: $(STAMP) sysdeps
	@if live=$$($(PY) -m corral.testbed running --dir $(DEMO) 2>/dev/null); then \
	  echo "A demo cluster is running in $(DEMO): $$live"; \
	  if [ -t 0 ]; then \
	    printf 'Stop it and start a new one (its instances are lost)? [y/N] '; read answer; \
	    case "$$answer" in [yY]*) $(PY) -m corral.testbed down --dir $(DEMO);; \
	      *) echo "Kept the running demo; 'make demo-down' stops it."; exit 1;; esac; \
	  else \
	    echo "Refusing to replace it without asking; run 'make demo-down' first." >&2; exit 1; \
	  fi; \
	fi
	$(PY) -m corral.testbed up --nodes 3 --dir $(DEMO) --hypervisors fake,kvm \
	  --tiny-guest $(TINY_GUEST)
	@$(PY) -m corral.testbed demo --dir $(DEMO)

demo-down: $(STAMP)
	$(PY) -m corral.testbed down --dir $(DEMO)/moved-to
	$(PY) -m corral.testbed down --dir $(DEMO)

bench: $(STAMP) sysdeps
	@for f in bench/[!_]*.py; do $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) $(DEMO) build dist src/*.egg-info .mypy_cache .ruff_cache .pytest_cache
