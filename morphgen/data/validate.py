"""Checks shared by every loader.  Each failure is a ``DataError`` naming the field, the first
offending position and the source, e.g. ``cora.npz: edge_index[0] entry 17 is 9999, outside [0, 2708)``.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import scipy.sparse as sp

from morphgen.data.errors import DataError, located
from morphgen.data.guards import require_memory
from morphgen.graph import Graph, GraphError


def _fail(source: Optional[str], message: str):
    raise DataError(located(source, message))


def require_integer(name: str, arr: np.ndarray, source: Optional[str]) -> np.ndarray:
    if not isinstance(arr, np.ndarray) or not np.issubdtype(arr.dtype, np.integer):
        dtype = getattr(arr, "dtype", type(arr).__name__)
        _fail(source, f"{name}: dtype {dtype}, expected an integer array")
    return arr.astype(np.int64, copy=False)


def require_scalar_int(name: str, value, source: Optional[str]) -> int:
    arr = np.asarray(value)
    if arr.ndim != 0 or not np.issubdtype(arr.dtype, np.integer):
        _fail(source, f"{name}: expected an integer scalar, got {arr.dtype} with shape {arr.shape}")
    return int(arr)


def first_outside(arr: np.ndarray, lo: int, hi: int) -> Optional[int]:
    """Index of the first entry outside ``[lo, hi)``, or None."""
    if arr.size == 0:
        return None
    if int(arr.min()) >= lo and int(arr.max()) < hi:
        return None
    return int(np.flatnonzero((arr < lo) | (arr >= hi))[0])


def check_edge_index(edge_index, num_nodes: int, source: Optional[str]):
    """``edge_index`` int [2, E] with every id in ``[0, num_nodes)``; returns ``(src, dst)`` int64."""
    ei = require_integer("edge_index", edge_index, source)
    if ei.ndim != 2 or ei.shape[0] != 2:
        hint = " (one row per edge: store its transpose)" if ei.ndim == 2 and ei.shape[1] == 2 else ""
        _fail(source, f"edge_index: shape {ei.shape}, expected (2, E){hint}")
    for row in (0, 1):
        bad = first_outside(ei[row], 0, num_nodes)
        if bad is not None:
            _fail(source, f"edge_index[{row}] entry {bad} is {int(ei[row, bad])}, outside [0, {num_nodes})")
    return np.ascontiguousarray(ei[0]), np.ascontiguousarray(ei[1])


def check_declared_count(field: str, declared: int, items: int, what: str, largest_used: int,
                         used_by: str, source: Optional[str]) -> None:
    """A count a file declares (edge/node types, classes) against the items it describes.

    Unused trailing entries are allowed (the largest id used + 1 may be below the count), but only
    up to ``max(items, largest used + 1)``: models allocate per declared entry (a weight matrix per
    edge type, a logit column per class), so an unchecked count of 10**8 allocates gigabytes
    before anything else fails.
    """
    if declared < 1:
        _fail(source, f"{field}: must be at least 1, got {declared}")
    bound = max(1, items, largest_used + 1)
    if declared > bound:
        _fail(source, f"{field}: is {declared}, more than the {items} {what} it describes; expected at most "
                      f"{bound} (the larger of the number of {what} and the largest {used_by} + 1 = "
                      f"{largest_used + 1})")


def _largest(arr) -> int:
    return int(arr.max()) if arr is not None and arr.size else -1


# Every graph gets two CSR layouts (by destination and by source) of num_nodes + 1 int64 offsets.
_LAYOUT_BYTES_PER_NODE = 2 * 8


def make_graph(num_nodes: int, src, dst, source: Optional[str], **typed) -> Graph:
    """Build a ``Graph`` turning its own ``GraphError`` into a ``DataError`` with the source.

    Also refuses declared sizes that would drive a huge allocation later (when the graph layout is
    built or a model is sized): a node count whose index arrays do not fit in memory, and type
    counts far beyond the types used (``check_declared_count``).
    """
    try:
        graph = Graph(num_nodes, src, dst, **typed)
    except GraphError as exc:
        raise DataError(located(source, str(exc))) from None
    require_memory((num_nodes + 1) * _LAYOUT_BYTES_PER_NODE,
                   located(source, f"num_nodes: indexing {num_nodes} nodes (the graph's CSR offsets alone)"))
    if graph.etype is not None:
        check_declared_count("num_edge_types", graph.num_etypes, graph.num_edges, "edges",
                             _largest(graph.etype), "edge_type", source)
    if graph.ntype is not None:
        check_declared_count("num_node_types", graph.num_ntypes, graph.num_nodes, "nodes",
                             _largest(graph.ntype), "node_type", source)
    return graph


def csr_from_parts(prefix: str, indptr, indices, data, shape, num_rows: int,
                   source: Optional[str]) -> sp.csr_matrix:
    """Validate the four CSR arrays ``<prefix>_indptr/_indices/_data/_shape`` and build the matrix."""
    shape = require_integer(f"{prefix}_shape", np.asarray(shape), source)
    if shape.shape != (2,):
        _fail(source, f"{prefix}_shape: shape {shape.shape}, expected (2,)")
    rows, cols = int(shape[0]), int(shape[1])
    if rows != num_rows:
        _fail(source, f"{prefix}_shape: {rows} rows, expected {num_rows} (one per node)")
    if cols < 0:
        _fail(source, f"{prefix}_shape: negative column count {cols}")
    indptr = require_integer(f"{prefix}_indptr", indptr, source)
    indices = require_integer(f"{prefix}_indices", indices, source)
    if not isinstance(data, np.ndarray) or not np.issubdtype(data.dtype, np.floating):
        _fail(source, f"{prefix}_data: dtype {getattr(data, 'dtype', type(data).__name__)}, expected float32")
    if indptr.ndim != 1 or indptr.shape[0] != rows + 1:
        _fail(source, f"{prefix}_indptr: length {indptr.shape[0] if indptr.ndim == 1 else indptr.shape}, "
                      f"expected {rows + 1} (rows + 1)")
    if indices.ndim != 1 or data.ndim != 1 or indices.shape != data.shape:
        _fail(source, f"{prefix}_indices/{prefix}_data: lengths {indices.shape} and {data.shape} differ")
    if indptr[0] != 0 or indptr[-1] != indices.shape[0]:
        _fail(source, f"{prefix}_indptr: must start at 0 and end at nnz={indices.shape[0]}, "
                      f"got {int(indptr[0])} .. {int(indptr[-1])}")
    steps = np.diff(indptr)
    if steps.size and steps.min() < 0:
        row = int(np.flatnonzero(steps < 0)[0])
        _fail(source, f"{prefix}_indptr: decreases at row {row}")
    bad = first_outside(indices, 0, cols)
    if bad is not None:
        _fail(source, f"{prefix}_indices entry {bad} is {int(indices[bad])}, outside [0, {cols})")
    # the column count sizes the model's first weight matrix: empty trailing columns are allowed,
    # but no more columns than stored values or rows (the width of a featureless identity input)
    nnz, largest = indices.shape[0], _largest(indices)
    bound = max(1, nnz, rows, largest + 1)
    if cols > bound:
        _fail(source, f"{prefix}_shape: {cols} columns, more than the {nnz} stored values and {rows} rows; "
                      f"expected at most {bound} (the largest of those and the largest column used + 1 = "
                      f"{largest + 1})")
    # 32-bit indices where they fit (scipy's own choice; the sparse kernels read int32 columns), so
    # the matrix is converted once here, while loading, and not copied again when training starts.
    small = np.iinfo(np.int32).max
    if cols <= small and indices.shape[0] <= small:
        indices, indptr = indices.astype(np.int32, copy=False), indptr.astype(np.int32, copy=False)
    mat = sp.csr_matrix((data.astype(np.float32, copy=False), indices, indptr), shape=(rows, cols))
    return mat


def check_features(features, num_nodes: int, source: Optional[str]) -> None:
    if features is None:
        return
    if sp.issparse(features):
        if not isinstance(features, sp.csr_matrix) and features.format != "csr":
            _fail(source, f"features: sparse format {features.format!r}, expected CSR")
        values = features.data
    elif isinstance(features, np.ndarray):
        if features.ndim != 2:
            _fail(source, f"features: shape {features.shape}, expected 2-D [num_nodes, num_features]")
        values = features
    else:
        _fail(source, f"features: type {type(features).__name__}, expected a numpy array, a CSR matrix or None")
    if features.dtype != np.float32:
        _fail(source, f"features: dtype {features.dtype}, expected float32")
    if features.shape[0] != num_nodes:
        _fail(source, f"features: {features.shape[0]} rows, expected {num_nodes} (one per node)")
    finite = np.isfinite(values)
    if not finite.all():
        pos = int(np.flatnonzero(~finite.ravel())[0])
        if sp.issparse(features):
            row = int(np.searchsorted(features.indptr, pos, side="right") - 1)
            col = int(features.indices[pos])
            value = features.data[pos]
        else:
            row, col = divmod(pos, features.shape[1])
            value = features[row, col]
        _fail(source, f"features: non-finite value {value} at row {row}, column {col}")


def check_labels(labels, num_nodes: int, num_classes: int, source: Optional[str]) -> None:
    if not isinstance(labels, np.ndarray) or labels.dtype != np.int64:
        _fail(source, f"y (labels): dtype {getattr(labels, 'dtype', type(labels).__name__)}, expected int64")
    if labels.ndim != 1:
        hint = " (one-hot rows? store each row's class index, y.argmax(1))" if labels.ndim == 2 else ""
        _fail(source, f"y (labels): shape {labels.shape}, expected 1-D [num_nodes]{hint}")
    if labels.shape[0] != num_nodes:
        _fail(source, f"y has {labels.shape[0]} rows, expected {num_nodes}")
    if not isinstance(num_classes, (int, np.integer)) or num_classes < 1:
        _fail(source, f"num_classes: must be a positive integer, got {num_classes!r}")
    bad = first_outside(labels, -1, int(num_classes))
    if bad is not None:
        _fail(source, f"y entry {bad} (node {bad}) is {int(labels[bad])}, outside [0, {num_classes}) "
                      f"(-1 marks an unlabelled node)")


MASK_NAMES = ("train_mask", "val_mask", "test_mask")


def check_masks(masks, labels: np.ndarray, num_nodes: int, source: Optional[str]) -> None:
    """Bool [N] masks; train and test non-empty, val may be empty; pairwise disjoint; labelled only."""
    for name, mask in zip(MASK_NAMES, masks):
        if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
            _fail(source, f"{name}: dtype {getattr(mask, 'dtype', type(mask).__name__)}, expected bool")
        if mask.shape != (num_nodes,):
            _fail(source, f"{name} has shape {mask.shape}, expected ({num_nodes},)")
    train, val, test = masks
    if not train.any():
        _fail(source, "train_mask: is empty; at least one labelled training node is required")
    if not test.any():
        _fail(source, "test_mask: is empty; at least one test node is required")
    for (na, a), (nb, b) in (((MASK_NAMES[0], train), (MASK_NAMES[1], val)),
                             ((MASK_NAMES[0], train), (MASK_NAMES[2], test)),
                             ((MASK_NAMES[1], val), (MASK_NAMES[2], test))):
        both = a & b
        if both.any():
            _fail(source, f"{na} and {nb} overlap: {int(both.sum())} node(s), first is node "
                          f"{int(np.flatnonzero(both)[0])}")
    for name, mask in zip(MASK_NAMES, masks):
        unlabelled = mask & (labels < 0)
        if unlabelled.any():
            _fail(source, f"{name}: node {int(np.flatnonzero(unlabelled)[0])} is selected but unlabelled "
                          f"(y = -1)")


def validate_dataset(ds, source: Optional[str] = None) -> None:
    if not isinstance(ds.graph, Graph):
        _fail(source, f"graph: type {type(ds.graph).__name__}, expected morphgen.graph.Graph")
    n = ds.graph.num_nodes
    check_features(ds.features, n, source)
    check_labels(ds.labels, n, ds.num_classes, source)
    check_masks((ds.train_mask, ds.val_mask, ds.test_mask), ds.labels, n, source)
