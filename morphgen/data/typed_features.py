"""Per-node-type input features (``x_<type>`` keys) assembled into one block matrix.

Heterogeneous datasets give each node type its own feature matrix, of its own width, or none.
morphgen keeps one input ``x`` per program and lays the types out side by side in its columns:

    columns  [0, F_paper)          [F_paper, F_paper + F_author)   [.., .. + n_subject)
    paper    x_paper                0                               0
    author   0                      x_author                        0
    subject  0                      0                               I  (one-hot per node)

A node's row is non-zero only in its own type's block, so ``x * W`` with one ``[F][H]`` weight
*is* the typed input projection ``x_t * W_t`` (W_t = the rows of W in type t's block), and a type
without features gets a learned embedding per node, as a featureless dataset does.  The matrix
is CSR: the sparse feature path multiplies only the stored values, so nothing is paid for the
zero blocks.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import scipy.sparse as sp

from morphgen.data.errors import DataError
from morphgen.graph import Graph

CSR_PARTS = ("indptr", "indices", "data", "shape")


def feature_type_name(key: str) -> str:
    """``x_paper_indptr`` -> ``paper``; ``x_author`` (dense) -> ``author``."""
    stem = key[2:]
    for part in CSR_PARTS:
        if stem.endswith("_" + part):
            return stem[: -len(part) - 1]
    return stem


def per_type_keys(keys) -> list:
    """The node type names that ``x_<type>`` keys give features for, sorted."""
    return sorted({feature_type_name(k) for k in keys if k.startswith("x_")})


def _type_names(graph: Graph, source: Optional[str]) -> list:
    names = graph.meta.get("node_type_names")
    if graph.ntype is None:
        raise DataError(f"{source}: has per-type features (x_<type> keys) but no node_type array")
    if not isinstance(names, list) or len(names) != graph.num_ntypes or \
            not all(isinstance(n, str) for n in names):
        raise DataError(f"{source}: meta: node_type_names must list the {graph.num_ntypes} node type "
                        f"names, in type-id order, for the x_<type> features to be placed")
    return names


def assemble(read_type, type_names_with_features: list, graph: Graph,
             source: Optional[str]) -> tuple:
    """The block feature matrix and its layout.

    ``read_type(name, rows)`` returns type ``name``'s features as a float32 CSR (or dense) matrix
    with ``rows`` rows.  Returns ``(features, blocks)``: a CSR ``[N, sum of widths]`` matrix and
    one ``{"type", "columns": [lo, hi], "input"}`` record per node type, ``input`` being the
    feature key or ``"one-hot"``.
    """
    names = _type_names(graph, source)
    unknown = sorted(set(type_names_with_features) - set(names))
    if unknown:
        raise DataError(f"{source}: key 'x_{unknown[0]}': '{unknown[0]}' is not a node type "
                        f"(node types: {', '.join(names)})")
    rows_of = [np.flatnonzero(graph.ntype == t) for t in range(graph.num_ntypes)]
    pieces, blocks, offset = [], [], 0
    for t, name in enumerate(names):
        rows = rows_of[t]
        if name in type_names_with_features:
            block = sp.csr_matrix(read_type(name, rows.size), dtype=np.float32)
            kind = f"x_{name}"
        else:
            block = sp.identity(rows.size, dtype=np.float32, format="csr")
            kind = "one-hot"
        coo = block.tocoo()
        pieces.append((rows[coo.row], coo.col.astype(np.int64) + offset, coo.data))
        blocks.append({"type": name, "columns": [offset, offset + block.shape[1]], "input": kind})
        offset += block.shape[1]
    row = np.concatenate([p[0] for p in pieces]) if pieces else np.zeros(0, np.int64)
    col = np.concatenate([p[1] for p in pieces]) if pieces else np.zeros(0, np.int64)
    val = np.concatenate([p[2] for p in pieces]) if pieces else np.zeros(0, np.float32)
    features = sp.csr_matrix((val, (row, col)), shape=(graph.num_nodes, offset), dtype=np.float32)
    features.sort_indices()
    return features, blocks


def describe(blocks: list) -> str:
    """``paper 0:1902 (x_paper), subject 3804:3864 (one-hot)``."""
    return ", ".join(f"{b['type']} {b['columns'][0]}:{b['columns'][1]} ({b['input']})" for b in blocks)
