"""Balance repair and cut refinement of an existing partition (Fiduccia-Mattheyses-like, batched).

Vertex-balanced METIS finds a low cut but, on power-law graphs, leaves one part with several
times the mean edge load.  ``repair_balance`` starts from such a partition and moves vertices
out of overloaded parts into parts with room, cheapest first: the price of a move is the cut
it adds per unit of load it removes, so a move pays for what it buys.  ``refine_cut`` then
moves vertices that lower the cut without pushing any part over the load cap.

Both work in rounds over numpy arrays.  The connection matrix ``conn[v, p]`` (edge weight from
v into part p) is built once with one sparse product and updated for the moved vertices only.
Within a round the moves are chosen sequentially from a sorted candidate list, which keeps the
per-round bookkeeping (excess per source, room per destination) exact.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .adjacency import SymmetricAdjacency


def _connection(csr: sp.csr_matrix, assignment: np.ndarray, num_parts: int) -> np.ndarray:
    n = assignment.shape[0]
    onehot = sp.csr_matrix((np.ones(n, np.int64), (np.arange(n), assignment)), shape=(n, num_parts))
    return np.asarray((csr @ onehot).todense(), dtype=np.int64)


def _apply_moves(csr: sp.csr_matrix, conn: np.ndarray, assignment: np.ndarray,
                 moved: np.ndarray, old: np.ndarray, new: np.ndarray, num_parts: int) -> None:
    """Move `moved` from parts `old` to `new` and update conn for their neighbours."""
    assignment[moved] = new
    m = moved.shape[0]
    rows = np.concatenate([np.arange(m), np.arange(m)])
    delta = sp.csr_matrix((np.concatenate([-np.ones(m, np.int64), np.ones(m, np.int64)]),
                           (rows, np.concatenate([old, new]))), shape=(m, num_parts))
    # csr is symmetric, so the columns of the moved vertices are their rows
    conn += np.asarray((csr[:, moved] @ delta).todense(), dtype=np.int64)


def load_cap(loads: np.ndarray, num_parts: int, bound: float) -> float:
    """The largest part load that keeps max/mean within `bound`."""
    return float(loads.sum()) / num_parts * bound


def refinement_state(adj: SymmetricAdjacency, loads: np.ndarray, assignment: np.ndarray, num_parts: int,
                     bound: float) -> tuple:
    """What every refinement starts from: int64 loads, the load cap, the scipy CSR, each vertex's
    connection weight to every part and the part loads (of `assignment`, which it does not copy)."""
    loads = np.asarray(loads, np.int64)
    csr = adj.as_scipy()
    part_load = np.bincount(assignment, weights=loads, minlength=num_parts)
    return loads, load_cap(loads, num_parts, bound), csr, _connection(csr, assignment, num_parts), part_load


def repair_balance(adj: SymmetricAdjacency, loads: np.ndarray, assignment: np.ndarray, num_parts: int, *,
                   bound: float, batch_fraction: float = 0.25, max_rounds: int = 200) -> np.ndarray:
    """Move vertices out of parts whose load exceeds mean x `bound`, choosing the smallest cut
    increase per unit of load moved, until every part is within the bound (or no move helps).

    Never moves a vertex into a part where it would exceed the cap, so the maximum part load
    never rises above max(cap, the starting maximum).  Each round moves at most
    `batch_fraction` of the remaining excess of every part, so that after a round the costs
    are re-evaluated and a neighbourhood that started to move can follow as a whole.
    """
    a = np.asarray(assignment, np.int64).copy()
    n = a.shape[0]
    if n == 0 or num_parts == 1:
        return a
    loads, cap, csr, conn, part_load = refinement_state(adj, loads, a, num_parts, bound)
    for _ in range(max_rounds):
        excess = part_load - cap
        over = excess > 1e-9
        if not over.any():
            break
        room = np.where(over, 0.0, cap - part_load)
        cand = np.flatnonzero(over[a])
        cl = loads[cand]
        cost = (conn[cand, a[cand]][:, None] - conn[cand]).astype(np.float64)
        cost[:, over] = np.inf
        cost[room[None, :] < cl[:, None]] = np.inf
        dest = np.argmin(cost, axis=1)
        best = cost[np.arange(cand.size), dest]
        ok = np.isfinite(best)
        if not ok.any():
            break                               # nothing fits anywhere: the bound cannot be reached this way
        cand, dest, best, cl = cand[ok], dest[ok], best[ok], cl[ok]
        # cost per unit of load; ties: heavier first (fewer moves), then vertex id (determinism)
        order = np.lexsort((cand, -cl, best / np.maximum(cl, 1)))
        quota = np.maximum(excess * batch_fraction, np.minimum(excess, loads.max())).clip(min=0)
        moved_src, moved_dst, moved_v = [], [], []
        quota_l, room_l = quota.tolist(), room.tolist()
        src_l, dst_l, cl_l, v_l = a[cand].tolist(), dest.tolist(), cl.tolist(), cand.tolist()
        remaining = float(np.sum(quota[over]))
        for i in order.tolist():
            s, d, w = src_l[i], dst_l[i], cl_l[i]
            if quota_l[s] <= 0 or room_l[d] < w:
                continue
            quota_l[s] -= w
            room_l[d] -= w
            remaining -= min(w, remaining)
            moved_v.append(v_l[i]); moved_src.append(s); moved_dst.append(d)
            if remaining <= 0:
                break
        if not moved_v:
            break
        mv, ms, md = np.array(moved_v), np.array(moved_src), np.array(moved_dst)
        _apply_moves(csr, conn, a, mv, ms, md, num_parts)
        np.add.at(part_load, ms, -loads[mv])
        np.add.at(part_load, md, loads[mv])
    return a


def refine_cut(adj: SymmetricAdjacency, loads: np.ndarray, assignment: np.ndarray, num_parts: int, *,
               bound: float, max_rounds: int = 20) -> np.ndarray:
    """Greedy boundary refinement: move vertices to the neighbouring part that lowers the cut the
    most, only where the destination stays within mean x `bound`.  Within a round no two moved
    vertices are adjacent, so every gain counted is a gain realised: the cut strictly falls
    each round, and no part that was within the cap leaves it."""
    a = np.asarray(assignment, np.int64).copy()
    n = a.shape[0]
    if n == 0 or num_parts == 1:
        return a
    loads, cap, csr, conn, part_load = refinement_state(adj, loads, a, num_parts, bound)
    indptr, indices = adj.indptr, adj.indices
    for _ in range(max_rounds):
        own = conn[np.arange(n), a]
        gain_all = conn - own[:, None]
        room = cap - part_load
        gain_all[room[None, :] < loads[:, None]] = 0     # destinations without room are out
        dest = np.argmax(gain_all, axis=1)
        gain = gain_all[np.arange(n), dest]
        cand = np.flatnonzero(gain > 0)
        if cand.size == 0:
            break
        order = cand[np.lexsort((cand, -gain[cand]))]
        locked = np.zeros(n, bool)
        room_l = room.tolist()
        moved_v, moved_src, moved_dst = [], [], []
        dest_l, a_l, loads_l = dest.tolist(), a.tolist(), loads.tolist()
        for v in order.tolist():
            if locked[v]:
                continue
            d, w = dest_l[v], loads_l[v]
            if room_l[d] < w:
                continue
            room_l[d] -= w
            room_l[a_l[v]] += w
            locked[indices[indptr[v]:indptr[v + 1]]] = True
            locked[v] = True
            moved_v.append(v); moved_src.append(a_l[v]); moved_dst.append(d)
        if not moved_v:
            break
        mv, ms, md = np.array(moved_v), np.array(moved_src), np.array(moved_dst)
        _apply_moves(csr, conn, a, mv, ms, md, num_parts)
        np.add.at(part_load, ms, -loads[mv])
        np.add.at(part_load, md, loads[mv])
    return a
