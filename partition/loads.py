"""Per-vertex computational load and the balance measures built on it.

The cost of one GNN layer on a rank is dominated by aggregation over the incoming edges of the
nodes it owns (Morphling eq. 9), so a vertex weighs its in-degree plus a constant for the
per-node dense work.  Balancing this load, not the vertex count, is what keeps ranks in step.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import PartitionError

DEGREE_KINDS = ("in", "out", "both")


@dataclass(frozen=True)
class LoadModel:
    """load(v) = degree(v) + self_weight, with degree counted over in-, out- or all edges."""
    degree: str = "in"
    self_weight: int = 1

    def __post_init__(self):
        if self.degree not in DEGREE_KINDS:
            raise PartitionError(f"load degree: must be one of {', '.join(DEGREE_KINDS)}, got {self.degree!r}")
        if isinstance(self.self_weight, bool) or not isinstance(self.self_weight, (int, np.integer)) \
                or self.self_weight < 0:
            raise PartitionError(f"load self_weight: must be a non-negative integer, got {self.self_weight!r}")

    def vertex_loads(self, graph) -> np.ndarray:
        n = graph.num_nodes
        deg = np.zeros(n, np.int64)
        if self.degree in ("in", "both"):
            deg += np.bincount(graph.dst, minlength=n)
        if self.degree in ("out", "both"):
            deg += np.bincount(graph.src, minlength=n)
        return deg + int(self.self_weight)


def imbalance(per_part: np.ndarray) -> float:
    """max / mean over all parts (empty parts count); 1.0 when there is nothing to balance."""
    per_part = np.asarray(per_part, dtype=np.float64)
    total = per_part.sum()
    if per_part.size == 0 or total <= 0:
        return 1.0
    return float(per_part.max() / (total / per_part.size))


def part_loads(assignment: np.ndarray, loads: np.ndarray, num_parts: int) -> np.ndarray:
    return np.bincount(assignment, weights=loads, minlength=num_parts).astype(np.int64)


def imbalance_lower_bound(loads: np.ndarray, num_parts: int) -> float:
    """No partition can do better than the heaviest single vertex allows."""
    total = float(loads.sum())
    if total <= 0 or loads.size == 0:
        return 1.0
    return max(1.0, float(loads.max()) / (total / num_parts))
