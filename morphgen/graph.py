"""The in-memory graph shared by the data loaders, the IR interpreter and every backend.

A graph is a list of directed edges ``src[e] -> dst[e]`` (COO, int64) with optional edge types,
node types and edge weights.  Layouts (CSR by destination for aggregation over incoming edges,
CSR by source for the transpose) are derived here once and cached, so backends never rebuild
them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Optional

import numpy as np

from .errors import UserError


class GraphError(UserError, ValueError):
    """Malformed graph data; the message names the offending field."""


@dataclass(eq=False)
class Graph:
    num_nodes: int
    src: np.ndarray                      # int64 [E]
    dst: np.ndarray                      # int64 [E]
    etype: Optional[np.ndarray] = None   # int64 [E] or None (one edge type)
    ntype: Optional[np.ndarray] = None   # int64 [N] or None (one node type)
    num_etypes: int = 1
    num_ntypes: int = 1
    meta: dict = field(default_factory=dict)
    edge_weight: Optional[np.ndarray] = None   # float32 [E] or None (programs read it as e.edge_weight)

    def __post_init__(self):
        self.src = np.ascontiguousarray(self.src, dtype=np.int64)
        self.dst = np.ascontiguousarray(self.dst, dtype=np.int64)
        self.validate()

    @property
    def num_edges(self) -> int:
        return int(self.src.shape[0])

    def validate(self) -> None:
        n = self.num_nodes
        if n < 0:
            raise GraphError(f"num_nodes: must be non-negative, got {n}")
        if self.src.ndim != 1 or self.dst.ndim != 1 or self.src.shape != self.dst.shape:
            raise GraphError(f"edge_index: source and destination rows differ in length "
                             f"({self.src.shape} vs {self.dst.shape})")
        for name, arr in (("edge_index[0] (source)", self.src), ("edge_index[1] (destination)", self.dst)):
            if arr.size and (arr.min() < 0 or arr.max() >= n):
                bad = int(np.flatnonzero((arr < 0) | (arr >= n))[0])
                raise GraphError(f"{name}: entry {bad} is {int(arr[bad])}, outside [0, {n})")
        if self.etype is not None:
            self.etype = np.ascontiguousarray(self.etype, dtype=np.int64)
            if self.etype.shape != self.src.shape:
                raise GraphError(f"edge_type: length {self.etype.shape[0]} != number of edges {self.num_edges}")
            if self.etype.size and (self.etype.min() < 0 or self.etype.max() >= self.num_etypes):
                raise GraphError(f"edge_type: values must lie in [0, {self.num_etypes})")
        if self.ntype is not None:
            self.ntype = np.ascontiguousarray(self.ntype, dtype=np.int64)
            if self.ntype.shape != (n,):
                raise GraphError(f"node_type: length {self.ntype.shape[0]} != num_nodes {n}")
            if self.ntype.size and (self.ntype.min() < 0 or self.ntype.max() >= self.num_ntypes):
                raise GraphError(f"node_type: values must lie in [0, {self.num_ntypes})")
        if self.edge_weight is not None:
            w = np.asarray(self.edge_weight)
            if w.ndim != 1 or w.shape != self.src.shape:
                raise GraphError(f"edge_weight: shape {w.shape} != ({self.num_edges},), one weight per edge")
            if not (np.issubdtype(w.dtype, np.floating) or np.issubdtype(w.dtype, np.integer)):
                raise GraphError(f"edge_weight: dtype {w.dtype} is not a number type")
            with np.errstate(over="ignore"):           # past float32's range: refused just below
                self.edge_weight = np.ascontiguousarray(w, dtype=np.float32)
            bad = np.flatnonzero(~np.isfinite(self.edge_weight))
            if bad.size:
                raise GraphError(f"edge_weight: entry {int(bad[0])} is {w[bad[0]]}, not a finite number "
                                 f"(or too large for float32)")

    # -- derived layouts (computed once) -----------------------------------------------
    @cached_property
    def in_degree(self) -> np.ndarray:
        return np.bincount(self.dst, minlength=self.num_nodes).astype(np.int64)

    @cached_property
    def out_degree(self) -> np.ndarray:
        return np.bincount(self.src, minlength=self.num_nodes).astype(np.int64)

    @cached_property
    def by_dst(self):
        """CSR over incoming edges: ``(indptr[N+1], edge_ids[E])`` sorted by destination."""
        return _csr(self.dst, self.num_nodes)

    @cached_property
    def by_src(self):
        """CSR over outgoing edges: ``(indptr[N+1], edge_ids[E])`` sorted by source."""
        return _csr(self.src, self.num_nodes)

    @cached_property
    def rel_degree(self) -> np.ndarray:
        """Per edge: number of incoming edges of dst(e) that share e's type (R-GCN's c_{i,r})."""
        et = self.etype if self.etype is not None else np.zeros(self.num_edges, np.int64)
        key = self.dst * max(self.num_etypes, 1) + et
        _, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
        return counts[inverse].astype(np.int64)


def with_self_loops(graph: Graph) -> Graph:
    """``graph`` with a self loop at every node, after the existing edges (which keep their ids).

    Untyped: an edge v -> v for every node that has none (PyG's add_remaining_self_loops).
    Typed: a loop at every node with an edge type of its own, the next free id (R-GCN's
    self-connection as a relation), so ``num_etypes`` grows by one; a typed edge from a node to
    itself stays one of its own type.  Added loops weigh 1 (PyG's ``fill_value``) where the
    edges have weights."""
    n = graph.num_nodes
    if graph.etype is None and graph.num_etypes <= 1:
        has_loop = np.zeros(n, bool)
        has_loop[graph.src[graph.src == graph.dst]] = True
        missing = np.flatnonzero(~has_loop).astype(np.int64)
        if missing.size == 0:
            return graph
        return Graph(n, np.concatenate([graph.src, missing]), np.concatenate([graph.dst, missing]),
                     ntype=graph.ntype, num_ntypes=graph.num_ntypes, meta=dict(graph.meta),
                     edge_weight=_weights_with_loops(graph, missing.size))
    loops = np.arange(n, dtype=np.int64)
    loop_type = graph.num_etypes
    meta = dict(graph.meta)
    names = meta.get("edge_type_names")
    if isinstance(names, list) and len(names) == loop_type:
        meta["edge_type_names"] = names + ["self"]
    etype = graph.etype if graph.etype is not None else np.zeros(graph.num_edges, np.int64)
    return Graph(n, np.concatenate([graph.src, loops]), np.concatenate([graph.dst, loops]),
                 etype=np.concatenate([etype, np.full(n, loop_type, np.int64)]), num_etypes=loop_type + 1,
                 ntype=graph.ntype, num_ntypes=graph.num_ntypes, meta=meta,
                 edge_weight=_weights_with_loops(graph, n))


def _weights_with_loops(graph: Graph, loops: int) -> Optional[np.ndarray]:
    if graph.edge_weight is None:
        return None
    return np.concatenate([graph.edge_weight, np.ones(loops, np.float32)])


def _csr(keys: np.ndarray, n: int):
    order = np.argsort(keys, kind="stable").astype(np.int64)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=indptr[1:])
    return indptr, order
