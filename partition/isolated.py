"""Nodes with no edge to any other node: free to place, so they are placed last, to level loads.

They add nothing to the cut wherever they go.  Left inside the METIS input they end up
wherever METIS dumps them, typically all in one part (on the 1M-edge R-MAT graph, 42% of the
nodes are isolated and METIS put all of them in one of 16 parts).  That part then fills its
load quota with nodes that carry no aggregation, and every other part carries more in-edges
than the mean.  Phase I therefore gives them weight 0 in METIS, so METIS balances the nodes
that do have edges, and this module then places the free nodes, heaviest first, each into the
part with the least load (then the fewest nodes): the maximum load can only fall, and the node
counts even out as far as the loads allow.
"""
from __future__ import annotations

import heapq

import numpy as np

from .adjacency import SymmetricAdjacency


def free_nodes(adj: SymmetricAdjacency) -> np.ndarray:
    """Boolean mask of nodes without an edge to another node (self loops do not count)."""
    return np.diff(adj.indptr) == 0


def place_free_nodes(assignment: np.ndarray, loads: np.ndarray, free: np.ndarray,
                     num_parts: int) -> np.ndarray:
    """Re-place the `free` nodes of `assignment`: heaviest first, each to the part with the least
    load so far (ties: fewest nodes, then lowest part id); the other nodes keep their parts."""
    a = np.asarray(assignment, np.int64).copy()
    idx = np.flatnonzero(free)
    if idx.size == 0 or num_parts == 1:
        return a
    core = ~free
    part_load = np.bincount(a[core], weights=loads[core], minlength=num_parts).astype(np.int64)
    part_nodes = np.bincount(a[core], minlength=num_parts)
    heap = [(int(part_load[p]), int(part_nodes[p]), p) for p in range(num_parts)]
    heapq.heapify(heap)
    order = idx[np.lexsort((idx, -loads[idx]))]
    load_list = loads[order].tolist()
    for v, w in zip(order.tolist(), load_list):
        total, count, p = heapq.heappop(heap)
        a[v] = p
        heapq.heappush(heap, (total + w, count + 1, p))
    return a
