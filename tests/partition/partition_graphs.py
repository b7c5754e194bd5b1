"""Crafted graphs and the layout invariant checker shared by the partition tests."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from morphgen.graph import Graph

DATASETS = Path(__file__).resolve().parents[3] / "shared" / "datasets"


def undirected(n, src, dst) -> Graph:
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    return Graph(n, np.concatenate([src, dst]), np.concatenate([dst, src]))


def grid(rows: int, cols: int) -> Graph:
    """Well-connected: a 2-D grid, where METIS finds balanced low cuts."""
    ids = np.arange(rows * cols).reshape(rows, cols)
    s = np.concatenate([ids[:, :-1].ravel(), ids[:-1, :].ravel()])
    d = np.concatenate([ids[:, 1:].ravel(), ids[1:, :].ravel()])
    return undirected(rows * cols, s, d)


def cliques(sizes) -> Graph:
    s, d, off = [], [], 0
    for k in sizes:
        i, j = np.triu_indices(k, 1)
        s.append(i + off)
        d.append(j + off)
        off += k
    return undirected(off, np.concatenate(s), np.concatenate(d))


def stars(sizes) -> Graph:
    """Disjoint stars; star i has a hub with sizes[i] - 1 leaves, edges both ways."""
    s, d, off = [], [], 0
    for k in sizes:
        s.append(np.full(k - 1, off))
        d.append(np.arange(off + 1, off + k))
        off += k
    return undirected(off, np.concatenate(s), np.concatenate(d))


def messy(n=60, m=300, seed=0) -> Graph:
    """Directed, asymmetric, with self loops, duplicate edges and isolated nodes (ids >= n-5)."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n - 5, m)
    dst = rng.integers(0, n - 5, m)
    src = np.concatenate([src, [3, 3, 7, 7, 7], src[:10]])     # self loops, then duplicates
    dst = np.concatenate([dst, [3, 3, 7, 8, 8], dst[:10]])
    return Graph(n, src, dst)


def check_layouts(graph: Graph, assignment: np.ndarray, layouts) -> None:
    """Every invariant the MPI runtime relies on; raises AssertionError naming the broken one."""
    n, k = graph.num_nodes, len(layouts)
    src, dst = graph.src, graph.dst
    # every node owned exactly once, by the part the assignment names
    owned_all = np.concatenate([l.owned for l in layouts]) if layouts else np.zeros(0, np.int64)
    assert np.array_equal(np.sort(owned_all), np.arange(n)), "a node is owned zero or several times"
    for p, l in enumerate(layouts):
        assert l.part == p and l.num_parts == k and l.num_global_nodes == n
        assert np.array_equal(l.owned, np.flatnonzero(assignment == p)), f"part {p}: wrong owned set"
        # ghosts are exactly the remote in-neighbours
        into_p = assignment[dst] == p
        remote = np.unique(src[into_p & (assignment[src] != p)])
        assert np.array_equal(np.sort(l.ghosts), remote), f"part {p}: ghosts are not the remote in-neighbours"
        assert np.array_equal(l.ghost_owner, assignment[l.ghosts])
        order = np.lexsort((l.ghosts, l.ghost_owner))
        assert np.array_equal(order, np.arange(l.num_ghosts)), f"part {p}: ghosts not grouped by owner, sorted"
        # local ids: owned first, then ghosts
        l2g = l.local_to_global
        assert np.array_equal(l2g[:l.num_owned], l.owned)
        if l2g.size:
            assert np.array_equal(l.to_local(l2g), np.arange(l2g.size))
        # the local CSR reproduces exactly the in-edges of owned nodes
        assert l.indptr.shape == (l.num_owned + 1,) and l.indptr[0] == 0
        assert np.all(np.diff(l.indptr) >= 0) and l.indptr[-1] == l.indices.size == l.edge_ids.size
        rows = np.repeat(np.arange(l.num_owned), np.diff(l.indptr))
        assert np.array_equal(l2g[rows], dst[l.edge_ids]), f"part {p}: CSR row is not the edge's destination"
        assert np.array_equal(l2g[l.indices], src[l.edge_ids]), f"part {p}: CSR column is not the edge's source"
        assert np.array_equal(np.sort(l.edge_ids), np.flatnonzero(into_p)), f"part {p}: wrong edge set"
        # receive lists tile the ghost region, one contiguous slice per owner
        covered = np.concatenate(list(l.recv.values())) if l.recv else np.zeros(0, np.int64)
        assert np.array_equal(covered, np.arange(l.num_owned, l.num_local)), f"part {p}: recv lists do not tile ghosts"
    # send and receive lists match pairwise, sorted by global id
    for p, l in enumerate(layouts):
        assert p not in l.send and p not in l.recv, f"part {p} exchanges with itself"
        for q in range(k):
            sent, got = l.send_global(q), layouts[q].recv_global(p)
            assert np.array_equal(sent, got), f"send {p}->{q} does not match receive"
            assert np.all(np.diff(sent) > 0), f"send {p}->{q} not strictly increasing"
            assert (q in l.send) == (p in layouts[q].recv)
            assert np.all(assignment[sent] == p)
