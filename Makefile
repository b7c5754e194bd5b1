# The two set-up commands of the README.  Both create .venv and install the project into it.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
JOBS   ?= 2

.PHONY: train test bench clean slurm-deps

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,mpi,bench,cuda]'
	touch $(STAMP)

# The main job: train examples/gcn.mp on the built-in synthetic graph.
train: $(STAMP)
	$(VENV)/bin/morphgen train examples/gcn.mp --dataset synthetic

test: $(STAMP) slurm-deps
	$(VENV)/bin/pytest -n $(JOBS) --durations=15 tests

# SLURM and munge for tests/slurm, which starts a real single-node cluster (Debian packages;
# installed once, with sudo when not root).  The daemons live in /usr/sbin, not always on PATH.
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || command -v sudo)
slurm-deps:
	@export PATH="$$PATH:/usr/sbin:/sbin"; \
	if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then \
		$(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y slurm-wlm munge; \
	fi

# Peers side by side (PyG, DGL); separate from `make test` and CI.
bench: $(STAMP)
	$(VENV)/bin/morphgen bench-suite --out bench-out --docs docs/benchmarks.md

clean:
	rm -rf $(VENV) build *.egg-info bench-out
