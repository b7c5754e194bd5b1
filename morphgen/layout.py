"""The backend graph layout: edges sorted by destination, plus the transpose.

Every backend consumes the same layout (runtime/morphgen_abi.h): a CSR over incoming edges
(``indptr``, ``col`` = source) whose positions index every per-edge tensor, and a CSR over
outgoing edges (``t_indptr``, ``t_col`` = destination, ``t_eid`` = the edge's position in the
destination order) used by transposed aggregations, so no kernel needs atomics.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from .graph import Graph


@dataclass
class GraphLayout:
    num_nodes: int
    num_edges: int
    indptr: np.ndarray
    col: np.ndarray
    t_indptr: np.ndarray
    t_col: np.ndarray
    t_eid: np.ndarray
    etype: Optional[np.ndarray]
    ntype: Optional[np.ndarray]
    num_etypes: int
    num_ntypes: int
    order: np.ndarray          # order[p] = original edge id at destination-sorted position p
    edge_weight: Optional[np.ndarray] = None   # float32 [E] in destination-sorted order, or None

    @classmethod
    def from_graph(cls, g: Graph) -> "GraphLayout":
        indptr, order = g.by_dst
        etype = None if g.etype is None else g.etype[order]
        weight = None if g.edge_weight is None else g.edge_weight[order]
        return cls.from_csr(indptr, g.src[order], etype, g.ntype, g.num_etypes, g.num_ntypes, order, weight)

    @classmethod
    def from_csr(cls, indptr, col, etype=None, ntype=None, num_etypes: int = 1, num_ntypes: int = 1,
                 order=None, edge_weight=None) -> "GraphLayout":
        """The layout of a CSR over incoming edges (``col`` = sources, rows = destinations)."""
        n, e = indptr.shape[0] - 1, col.shape[0]
        col = np.ascontiguousarray(col, dtype=np.int64)
        dst_sorted = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
        t_eid = np.argsort(col, kind="stable").astype(np.int64)
        t_indptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(col, minlength=n), out=t_indptr[1:])
        etype = None if etype is None else np.ascontiguousarray(etype, dtype=np.int64)
        order = np.arange(e, dtype=np.int64) if order is None else order
        edge_weight = None if edge_weight is None else np.ascontiguousarray(edge_weight, dtype=np.float32)
        return cls(n, e, np.ascontiguousarray(indptr, dtype=np.int64), col, t_indptr,
                   np.ascontiguousarray(dst_sorted[t_eid]), t_eid, etype, ntype, num_etypes, num_ntypes, order,
                   edge_weight)

    def nbytes(self) -> int:
        arrays = (self.indptr, self.col, self.t_indptr, self.t_col, self.t_eid, self.etype, self.ntype,
                  self.edge_weight)
        return sum(a.nbytes for a in arrays if a is not None)
