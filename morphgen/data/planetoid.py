"""Raw Planetoid files ``ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}`` -> ``Dataset``.

The files are Python-2 pickles.  They are read with a restricted unpickler (only numpy, scipy.sparse
and a few builtin/collections classes may be constructed, so a crafted file cannot run code) and
converted exactly like the standard Kipf / PyG Planetoid loader:

* ``X = vstack(allx, tx)``, ``Y = vstack(ally, ty)``, then the test rows are moved to their ids:
  ``X[test_index] = X[sorted(test_index)]``.
* When ``test.index`` has gaps (CiteSeer: isolated test ids without a ``tx`` row) ``tx``/``ty`` are
  padded with zero rows over ``min..max`` of the test ids; those nodes get label -1 (unlabelled).
* Edges: every (node, neighbour) pair of ``graph``, duplicates and self loops removed.
* Split: train = ids ``0..len(y)-1``, val = the next 500 ids, test = the ids in ``test.index``.
"""
from __future__ import annotations

import builtins
import io
import math
import pickle
import re
import warnings
from pathlib import Path
from typing import Optional

import numpy as np
import scipy.sparse as sp

from morphgen.data.dataset import Dataset
from morphgen.data.errors import DataError
from morphgen.data.guards import require_dir, require_file, require_memory
from morphgen.data.keys import sorted_unique
from morphgen.data.validate import make_graph

PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph")
VAL_SIZE = 500

# Only what the Planetoid pickles need may be constructed, so a crafted file cannot run code or
# touch files: plain containers (Python 2 names builtins ``__builtin__``), ``defaultdict``, numpy's
# array/dtype/scalar reconstructors, the scipy sparse matrix classes, ``copy_reg._reconstructor``
# (old-style objects) and ``_codecs.encode`` (Python-3 writers store bytes through it at protocol 2).
_ALLOWED_BUILTINS = {"list", "dict", "set", "frozenset", "tuple", "int", "float", "complex", "bool",
                     "str", "bytes", "bytearray", "object", "long", "unicode"}
_ALLOWED_EXACT = {("collections", "defaultdict"), ("collections", "OrderedDict"),
                  ("copy_reg", "_reconstructor"), ("copyreg", "_reconstructor"),
                  ("_codecs", "encode"), ("numpy", "ndarray"), ("numpy", "dtype")}
_NUMPY_MODULES = {"numpy", "numpy.core.multiarray", "numpy._core.multiarray", "numpy.core.numeric",
                  "numpy._core.numeric"}
_NUMPY_NAMES = {"_reconstruct", "scalar", "_frombuffer", "ndarray", "dtype"}
_SPARSE_CLASSES = {f"{fmt}_{kind}" for fmt in ("csr", "csc", "coo", "lil", "dok", "bsr", "dia")
                   for kind in ("matrix", "array")}


class RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, file, source: str):
        super().__init__(file, encoding="latin1")
        self.source = source

    def find_class(self, module, name):
        if module in ("__builtin__", "builtins") and name in _ALLOWED_BUILTINS:
            return {"long": int, "unicode": str}.get(name) or getattr(builtins, name)
        if module.startswith("scipy.sparse") and name in _SPARSE_CLASSES:
            return getattr(sp, name)            # old module paths (scipy.sparse.csr) map here too
        if (module, name) in _ALLOWED_EXACT or (module in _NUMPY_MODULES and name in _NUMPY_NAMES):
            with warnings.catch_warnings():     # numpy.core.* is a deprecated alias in numpy 2
                warnings.simplefilter("ignore")
                return super().find_class(module, name)
        raise DataError(f"{self.source}: refuses to unpickle {module}.{name}: only numpy arrays, "
                        f"scipy sparse matrices and plain containers are allowed")


def _unpickle(path: Path):
    require_file(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        return RestrictedUnpickler(io.BytesIO(data), str(path)).load()
    except DataError:
        raise
    except Exception as exc:  # any decoding failure of a foreign file becomes a located error
        raise DataError(f"{path}: not a readable Planetoid pickle ({type(exc).__name__}: {exc})") from None


def planetoid_names(directory: Path) -> list:
    """Dataset names that have an ``ind.<name>.graph`` file in ``directory``."""
    return sorted(m.group(1) for p in Path(directory).iterdir()
                  if (m := re.fullmatch(r"ind\.(.+)\.graph", p.name)))


def _as_dense_labels(name: str, arr, path: Path) -> np.ndarray:
    if sp.issparse(arr):
        # a sparse matrix's shape is only declared: check the dense copy fits before making it
        require_memory(math.prod(arr.shape) * arr.dtype.itemsize,
                       f"{path}: {name}: a dense copy of the {arr.shape} labels")
    a = arr.toarray() if sp.issparse(arr) else np.asarray(arr)
    if a.ndim != 2:
        raise DataError(f"{path}: {name}: shape {a.shape}, expected one-hot rows [n, classes]")
    return a


def _as_csr(name: str, arr, path: Path) -> sp.csr_matrix:
    if sp.issparse(arr):
        return sp.csr_matrix(arr, dtype=np.float32)
    a = np.asarray(arr)
    if a.ndim != 2 or not np.issubdtype(a.dtype, np.number):
        raise DataError(f"{path}: {name}: expected a 2-D numeric matrix, got {a.dtype} {a.shape}")
    return sp.csr_matrix(a.astype(np.float32))


def _read_test_index(path: Path) -> np.ndarray:
    require_file(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    ids = []
    for lineno, line in enumerate(lines, 1):
        text = line.strip()
        if not text:
            continue
        try:
            ids.append(int(text))
        except ValueError:
            raise DataError(f"{path}:{lineno}: expected a node id, got {text!r}") from None
    if not ids:
        raise DataError(f"{path}: no test ids")
    return np.array(ids, dtype=np.int64)


def _edges(graph_dict, num_nodes: int, path: Path):
    if not isinstance(graph_dict, dict):
        raise DataError(f"{path}: expected a dict of adjacency lists, got {type(graph_dict).__name__}")
    src, dst = [], []
    for node, neighbours in graph_dict.items():
        try:
            nbrs = [int(v) for v in neighbours]
            node = int(node)
        except (TypeError, ValueError):
            raise DataError(f"{path}: adjacency list of node {node!r} is not a list of integer ids") from None
        src.extend([node] * len(nbrs))
        dst.extend(nbrs)
    src = np.array(src, dtype=np.int64)
    dst = np.array(dst, dtype=np.int64)
    for row, arr in ((0, src), (1, dst)):
        bad = np.flatnonzero((arr < 0) | (arr >= num_nodes))
        if bad.size:
            raise DataError(f"{path}: edge_index[{row}] entry {int(bad[0])} is {int(arr[bad[0]])}, "
                            f"outside [0, {num_nodes})")
    keep = src != dst
    key = sorted_unique(src[keep] * num_nodes + dst[keep])   # sorted, duplicates removed
    raw = len(src)
    return key // num_nodes, key % num_nodes, {"raw_pairs": raw, "self_loops": int((~keep).sum())}


def planetoid_set(path: Path) -> Optional[tuple]:
    """(directory, name) where ``path`` names one Planetoid set by its files' common prefix,
    ``DIR/ind.<name>``, or by one of its files, ``DIR/ind.<name>.graph``: how a directory holding
    several sets is read from the command line.  None for any other path."""
    m = re.fullmatch(r"ind\.(.+?)(\.(?:" + "|".join(map(re.escape, PARTS + ("test.index",))) + r"))?", path.name)
    if m is None or not (path.parent / f"ind.{m.group(1)}.graph").is_file():
        return None
    return path.parent, m.group(1)


def read_planetoid(directory, name: Optional[str] = None) -> Dataset:
    directory = Path(directory)
    require_dir(directory)
    names = planetoid_names(directory)
    if name is None:
        if len(names) != 1:
            found = ", ".join(names) if names else "none"
            example = f"{directory / ('ind.' + names[0])}" if names else f"{directory}/ind.<name>"
            raise DataError(f"{directory}: expected the files of one Planetoid dataset "
                            f"(ind.<name>.graph ...); found: {found}. Name the set: {example} "
                            f"(or load_dataset(..., name=...))")
        name = names[0]
    missing = [f"ind.{name}.{p}" for p in PARTS + ("test.index",) if not (directory / f"ind.{name}.{p}").exists()]
    if missing:
        raise DataError(f"{directory}: missing Planetoid file(s) {', '.join(missing)}")
    obj = {p: _unpickle(directory / f"ind.{name}.{p}") for p in PARTS}
    path = lambda part: directory / f"ind.{name}.{part}"   # noqa: E731 (names the file in errors)

    y_train = _as_dense_labels("y", obj["y"], path("y"))
    ally = _as_dense_labels("ally", obj["ally"], path("ally"))
    ty = _as_dense_labels("ty", obj["ty"], path("ty"))
    allx = _as_csr("allx", obj["allx"], path("allx"))
    tx = _as_csr("tx", obj["tx"], path("tx"))
    test_index = _read_test_index(path("test.index"))
    if tx.shape[0] != ty.shape[0]:
        raise DataError(f"{path('tx')}: {tx.shape[0]} rows but ty has {ty.shape[0]}")
    if allx.shape[0] != ally.shape[0]:
        raise DataError(f"{path('allx')}: {allx.shape[0]} rows but ally has {ally.shape[0]}")
    if len({allx.shape[1], tx.shape[1]}) != 1:
        raise DataError(f"{path('tx')}: {tx.shape[1]} columns but allx has {allx.shape[1]}")
    if len({ally.shape[1], ty.shape[1], y_train.shape[1]}) != 1:
        raise DataError(f"{path('ty')}: {ty.shape[1]} classes but ally has {ally.shape[1]}")

    test_sorted = np.sort(test_index)
    lo, hi = int(test_sorted[0]), int(test_sorted[-1])
    if lo < allx.shape[0]:
        raise DataError(f"{path('test.index')}: test id {lo} overlaps the allx rows [0, {allx.shape[0]})")
    span = hi - lo + 1
    if span != len(test_sorted):
        # isolated test ids (CiteSeer): pad tx/ty with zero rows so every id in lo..hi has a row
        if tx.shape[0] != len(test_sorted) or len(np.unique(test_sorted)) != len(test_sorted):
            raise DataError(f"{path('tx')}: {tx.shape[0]} rows for {len(test_sorted)} test ids")
        # the largest test id sets the padded size: check it fits before allocating per row
        # (a dense label row and the int64 CSR row counts and offsets)
        require_memory(span * (ty.shape[1] * ty.dtype.itemsize + 16),
                       f"{path('test.index')}: test ids span {lo}..{hi}; padding {span} rows")
        # tx row i moves to row test_sorted[i] - lo; built as CSR directly (a lil matrix would
        # cost a Python list per padded row)
        counts = np.zeros(span, np.int64)
        counts[test_sorted - lo] = np.diff(tx.indptr)
        indptr = np.concatenate([[0], np.cumsum(counts)])
        tx = sp.csr_matrix((tx.data, tx.indices, indptr), shape=(span, tx.shape[1]))
        ty_full = np.zeros((span, ty.shape[1]), dtype=ty.dtype)
        ty_full[test_sorted - lo, :] = ty
        ty = ty_full
    elif tx.shape[0] != span:
        raise DataError(f"{path('tx')}: {tx.shape[0]} rows for {span} test ids")
    if allx.shape[0] != lo:
        raise DataError(f"{path('test.index')}: smallest test id is {lo}, expected {allx.shape[0]} "
                        f"(the row after allx)")

    features = sp.vstack([allx, tx]).tocsr()
    onehot = np.vstack([ally, ty])
    # move the test rows to their ids (the row order of tx follows test.index order, sorted)
    perm = np.arange(features.shape[0])
    perm[test_index] = test_sorted
    features = features[perm].tocsr()
    onehot = onehot[perm]
    features.sort_indices()
    features = features.astype(np.float32)
    n = features.shape[0]

    labelled = onehot.sum(axis=1) > 0
    labels = np.where(labelled, onehot.argmax(axis=1), -1).astype(np.int64)
    src, dst, counts = _edges(obj["graph"], n, path("graph"))
    graph = make_graph(n, src, dst, str(path("graph")))

    train = np.zeros(n, bool); train[: y_train.shape[0]] = True
    val = np.zeros(n, bool); val[y_train.shape[0]: y_train.shape[0] + VAL_SIZE] = True
    test = np.zeros(n, bool); test[test_index] = True
    val &= ~test & (labels >= 0)   # only bites on tiny inputs whose val range reaches the test ids
    return Dataset(name=name, graph=graph, features=features, labels=labels, train_mask=train,
                   val_mask=val, test_mask=test, num_classes=int(onehot.shape[1]),
                   meta={"source": str(directory), "format": "planetoid", **counts,
                         "padded_test_ids": int(span - len(test_sorted)) if span != len(test_sorted) else 0})
