"""The canonical ``.npz`` dataset format: reading (graph only or full dataset) and writing.

The format is the one of the shared dataset collection (see docs/data.md):
``edge_index`` int64 [2, E]; optional ``num_nodes``; homogeneous features as CSR
``x_indptr/x_indices/x_data/x_shape`` (or dense ``x`` float32 [N, F], written by ``save_npz`` for
dense features); ``y`` int64 with -1 = unlabelled; ``train_mask``/``val_mask``/``test_mask`` bool;
relational graphs add ``node_type``/``edge_type``/``num_node_types``/``num_edge_types`` and a JSON
string ``meta``.  Nothing is unpickled: files are opened with ``allow_pickle=False``.
"""
from __future__ import annotations

import io
import json
import math
import os
import zipfile
import zlib
from pathlib import Path
from typing import Optional

import numpy as np
import scipy.sparse as sp

from morphgen.data import typed_features
from morphgen.data.dataset import Dataset
from morphgen.data.errors import DataError
from morphgen.data.guards import human_bytes, require_file, require_memory
from morphgen.data.link import read_link_npz
from morphgen.data.validate import (check_declared_count, check_edge_index, csr_from_parts, make_graph,
                                    require_integer, require_scalar_int)
from morphgen.data.typed_features import CSR_PARTS
from morphgen.outputs import CHECKPOINT_MAGIC
from morphgen.graph import Graph


# Errors that reading a damaged archive member can raise: a bad deflate stream (zlib.error), a
# stream that ends early (EOFError), a CRC mismatch (BadZipFile), short or malformed .npy data
# (ValueError), an unsupported compression method or flag (NotImplementedError, RuntimeError).
_DAMAGED = (EOFError, zlib.error, zipfile.BadZipFile, ValueError, OSError, NotImplementedError,
            RuntimeError)
# How much of a member is read to parse its .npy header; numpy itself refuses headers over 10000
# characters, and this keeps a header that declares a 4 GiB length from being read at all.
_HEADER_READ = 1 << 16


def _reason(exc: BaseException) -> str:
    """The exception's message, or its type when it has none (zipfile's EOFError)."""
    return str(exc) or type(exc).__name__


class NpzArchive:
    """Read access to an ``.npz`` whose missing keys become ``DataError``s naming key and file.

    Each member's .npy header is checked before its data is read (see ``__getitem__``), so a
    damaged or hostile archive is a ``DataError``, never a numpy, zlib or memory error.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.source = str(self.path)
        require_file(self.path)
        try:
            with open(self.path, "rb") as fh:
                head = fh.read(len(np.lib.format.MAGIC_PREFIX))
            # checked here because np.load would read a single .npy whole, whatever its header says
            if head.startswith(np.lib.format.MAGIC_PREFIX):
                raise DataError(f"{self.source}: holds a single array, expected an .npz archive of named arrays")
            if not head:
                raise DataError(f"{self.source}: not a readable .npz archive (the file is empty)")
            if head.startswith(CHECKPOINT_MAGIC):
                raise DataError(f"{self.source}: is a morphgen checkpoint (--checkpoint, --resume), not a dataset")
            # numpy's own message for a file that is no zip suggests unpickling it
            if not head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
                raise DataError(f"{self.source}: not a readable .npz archive (File is not a zip file)")
            self._z = np.load(self.path, allow_pickle=False)
        except DataError:
            raise
        except _DAMAGED as exc:
            raise DataError(f"{self.source}: not a readable .npz archive ({_reason(exc)})") from None
        self.keys = set(self._z.files)

    def __contains__(self, key: str) -> bool:
        return key in self.keys

    def _member(self, key: str) -> zipfile.ZipInfo:
        """The zip entry numpy reads for ``key``: the name itself, else ``key + '.npy'``."""
        names = self._z.zip.namelist()
        return self._z.zip.getinfo(key if key in names else key + ".npy")

    def _check_header(self, key: str, info: zipfile.ZipInfo) -> None:
        """Refuse a member that is not a .npy array, holds objects, or whose declared shape does not
        match the member's size in the zip directory or does not fit in memory."""
        with self._z.zip.open(info) as fh:
            head = fh.read(_HEADER_READ)
        if not head.startswith(np.lib.format.MAGIC_PREFIX):
            raise DataError(f"{self.source}: key '{key}': member '{info.filename}' is not a .npy array "
                            f"(it starts with {head[:16]!r})")
        header = io.BytesIO(head)
        version = np.lib.format.read_magic(header)
        if version not in ((1, 0), (2, 0), (3, 0)):
            raise DataError(f"{self.source}: key '{key}': unsupported .npy format version {version}")
        # 3.0 differs from 2.0 only in the header's text encoding (utf-8 field names)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, _, dtype = read_header(header)
        if dtype.hasobject:
            raise DataError(f"{self.source}: key '{key}' cannot be read without unpickling "
                            f"(dtype {dtype} holds Python objects)")
        if any(d < 0 for d in shape):
            raise DataError(f"{self.source}: key '{key}' is damaged (negative dimension in shape {shape})")
        nbytes = math.prod(shape) * dtype.itemsize
        if header.tell() + nbytes != info.file_size:
            raise DataError(f"{self.source}: key '{key}' is damaged: its header declares shape {shape} "
                            f"of {dtype}, {human_bytes(nbytes)} of data, but the member holds "
                            f"{human_bytes(max(info.file_size - header.tell(), 0))}")
        require_memory(nbytes, f"{self.source}: key '{key}': shape {shape} of {dtype}")

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self.keys:
            raise DataError(f"{self.source}: missing key '{key}' (keys present: {', '.join(sorted(self.keys))})")
        try:
            self._check_header(key, self._member(key))
            return self._z[key]
        except DataError:        # a ValueError too: already says what is wrong
            raise
        except _DAMAGED as exc:
            raise DataError(f"{self.source}: key '{key}' is damaged ({_reason(exc)})") from None

    def meta(self) -> dict:
        if "meta" not in self.keys:
            return {}
        raw = self["meta"]
        if raw.ndim != 0 or raw.dtype.kind not in "US":
            raise DataError(f"{self.source}: meta: expected a 0-d JSON string, got {raw.dtype} {raw.shape}")
        try:
            meta = json.loads(str(raw))
        except json.JSONDecodeError as exc:
            raise DataError(f"{self.source}: meta: not valid JSON ({exc.msg} at char {exc.pos})") from None
        if not isinstance(meta, dict):
            raise DataError(f"{self.source}: meta: expected a JSON object, got {type(meta).__name__}")
        return meta

    def close(self):
        self._z.close()


# Names other tools give node features and labels, which this format reads from `x` and `y` only.
# Left unread, such a key would make a dataset featureless (or label-less) without a word.
_FEATURE_ALIASES = ("X", "features", "feature", "feats", "feat", "node_features", "node_feat", "attr",
                    "node_attr")
_LABEL_ALIASES = ("Y", "labels", "label", "targets", "target", "node_labels", "classes")


def _check_key_names(z: NpzArchive) -> None:
    """Refuse a file that names its features or labels as other tools do (`features`, `labels`)
    where the format's own keys are absent: reading on would drop them without a word."""
    has_features = ("x" in z or any(f"x_{part}" in z for part in CSR_PARTS)
                    or bool(typed_features.per_type_keys(z.keys)))
    has_labels = "y" in z or "train_triples" in z      # a link dataset's triples need no labels
    checks = (("features", _FEATURE_ALIASES, has_features,
               "'x' (dense float32 [N, F]) or 'x_indptr', 'x_indices', 'x_data', 'x_shape' (CSR)"),
              ("labels", _LABEL_ALIASES, has_labels, "'y' (int64 [N], -1 = unlabelled)"))
    for what, aliases, present, keys in checks:
        found = [key for key in aliases if key in z]
        if found and not present:
            raise DataError(f"{z.source}: key '{found[0]}' is not read: this format takes node {what} "
                            f"from {keys}; rename it (docs/data.md, 'Canonical npz format')")


def _num_nodes(z: NpzArchive) -> int:
    """``num_nodes`` if stored, else the row count of the features or labels."""
    if "num_nodes" in z:
        n = require_scalar_int("num_nodes", z["num_nodes"], z.source)
    elif "x_shape" in z:
        shape = require_integer("x_shape", z["x_shape"], z.source)
        if shape.shape != (2,):
            raise DataError(f"{z.source}: x_shape: shape {shape.shape}, expected (2,)")
        n = int(shape[0])
    elif "x" in z or "y" in z:
        key = "x" if "x" in z else "y"
        arr = z[key]
        if arr.ndim == 0:
            raise DataError(f"{z.source}: {key}: a 0-d array, expected one row per node")
        n = int(arr.shape[0])
    else:
        raise DataError(f"{z.source}: missing key 'num_nodes' (needed when there are no features or labels)")
    if n < 0:
        raise DataError(f"{z.source}: num_nodes: must be non-negative, got {n}")
    return n


def _graph(z: NpzArchive, meta: dict) -> Graph:
    n = _num_nodes(z)
    src, dst = check_edge_index(z["edge_index"], n, z.source)
    typed = {"meta": dict(meta)}
    if "edge_type" in z:
        typed["etype"] = require_integer("edge_type", z["edge_type"], z.source)
        typed["num_etypes"] = require_scalar_int("num_edge_types", z["num_edge_types"], z.source)
    if "node_type" in z:
        typed["ntype"] = require_integer("node_type", z["node_type"], z.source)
        typed["num_ntypes"] = require_scalar_int("num_node_types", z["num_node_types"], z.source)
    if "edge_weight" in z:
        typed["edge_weight"] = z["edge_weight"]
    return make_graph(n, src, dst, z.source, **typed)


def read_npz_graph(path) -> Graph:
    z = NpzArchive(path)
    try:
        return _graph(z, z.meta())
    finally:
        z.close()


def _dense_features(z: NpzArchive, key: str, rows: int) -> np.ndarray:
    x = z[key]
    if x.ndim != 2:
        raise DataError(f"{z.source}: {key}: shape {x.shape}, expected 2-D [rows, num_features]")
    if x.shape[0] != rows:
        raise DataError(f"{z.source}: {key}: {x.shape[0]} rows, expected {rows} (one per node of its type)")
    if not np.issubdtype(x.dtype, np.floating):
        raise DataError(f"{z.source}: {key}: dtype {x.dtype}, expected float32")
    return np.ascontiguousarray(x, dtype=np.float32)


def _type_features(z: NpzArchive, name: str, rows: int):
    """Node type ``name``'s own features: CSR ``x_<name>_*`` keys or a dense ``x_<name>``."""
    prefix = f"x_{name}"
    if f"{prefix}_indptr" in z or f"{prefix}_shape" in z:
        parts = [z[f"{prefix}_{p}"] for p in CSR_PARTS]
        return csr_from_parts(prefix, *parts, num_rows=rows, source=z.source)
    return _dense_features(z, prefix, rows)


def _features(z: NpzArchive, graph: Graph, notes: list, meta: dict, per_type: bool):
    n = graph.num_nodes
    if "x_indptr" in z or "x_shape" in z or "x_data" in z or "x_indices" in z:
        if "x" in z:
            raise DataError(f"{z.source}: x: the features are given twice, dense (x) and sparse "
                            f"(x_indptr/x_indices/x_data/x_shape); keep one")
        parts = [z[f"x_{p}"] for p in CSR_PARTS]
        return csr_from_parts("x", *parts, num_rows=n, source=z.source)
    if "x" in z:
        return _dense_features(z, "x", n)
    typed = typed_features.per_type_keys(z.keys)
    if not typed:
        return None
    if not per_type:
        notes.append(f"per-type features for {', '.join(typed)} are not used: the dataset is "
                     f"loaded featureless (one learned embedding per node)")
        return None
    features, blocks = typed_features.assemble(lambda name, rows: _type_features(z, name, rows),
                                               typed, graph, z.source)
    meta["feature_blocks"] = blocks
    notes.append(f"per-type features side by side in the columns of x: {typed_features.describe(blocks)}")
    return features


def _num_classes(z: NpzArchive, meta: dict, y: np.ndarray) -> int:
    if "num_classes" in z:
        return require_scalar_int("num_classes", z["num_classes"], z.source)
    if "num_classes" in meta:
        value = meta["num_classes"]
        # JSON true is a Python int too: only a real integer is a class count
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise DataError(f"{z.source}: meta: num_classes: expected a non-negative integer, got {json.dumps(value)}")
        return value
    names = meta.get("class_names")
    if isinstance(names, list) and names:
        return len(names)
    labelled = y[y >= 0]
    return int(labelled.max()) + 1 if labelled.size else 0


def read_npz(path, name: Optional[str] = None, per_type_features: bool = True):
    """Read a full dataset: a ``Dataset``, or a ``LinkDataset`` for a file of triples without labels.
    ``per_type_features``: assemble ``x_<type>`` features into one block matrix
    (``morphgen.data.typed_features``); when false such a dataset loads featureless."""
    path = Path(path)
    z = NpzArchive(path)
    try:
        _check_key_names(z)
        meta = z.meta()
        graph = _graph(z, meta)
        n = graph.num_nodes
        if "y" not in z and "train_triples" in z:
            return read_link_npz(z, graph, meta, name or path.stem, str(path))
        if "y" not in z:
            raise DataError(f"{z.source}: has no labels (key 'y'); labels are required for training. "
                            f"Use morphgen.data.load_graph for the structure only")
        y = z["y"]
        if not np.issubdtype(y.dtype, np.integer):
            raise DataError(f"{z.source}: y: dtype {y.dtype}, expected int64")
        y = y.astype(np.int64)
        notes: list = []
        if "unlabeled_mask" in z:
            unl = z["unlabeled_mask"]
            if unl.dtype != np.bool_ or unl.shape != y.shape:
                raise DataError(f"{z.source}: unlabeled_mask: expected bool {y.shape}, got {unl.dtype} {unl.shape}")
            if unl.any():
                # their stored label is padding (e.g. CiteSeer's all-zero rows), not a class
                y[unl] = -1
                notes.append(f"{int(unl.sum())} node(s) flagged in unlabeled_mask get label -1")
        layout: dict = {}
        features = _features(z, graph, notes, layout, per_type_features)
        masks = [z[m] for m in ("train_mask", "val_mask", "test_mask")]
        num_classes = _num_classes(z, meta, y)
    finally:
        z.close()
    ds = Dataset(name=name or path.stem, graph=graph, features=features, labels=y,
                 train_mask=masks[0], val_mask=masks[1], test_mask=masks[2], num_classes=num_classes,
                 meta={"source": str(path), "format": "npz", "file_meta": meta, "notes": notes, **layout})
    # validated labels lie below num_classes; the count itself sizes the model's output layer
    check_declared_count("num_classes", ds.num_classes, ds.num_nodes, "nodes", int(ds.labels.max(initial=-1)),
                         "label in y", z.source)
    return ds


def save_npz(dataset: Dataset, path, compressed: bool = True) -> Path:
    """Write ``dataset`` in the canonical format; ``read_npz`` / ``load_dataset`` read it back exactly.

    Sparse features are stored as CSR ``x_*`` keys, dense ones as ``x``; featureless datasets store
    no feature key.  Labels keep -1 for unlabelled nodes.
    """
    path = Path(path)
    if path.suffix != ".npz":
        raise DataError(f"{path}: save_npz writes .npz files; give a path ending in .npz")
    g = dataset.graph
    arrays = {
        "num_nodes": np.int64(g.num_nodes),
        "edge_index": np.stack([g.src, g.dst]).astype(np.int64),
        "y": dataset.labels.astype(np.int64),
        "train_mask": dataset.train_mask, "val_mask": dataset.val_mask, "test_mask": dataset.test_mask,
        "num_classes": np.int64(dataset.num_classes),
    }
    if g.etype is not None:
        arrays["edge_type"] = g.etype
        arrays["num_edge_types"] = np.int64(g.num_etypes)
    if g.ntype is not None:
        arrays["node_type"] = g.ntype
        arrays["num_node_types"] = np.int64(g.num_ntypes)
    if g.edge_weight is not None:
        arrays["edge_weight"] = g.edge_weight
    f = dataset.features
    if sp.issparse(f):
        f = f.tocsr()
        arrays.update(x_indptr=f.indptr.astype(np.int64), x_indices=f.indices.astype(np.int64),
                      x_data=f.data.astype(np.float32), x_shape=np.array(f.shape, np.int64))
    elif f is not None:
        arrays["x"] = np.ascontiguousarray(f, dtype=np.float32)
    meta = dict(g.meta)
    meta["name"] = dataset.name
    origin = {k: v for k, v in dataset.meta.items() if k not in ("source", "file_meta")}
    if origin:
        meta["origin"] = origin
    arrays["meta"] = np.array(json.dumps(meta, default=str))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")   # write then rename: readers never see half a file
    (np.savez_compressed if compressed else np.savez)(tmp, **arrays)
    os.replace(tmp, path)
    return path
