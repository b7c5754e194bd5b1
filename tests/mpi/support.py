"""Shared pieces of the MPI backend's tests: runs of the CLI on both backends, compared."""
from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.support import example, run_cli

RANKS = (1, 2, 4)


def train(tmp_path: Path, model, dataset: str, *extra, backend: str = "openmp", ranks: int = 1,
          epochs: int | None = 4, tag: str = "", timeout: int = 600) -> dict:
    """One `morphgen train` run with one thread per process; its --json report.  ``model``: an
    example's name or a program's path."""
    program = example(model) if isinstance(model, str) else Path(model)
    out = tmp_path / f"{program.stem}-{backend}-{ranks}{tag}.json"
    args = ["train", program, "--backend", backend, "--threads", 1, "--dataset", dataset,
            *(["--epochs", epochs] if epochs is not None else []), "--sparsity-threshold", 0.9, "--json", out,
            "--quiet", *extra]
    if backend == "mpi":
        args += ["--ranks", ranks, "--parts-dir", tmp_path / f"parts-{ranks}"]
    proc = run_cli(*args, timeout=timeout)
    assert proc.returncode == 0, f"{backend} x{ranks} failed:\n{proc.stderr[-3000:]}"
    return json.loads(out.read_text())


def assert_same_run(reference: dict, run: dict, rtol: float, what: str) -> None:
    """The same loss every epoch (to rtol) and the same accuracies (a link-prediction run has none)."""
    assert len(reference["history"]) == len(run["history"]), what
    for a, b in zip(reference["history"], run["history"]):
        assert abs(a["loss"] - b["loss"]) <= rtol * abs(a["loss"]), \
            f"{what}: epoch {a['epoch']} loss {b['loss']!r} != {a['loss']!r}"
    for key in ("train_acc", "val_acc", "test_acc"):
        if key in reference:
            assert run[key] == reference[key], f"{what}: {key} {run[key]} != {reference[key]}"
