"""Phase III: load-aware greedy for pathological graphs (huge stars, hubs heavier than a part).

Vertices in decreasing load order, each to the part with the least load so far (Morphling
eq. 7).  Placing hubs first is what keeps one part from becoming the straggler.  It ignores
the cut entirely; it is the fallback that always balances as well as the hubs allow.
"""
from __future__ import annotations

import heapq

import numpy as np


def greedy_partition(loads: np.ndarray, num_parts: int, *, seed: int) -> np.ndarray:
    n = loads.shape[0]
    assignment = np.zeros(n, np.int64)
    if n == 0 or num_parts == 1:
        return assignment
    tie = np.random.default_rng(seed).permutation(n)
    order = np.lexsort((tie, -loads))
    heap = [(0, p) for p in range(num_parts)]   # (load so far, part): ties go to the lower part id
    heapq.heapify(heap)
    load_list = loads.tolist()
    out = assignment  # local alias for the loop
    for v in order.tolist():
        total, p = heapq.heappop(heap)
        out[v] = p
        heapq.heappush(heap, (total + load_list[v], p))
    return assignment
