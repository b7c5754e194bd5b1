"""Partition quality: what halo exchange will cost and how evenly the work is spread.

Definitions (kept in docs/partition.md):
- edge cut: number of directed edges src->dst with part(src) != part(dst);
- ghosts of part p: distinct nodes outside p with an edge into p (they are received each layer);
- halo bytes per exchange: total ghosts x feature width x bytes per value (every ghost row
  crosses the network once per exchange);
- load imbalance: max / mean over the K parts of in-edges owned (edges), owned nodes (nodes)
  and of the balanced load (in-degree + 1 by default).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .errors import PartitionError, check_assignment, check_graph, check_num_parts
from .loads import LoadModel, imbalance, part_loads


@dataclass
class QualityReport:
    parts: int
    edge_cut: int
    cut_ratio: float                 # edge_cut / number of edges
    ghost_nodes: int                 # summed over parts
    ghosts_per_part: list
    halo_bytes: int                  # per exchange, all parts
    halo_bytes_per_part: list        # received per exchange
    edges_per_part: list
    nodes_per_part: list
    load_imbalance_edges: float
    load_imbalance_nodes: float
    load_imbalance_load: float
    seconds: float

    def to_dict(self) -> dict:
        return asdict(self)


def quality_report(graph, assignment, num_parts: int, *, feature_width: int = 128,
                   bytes_per_value: int = 4, seconds: float = 0.0,
                   load_model: LoadModel | None = None) -> QualityReport:
    check_graph(graph)
    num_parts = check_num_parts(num_parts)
    a = check_assignment(assignment, graph.num_nodes, num_parts)
    for name, value in (("feature_width", feature_width), ("bytes_per_value", bytes_per_value)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise PartitionError(f"{name}: must be an integer >= 1, got {value!r}")
    src_part, dst_part = a[graph.src], a[graph.dst]
    crossing = src_part != dst_part
    edge_cut = int(np.count_nonzero(crossing))
    # a ghost is a distinct (remote source, receiving part) pair
    pairs = np.unique(graph.src[crossing] * num_parts + dst_part[crossing])
    ghosts = np.bincount(pairs % num_parts, minlength=num_parts).astype(np.int64)
    edges = np.bincount(dst_part, minlength=num_parts).astype(np.int64)
    nodes = np.bincount(a, minlength=num_parts).astype(np.int64)
    loads = part_loads(a, (load_model or LoadModel()).vertex_loads(graph), num_parts)
    row_bytes = int(feature_width) * int(bytes_per_value)
    return QualityReport(
        parts=num_parts, edge_cut=edge_cut,
        cut_ratio=edge_cut / graph.num_edges if graph.num_edges else 0.0,
        ghost_nodes=int(ghosts.sum()), ghosts_per_part=ghosts.tolist(),
        halo_bytes=int(ghosts.sum()) * row_bytes, halo_bytes_per_part=(ghosts * row_bytes).tolist(),
        edges_per_part=edges.tolist(), nodes_per_part=nodes.tolist(),
        load_imbalance_edges=imbalance(edges), load_imbalance_nodes=imbalance(nodes),
        load_imbalance_load=imbalance(loads), seconds=float(seconds))
