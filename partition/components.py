"""Phase II: connected components packed into K bins by best-fit decreasing on edge load.

Components never cross a bin boundary unless a single component is heavier than a bin; only
those are split, into consecutive pieces of their breadth-first order (so each piece stays a
connected-ish neighbourhood).  Zero cut between whole components is the point of this phase.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse.csgraph as csgraph

from .adjacency import SymmetricAdjacency


def _pieces_of(start: int, adj_csr, loads: np.ndarray, capacity: float) -> list[np.ndarray]:
    """Cut one over-heavy component into pieces of at most `capacity` load, in BFS order."""
    order = csgraph.breadth_first_order(adj_csr, start, directed=False, return_predecessors=False)
    order = order.astype(np.int64)
    cumulative = np.cumsum(loads[order])
    # piece index of each node: how many whole capacities precede it
    piece = ((cumulative - loads[order]) // capacity).astype(np.int64)
    bounds = np.flatnonzero(np.diff(piece)) + 1
    return [p for p in np.split(order, bounds) if p.size]


def component_packing(adj: SymmetricAdjacency, loads: np.ndarray, num_parts: int, *,
                      tolerance: float, seed: int) -> np.ndarray:
    """Best fit: each item goes to the fullest bin it still fits in (bin limit = mean load x
    tolerance); an item that fits nowhere goes to the emptiest bin."""
    n = adj.num_nodes
    if n == 0 or num_parts == 1:
        return np.zeros(n, np.int64)
    csr = adj.as_scipy()
    num_comp, labels = csgraph.connected_components(csr, directed=False)
    comp_load = np.bincount(labels, weights=loads, minlength=num_comp)
    mean = float(loads.sum()) / num_parts
    capacity = max(mean, 1.0)

    # Items to pack: whole components, or BFS pieces of components heavier than a bin.
    order_by_label = np.argsort(labels, kind="stable")
    starts = np.concatenate([[0], np.cumsum(np.bincount(labels, minlength=num_comp))])
    items: list[np.ndarray] = []
    for c in range(num_comp):
        nodes = order_by_label[starts[c]:starts[c + 1]]
        if comp_load[c] > capacity:
            # start BFS at the component's heaviest vertex so hubs lead a piece
            start = int(nodes[np.argmax(loads[nodes])])
            items.extend(_pieces_of(start, csr, loads, capacity))
        else:
            items.append(nodes)

    item_load = np.array([int(loads[it].sum()) for it in items], dtype=np.int64)
    # Decreasing load; ties broken by a seeded permutation so the result is reproducible.
    tie = np.random.default_rng(seed).permutation(len(items))
    order = np.lexsort((tie, -item_load))

    limit = capacity * tolerance
    bins = [0] * num_parts
    assignment = np.empty(n, np.int64)
    for i in order.tolist():
        w = int(item_load[i])
        best, best_room = -1, None
        for b in range(num_parts):
            room = limit - bins[b] - w
            if room >= 0 and (best_room is None or room < best_room):
                best, best_room = b, room
        if best < 0:  # fits nowhere: the emptiest bin takes it
            best = min(range(num_parts), key=lambda b: (bins[b], b))
        bins[best] += w
        assignment[items[i]] = best
    return assignment
