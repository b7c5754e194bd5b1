"""What a trained model says about each node, written for the user (`train --predictions FILE`,
`morphgen predict`): an .npz readable with ``numpy.load(FILE)``, one row per node in the
dataset's node order.

- node classification: ``logits`` float32 [N, C], the final weights' outputs without dropout,
  and ``predicted`` int64 [N], each row's arg max (the class the accuracies count);
- link prediction: ``embeddings`` float32 [N, H], the node rows the loss scores triples with,
  and ``relations`` float32 [T, H], the relation weight's rows (DistMult scores a triple
  (h, r, t) as ``sum(embeddings[h] * relations[r] * embeddings[t])``).

Every file also holds ``written_by`` ("morphgen VERSION predictions"), so that a later run
recognises it as its own to replace (morphgen/outputs.py).
"""
from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np

MARK = "predictions"


def classification_arrays(logits: np.ndarray) -> dict:
    logits = np.asarray(logits, np.float32)
    return {"logits": logits, "predicted": np.argmax(logits, axis=1).astype(np.int64)}


def link_arrays(embeddings: np.ndarray, relations: np.ndarray) -> dict:
    embeddings = np.asarray(embeddings, np.float32)
    return {"embeddings": embeddings,
            "relations": np.asarray(relations, np.float32).reshape(-1, embeddings.shape[1])}


def of_model(model) -> dict:
    """The arrays of a bound ``CompiledModel`` (its weights as they are now)."""
    if model.link_task:
        return link_arrays(model.predict(), model.get_params()[model.relation_weight])
    return classification_arrays(model.predict())


def encode(arrays: dict) -> bytes:
    from . import __version__
    buffer = io.BytesIO()
    np.savez(buffer, written_by=np.array(f"morphgen {__version__} {MARK}"), **arrays)
    return buffer.getvalue()


def write(path, arrays: dict) -> None:
    """Atomically: what was at ``path`` stays until the new file is complete."""
    from .outputs import write_atomically
    write_atomically(Path(path), encode(arrays))


def is_predictions(path: Path) -> bool:
    """An earlier predictions file of morphgen (its ``written_by`` entry says so)."""
    if not zipfile.is_zipfile(path):     # np.load would read a lone .npy or a pickle whole
        return False
    try:
        with np.load(path, allow_pickle=False) as archive:
            if "written_by" not in archive.files:
                return False
            mark = str(archive["written_by"])
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError):
        return False
    return mark.startswith("morphgen ") and mark.endswith(f" {MARK}")


def summary(arrays: dict) -> str:
    """'logits [2708, 7], predicted [2708]' for the message that says what was written."""
    return ", ".join(f"{name} {list(value.shape)}" for name, value in arrays.items())
