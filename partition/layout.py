"""What one MPI rank needs from a partition: owned nodes, ghosts, local ids, local CSR, halo lists.

Local numbering (Morphling §IV-E2): owned nodes first, in increasing global id; then the ghosts
(remote in-neighbours of owned nodes), grouped by owning part and increasing global id inside
each group.  So the halo received from part q is one contiguous slice of the ghost region and
unpacking is a copy.  The local CSR has one row per owned node over its incoming edges, with
column ids in local numbering: aggregation reads owned rows and ghost rows alike.

Halo lists: part p sends to part q the features of p's owned nodes that are ghosts on q, in
increasing global id; q receives them in the same order into its ghost slice for p.  Both
sides hold the matching lists, so no message needs a header.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .errors import PartitionError, check_assignment, check_graph, check_num_parts


@dataclass(eq=False)
class PartLayout:
    part: int
    num_parts: int
    num_global_nodes: int
    owned: np.ndarray           # int64 [n_owned] global ids, increasing
    ghosts: np.ndarray          # int64 [n_ghost] global ids, grouped by owner, increasing within a group
    ghost_owner: np.ndarray     # int64 [n_ghost] part owning each ghost
    indptr: np.ndarray          # int64 [n_owned + 1] local CSR over incoming edges
    indices: np.ndarray         # int64 [nnz] local id of each edge's source
    edge_ids: np.ndarray        # int64 [nnz] global edge id (for edge types / edge data)
    send: dict = field(default_factory=dict)   # peer -> int64 local ids of owned nodes to send
    recv: dict = field(default_factory=dict)   # peer -> int64 local ids (in the ghost region) to fill

    @property
    def num_owned(self) -> int:
        return int(self.owned.shape[0])

    @property
    def num_ghosts(self) -> int:
        return int(self.ghosts.shape[0])

    @property
    def num_local(self) -> int:
        return self.num_owned + self.num_ghosts

    @property
    def local_to_global(self) -> np.ndarray:
        return np.concatenate([self.owned, self.ghosts])

    def to_local(self, global_ids) -> np.ndarray:
        """Global ids -> local ids; every id must be owned or a ghost here."""
        g = np.asarray(global_ids, dtype=np.int64)
        l2g = self.local_to_global
        order = np.argsort(l2g, kind="stable")
        pos = np.searchsorted(l2g[order], g)
        pos = np.minimum(pos, max(l2g.shape[0] - 1, 0))
        if l2g.shape[0] == 0 or np.any(l2g[order][pos] != g):
            missing = g if l2g.shape[0] == 0 else g[l2g[order][pos] != g]
            raise PartitionError(f"global id {int(missing.flat[0])} is neither owned by nor a ghost on part {self.part}")
        return order[pos]

    def send_global(self, peer: int) -> np.ndarray:
        return self.owned[self.send.get(peer, np.zeros(0, np.int64))]

    def recv_global(self, peer: int) -> np.ndarray:
        return self.local_to_global[self.recv.get(peer, np.zeros(0, np.int64))]


def build_layouts(graph, assignment, num_parts: int) -> list[PartLayout]:
    """Per-part layouts for a whole partition (built together: send lists need every part)."""
    check_graph(graph)
    num_parts = check_num_parts(num_parts)
    assignment = check_assignment(assignment, graph.num_nodes, num_parts)
    n = graph.num_nodes
    src, dst = graph.src, graph.dst

    # In-edges grouped by the part of their destination, then by destination, stable in edge id.
    edge_order = np.lexsort((dst, assignment[dst])) if dst.size else np.zeros(0, np.int64)
    edge_part = assignment[dst[edge_order]]
    edge_bounds = np.searchsorted(edge_part, np.arange(num_parts + 1))
    node_order = np.argsort(assignment, kind="stable")      # owned lists come out increasing
    node_bounds = np.searchsorted(assignment[node_order], np.arange(num_parts + 1))

    scratch = np.full(n, -1, np.int64)   # global -> local of the part being built
    layouts = []
    for p in range(num_parts):
        owned = node_order[node_bounds[p]:node_bounds[p + 1]].astype(np.int64)
        e = edge_order[edge_bounds[p]:edge_bounds[p + 1]].astype(np.int64)
        sources = src[e]
        remote = np.unique(sources[assignment[sources] != p])
        owner = assignment[remote]
        by_owner = np.argsort(owner, kind="stable")          # stable: ids stay increasing per owner
        ghosts, ghost_owner = remote[by_owner], owner[by_owner]

        n_own = owned.shape[0]
        scratch[owned] = np.arange(n_own)
        scratch[ghosts] = n_own + np.arange(ghosts.shape[0])
        rows = scratch[dst[e]]
        indptr = np.zeros(n_own + 1, np.int64)
        np.cumsum(np.bincount(rows, minlength=n_own), out=indptr[1:])
        indices = scratch[sources]
        scratch[owned] = -1
        scratch[ghosts] = -1

        recv = {}
        peer_bounds = np.searchsorted(ghost_owner, np.arange(num_parts + 1))
        for q in range(num_parts):
            if peer_bounds[q + 1] > peer_bounds[q]:
                recv[q] = np.arange(n_own + peer_bounds[q], n_own + peer_bounds[q + 1], dtype=np.int64)
        layouts.append(PartLayout(p, num_parts, n, owned, ghosts, ghost_owner, indptr,
                                  indices.astype(np.int64), e, {}, recv))

    # Send lists mirror the receive lists: what q receives from p, p sends to q, same order.
    for q, layout in enumerate(layouts):
        for p, slots in layout.recv.items():
            wanted = layout.local_to_global[slots]
            layouts[p].send[q] = np.searchsorted(layouts[p].owned, wanted).astype(np.int64)
    for layout in layouts:
        layout.send = dict(sorted(layout.send.items()))
    return layouts
