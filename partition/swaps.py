"""Cut refinement that may trade load: single moves where there is room, paired swaps where not.

Under a tight load bound every part sits near the cap, so ``refine.refine_cut`` (single moves
into parts with room) stops early: a vertex that would lower the cut has nowhere to go.  Here
a vertex u that would leave part p for q but does not fit waits in a queue for the pair
(p, q); a later vertex v that wants to leave q for p takes the best waiting u that makes the
pair pay (gain(u) + gain(v) - 2 w(u, v) > 0, w(u, v) the weight of an edge between them) and
keeps both parts within the cap.  The two loads then change by only w(u) - w(v).

Each round starts from the connection matrix ``conn[v, p]`` (edge weight from v into part p).
When a vertex or pair moves, it and its neighbours are locked for the rest of the round, so
every gain counted is the gain realised: the cut falls by exactly the sum of accepted gains,
and it strictly falls in every round that moves anything.
"""
from __future__ import annotations

from collections import defaultdict, deque

import numpy as np

from .adjacency import SymmetricAdjacency
from .refine import _apply_moves, refinement_state

PARTNERS_TRIED = 8        # waiting vertices examined per arriving vertex; bounds the work per round


def _edge_weight(indptr, indices, weights, u: int, v: int) -> int:
    lo, hi = indptr[u], indptr[u + 1]
    i = lo + int(np.searchsorted(indices[lo:hi], v))
    return int(weights[i]) if i < hi and indices[i] == v else 0


def refine_with_swaps(adj: SymmetricAdjacency, loads: np.ndarray, assignment: np.ndarray, num_parts: int,
                      *, bound: float, max_rounds: int = 20) -> np.ndarray:
    """Lower the cut by single moves and pairwise swaps of boundary vertices.

    A part never ends a move above max(mean x `bound`, its load before the move), so no part
    that is within the bound leaves it and a part above it only sheds load.  The cut never
    rises.  Deterministic: candidates are processed in a fixed order (gain, then vertex id).
    """
    a = np.asarray(assignment, np.int64).copy()
    n = a.shape[0]
    if n == 0 or num_parts == 1:
        return a
    loads, cap, csr, conn, part_load = refinement_state(adj, loads, a, num_parts, bound)
    part_load = part_load.astype(np.float64)
    indptr, indices, weights = adj.indptr, adj.indices, adj.weights
    rows = np.arange(n)
    for _ in range(max_rounds):
        own = conn[rows, a]
        gain_all = conn - own[:, None]
        gain_all[rows, a] = np.iinfo(np.int64).min        # staying is not a move
        dest = np.argmax(gain_all, axis=1)
        gain = gain_all[rows, dest]
        touching = conn[rows, dest] > 0                   # boundary vertices only
        if not touching.any():
            break
        best_gain = gain[touching].max()
        if best_gain <= 0:
            break
        # a vertex can only take part in a paying swap if its gain beats minus the best gain
        cand = np.flatnonzero(touching & (gain > -best_gain))
        order = cand[np.lexsort((cand, -gain[cand]))]
        moved = _one_round(order, a, dest, gain, loads, part_load, cap, indptr, indices, weights)
        if not moved:
            break
        mv = np.array([m[0] for m in moved], np.int64)
        ms = np.array([m[1] for m in moved], np.int64)
        md = np.array([m[2] for m in moved], np.int64)
        _apply_moves(csr, conn, a, mv, ms, md, num_parts)
    return a


def _one_round(order, a, dest, gain, loads, part_load, cap, indptr, indices, weights):
    """Pick the moves of one round; updates part_load, returns [(vertex, from, to)]."""
    locked = np.zeros(a.shape[0], bool)
    waiting: dict = defaultdict(deque)                    # (from, to) -> vertices, best gain first
    load_l = part_load.tolist()
    a_l, dest_l, gain_l, w_l = a.tolist(), dest.tolist(), gain.tolist(), loads.tolist()
    moved = []

    def fits(p, new_load):
        return new_load <= cap + 1e-9 or new_load <= load_l[p]

    def lock(v):
        locked[indices[indptr[v]:indptr[v + 1]]] = True
        locked[v] = True

    for v in order.tolist():
        if locked[v]:
            continue
        s, d, g, w = a_l[v], dest_l[v], gain_l[v], w_l[v]
        if g > 0 and fits(d, load_l[d] + w):
            load_l[s] -= w
            load_l[d] += w
            lock(v)
            moved.append((v, s, d))
            continue
        partner = _best_partner(waiting[(d, s)], v, s, d, g, w, locked, gain_l, w_l, load_l, fits,
                                indptr, indices, weights)
        if partner is None:
            waiting[(s, d)].append(v)
            continue
        wu = w_l[partner]
        load_l[s] += wu - w
        load_l[d] += w - wu
        lock(v)
        lock(partner)
        moved.append((v, s, d))
        moved.append((partner, d, s))
    part_load[:] = load_l
    return moved


def _best_partner(queue, v, s, d, g, w, locked, gain_l, w_l, load_l, fits, indptr, indices, weights):
    """The first waiting vertex (d -> s) whose swap with v lowers the cut and fits both parts."""
    while queue and locked[queue[0]]:
        queue.popleft()                                   # a neighbour moved: its gain is stale
    for i, u in enumerate(queue):
        if i >= PARTNERS_TRIED:
            break
        if locked[u]:
            continue
        pair_gain = gain_l[u] + g - 2 * _edge_weight(indptr, indices, weights, u, v)
        if pair_gain <= 0:
            if gain_l[u] + g <= 0:
                break                                     # the rest of the queue gains even less
            continue
        wu = w_l[u]
        if fits(s, load_l[s] + wu - w) and fits(d, load_l[d] + w - wu):
            queue.remove(u)
            return u
    return None
