"""The undirected, loop-free, weighted adjacency that METIS and component search need.

The Graph holds directed edges (possibly duplicated, possibly self loops).  METIS wants each
undirected edge once per direction and no self loops, so u-v gets the weight
#(u->v) + #(v->u).  With that weight METIS's cut equals our reported cut: the number of
directed edges whose endpoints lie in different parts.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


@dataclass(frozen=True)
class SymmetricAdjacency:
    indptr: np.ndarray    # int64 [N+1]
    indices: np.ndarray   # int64 [nnz]
    weights: np.ndarray   # int64 [nnz], >= 1

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0] - 1)

    def as_scipy(self) -> sp.csr_matrix:
        n = self.num_nodes
        return sp.csr_matrix((self.weights, self.indices, self.indptr), shape=(n, n))


def symmetric_adjacency(graph) -> SymmetricAdjacency:
    n = graph.num_nodes
    keep = graph.src != graph.dst
    s, d = graph.src[keep], graph.dst[keep]
    rows = np.concatenate([s, d])
    cols = np.concatenate([d, s])
    m = sp.csr_matrix((np.ones(rows.shape[0], np.int64), (rows, cols)), shape=(n, n))
    m.sum_duplicates()
    m.sort_indices()
    return SymmetricAdjacency(m.indptr.astype(np.int64), m.indices.astype(np.int64),
                              m.data.astype(np.int64))
