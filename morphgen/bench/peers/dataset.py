"""Load a node-classification graph in the canonical npz format (numpy only).

Keys (see the datasets README): `edge_index` int [2, E] (row 0 source, row 1 destination),
features either dense `x` [N, F] or CSR `x_indptr`/`x_indices`/`x_data`/`x_shape`, `y` int [N],
`train_mask`/`val_mask`/`test_mask` bool [N]. A relational graph adds `edge_type` int [E] and
`num_edge_types`; a heterogeneous one `node_type` int [N] and `num_node_types`, and its `meta`
JSON may place each node type's features in a block of columns (origin.feature_blocks, written by
morphgen.data.save_npz). A file without feature keys is featureless: its input is the identity (one
learned row per node, F = N), which only the R-GCN peers take (as node ids, never as an N x N
matrix). Every array is checked here so a peer runner fails with the name of the offending key
instead of a shape error deep inside torch.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from morphgen.errors import UserError


class DatasetError(UserError, ValueError):
    """A malformed dataset file; the message names the key."""


@dataclass(eq=False)
class NodeClassificationData:
    num_nodes: int
    src: np.ndarray                    # int64 [E]
    dst: np.ndarray                    # int64 [E]
    num_features: int
    x_dense: Optional[np.ndarray]      # float32 [N, F] when the file stores dense features
    x_csr: Optional[tuple[np.ndarray, np.ndarray, np.ndarray]]  # (indptr int64, indices int64, data float32)
    y: np.ndarray                      # int64 [N]
    train_mask: np.ndarray             # bool [N]
    val_mask: np.ndarray
    test_mask: np.ndarray
    etype: Optional[np.ndarray] = None  # int64 [E] edge types, or None (one relation)
    num_etypes: int = 1
    ntype: Optional[np.ndarray] = None  # int64 [N] node types, or None (one type)
    num_ntypes: int = 1
    # per node type, its feature columns [lo, hi) in x, or None: the type is one-hot (an embedding)
    feature_blocks: Optional[list] = None
    edge_weight: Optional[np.ndarray] = None   # float32 [E], or None (the file has none)

    def node_types(self) -> np.ndarray:
        """int64 [N]: the node types (all 0 for a graph without them)."""
        return self.ntype if self.ntype is not None else np.zeros(self.num_nodes, np.int64)

    def type_columns(self) -> list:
        """Per node type, the columns [lo, hi) of x that hold its features, or None where the type
        has none of its own (a featureless graph, or a one-hot block: a learned row per node).
        Without a stored block layout every type reads all of x."""
        if self.featureless:
            return [None] * self.num_ntypes
        if self.feature_blocks is None:
            return [(0, self.num_features)] * self.num_ntypes
        return [None if b["input"] == "one-hot" else tuple(b["columns"]) for b in self.feature_blocks]

    @property
    def featureless(self) -> bool:
        """No stored features: the input is the identity, F = N."""
        return self.x_dense is None and self.x_csr is None

    def edge_weights(self) -> np.ndarray:
        """float32 [E]: the edge weights, for a spec that weighs the edges (the file must hold them)."""
        if self.edge_weight is None:
            raise DatasetError("the model weighs its edges, but the dataset has no edge weights ('edge_weight')")
        return self.edge_weight

    def edge_types(self) -> np.ndarray:
        """int64 [E]: the edge types (all 0 for an untyped graph)."""
        return self.etype if self.etype is not None else np.zeros(self.num_edges, np.int64)

    @property
    def num_edges(self) -> int:
        return int(self.src.shape[0])

    @property
    def num_classes(self) -> int:
        return int(self.y.max()) + 1 if self.y.size else 0

    @property
    def feature_nnz(self) -> int:
        if self.featureless:
            return self.num_nodes
        if self.x_csr is not None:
            return int(self.x_csr[2].shape[0])
        return int(np.count_nonzero(self.x_dense))

    def dense_features(self) -> np.ndarray:
        """Features as a dense float32 [N, F] array (densified from CSR when needed)."""
        if self.featureless:
            raise DatasetError(f"the dataset is featureless (identity input, {self.num_nodes} x {self.num_nodes}); "
                               "only the rgcn peers take it, as node ids")
        if self.x_dense is not None:
            return self.x_dense
        indptr, indices, data = self.x_csr
        out = np.zeros((self.num_nodes, self.num_features), dtype=np.float32)
        rows = np.repeat(np.arange(self.num_nodes), np.diff(indptr))
        out[rows, indices] = data
        return out

    def csr_features(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Features as CSR (indptr, indices, data) (built from the dense array when needed)."""
        if self.featureless:
            self.dense_features()             # raises, naming the case
        if self.x_csr is not None:
            return self.x_csr
        rows, cols = np.nonzero(self.x_dense)
        indptr = np.zeros(self.num_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=self.num_nodes), out=indptr[1:])
        return indptr, cols.astype(np.int64), self.x_dense[rows, cols].astype(np.float32)


def _key(z, key: str, path: Path) -> np.ndarray:
    if key not in z.files:
        raise DatasetError(f"{path}: missing key '{key}'")
    return z[key]


def _mask(z, key: str, n: int, path: Path) -> np.ndarray:
    m = _key(z, key, path)
    if m.dtype != np.bool_ or m.shape != (n,):
        raise DatasetError(f"{path}: key '{key}' must be a bool array of shape ({n},), got {m.dtype} {m.shape}")
    return m


def load_node_classification(path: str | Path) -> NodeClassificationData:
    path = Path(path)
    try:
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{path}: cannot be read as an npz archive ({exc})") from exc
    with z:
        y = _key(z, "y", path)
        if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
            raise DatasetError(f"{path}: key 'y' must be a 1-d integer array, got {y.dtype} {y.shape}")
        n = int(y.shape[0])
        if y.size and y.min() < 0:
            raise DatasetError(f"{path}: key 'y' has negative label {int(y.min())} (unlabelled nodes are not supported)")
        ei = _key(z, "edge_index", path)
        if ei.ndim != 2 or ei.shape[0] != 2 or not np.issubdtype(ei.dtype, np.integer):
            raise DatasetError(f"{path}: key 'edge_index' must be an integer array of shape [2, E], got {ei.dtype} {ei.shape}")
        if ei.size and (ei.min() < 0 or ei.max() >= n):
            raise DatasetError(f"{path}: key 'edge_index' has node ids outside [0, {n})")
        x_dense = x_csr = None
        if "x" in z.files:
            x_dense = np.ascontiguousarray(z["x"], dtype=np.float32)
            if x_dense.ndim != 2 or x_dense.shape[0] != n:
                raise DatasetError(f"{path}: key 'x' must have shape [{n}, F], got {x_dense.shape}")
            f = int(x_dense.shape[1])
        elif "x_indptr" in z.files:
            shape = tuple(int(s) for s in _key(z, "x_shape", path))
            indptr = _key(z, "x_indptr", path).astype(np.int64)
            indices = _key(z, "x_indices", path).astype(np.int64)
            data = _key(z, "x_data", path).astype(np.float32)
            if len(shape) != 2 or shape[0] != n:
                raise DatasetError(f"{path}: key 'x_shape' must be [{n}, F], got {list(shape)}")
            f = shape[1]
            if indptr.shape != (n + 1,) or indptr[0] != 0 or indptr[-1] != indices.shape[0] or np.any(np.diff(indptr) < 0):
                raise DatasetError(f"{path}: key 'x_indptr' is not a valid CSR row pointer for {n} rows")
            if indices.shape != data.shape or (indices.size and (indices.min() < 0 or indices.max() >= f)):
                raise DatasetError(f"{path}: keys 'x_indices'/'x_data' disagree in length or hold columns outside [0, {f})")
            x_csr = (indptr, indices, data)
        else:
            f = n                             # featureless: the identity input
        etype, num_etypes = _edge_types(z, ei.shape[1], path)
        ntype, num_ntypes = _node_types(z, n, path)
        blocks = _feature_blocks(z, num_ntypes, f, path) if ntype is not None else None
        weight = None
        if "edge_weight" in z.files:
            weight = np.ascontiguousarray(z["edge_weight"], dtype=np.float32)
            if weight.shape != (ei.shape[1],) or not np.all(np.isfinite(weight)):
                raise DatasetError(f"{path}: key 'edge_weight' must hold {ei.shape[1]} finite numbers, one per edge")
        return NodeClassificationData(
            num_nodes=n, src=ei[0].astype(np.int64), dst=ei[1].astype(np.int64), num_features=f,
            x_dense=x_dense, x_csr=x_csr, y=y.astype(np.int64),
            train_mask=_mask(z, "train_mask", n, path), val_mask=_mask(z, "val_mask", n, path),
            test_mask=_mask(z, "test_mask", n, path), etype=etype, num_etypes=num_etypes,
            ntype=ntype, num_ntypes=num_ntypes, feature_blocks=blocks, edge_weight=weight,
        )


def _types(z, key: str, count_key: str, length: int, path: Path) -> tuple[Optional[np.ndarray], int]:
    """`key` (an int array of `length` types) and `count_key` (default: the largest type + 1), or
    (None, 1) when the file has no such types."""
    if key not in z.files:
        return None, 1
    types = z[key]
    if types.shape != (length,) or not np.issubdtype(types.dtype, np.integer):
        raise DatasetError(f"{path}: key '{key}' must be an integer array of shape ({length},), "
                           f"got {types.dtype} {types.shape}")
    largest = int(types.max()) + 1 if types.size else 1
    count = int(z[count_key]) if count_key in z.files else largest
    if (types.size and types.min() < 0) or count < largest:
        raise DatasetError(f"{path}: key '{key}' has types outside [0, {count}) ({count_key})")
    return types.astype(np.int64), count


def _edge_types(z, num_edges: int, path: Path) -> tuple[Optional[np.ndarray], int]:
    return _types(z, "edge_type", "num_edge_types", num_edges, path)


def _node_types(z, num_nodes: int, path: Path) -> tuple[Optional[np.ndarray], int]:
    return _types(z, "node_type", "num_node_types", num_nodes, path)


def _feature_blocks(z, num_ntypes: int, num_features: int, path: Path) -> Optional[list]:
    """meta's origin.feature_blocks (one {"columns": [lo, hi], "input"} per node type), checked
    against the feature width; None when the file has no such layout."""
    if "meta" not in z.files:
        return None
    try:
        meta = json.loads(str(z["meta"]))
    except (json.JSONDecodeError, ValueError) as exc:
        raise DatasetError(f"{path}: key 'meta': not valid JSON ({exc})") from exc
    blocks = (meta.get("origin") or {}).get("feature_blocks") if isinstance(meta, dict) else None
    if blocks is None:
        return None
    ok = isinstance(blocks, list) and len(blocks) == num_ntypes and all(
        isinstance(b, dict) and isinstance(b.get("columns"), list) and len(b["columns"]) == 2
        and all(isinstance(c, int) for c in b["columns"]) and 0 <= b["columns"][0] <= b["columns"][1] <= num_features
        for b in blocks)
    if not ok:
        raise DatasetError(f"{path}: key 'meta': origin.feature_blocks must give {num_ntypes} column ranges "
                           f"[lo, hi] within [0, {num_features}], one per node type")
    return blocks


def load_init_weights(spec) -> list[dict[str, np.ndarray]]:
    """Per layer of `spec` (a BenchSpec with init_weights set), its parameters layer{i}.<name>
    (spec.parameters(i) names them and gives their shapes), keyed by name, shapes checked."""
    path = Path(spec.init_weights)
    try:
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DatasetError(f"init_weights {path}: cannot be read as an npz archive ({exc})") from exc
    out = []
    with z:
        for i in range(spec.num_layers):
            arrays = {}
            for name, shape in spec.parameters(i).items():
                key = f"layer{i}.{name}"
                a = _key(z, key, path).astype(np.float32)
                if a.shape != shape:
                    raise DatasetError(f"init_weights {path}: '{key}' has shape {a.shape}, expected {shape}")
                arrays[name] = a
            out.append(arrays)
    return out
