# The two set-up commands of the README.  Both create .venv and install the project into it.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
JOBS   ?= 2

.PHONY: train test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,mpi,bench]'
	touch $(STAMP)

# The main job: train examples/gcn.mp on the built-in synthetic graph.
train: $(STAMP)
	$(VENV)/bin/morphgen train examples/gcn.mp --dataset synthetic

test: $(STAMP)
	$(VENV)/bin/pytest -n $(JOBS) tests

# Peers side by side (PyG, DGL); separate from `make test` and CI.
bench: $(STAMP)
	$(VENV)/bin/morphgen bench-suite --out bench-out --docs docs/benchmarks.md

clean:
	rm -rf $(VENV) build *.egg-info bench-out
