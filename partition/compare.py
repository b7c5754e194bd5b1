"""Run several strategies (and vertex-balanced METIS) on one graph and collect quality rows."""
from __future__ import annotations

import time

from .errors import PartitionError
from .hierarchical import partition_graph
from .metis_phase import vertex_balanced_metis
from .adjacency import symmetric_adjacency
from .quality import quality_report

REFERENCE = "vertex-metis"


def reference_assignment(graph, num_parts: int, seed: int = 0):
    import numpy as np
    if graph.num_nodes == 0:
        return np.zeros(0, np.int64)
    return vertex_balanced_metis(symmetric_adjacency(graph), num_parts, seed=seed)


def evaluate(graph, num_parts: int, strategy: str, *, feature_width: int = 128, seed: int = 0,
             imbalance: float = 1.03, max_imbalance: float = 1.10) -> tuple[dict, object]:
    """One row: the JSON fields of the quality report plus strategy/phase/reason.

    Returns (row, assignment); a forced strategy that cannot deliver gives a row with "error".
    """
    row = {"parts": num_parts, "strategy": strategy}
    if strategy == REFERENCE:
        started = time.perf_counter()
        assignment = reference_assignment(graph, num_parts, seed)
        seconds = time.perf_counter() - started
        row.update(phase="reference", reason="METIS balancing vertex counts (pymetis defaults)")
    else:
        try:
            result = partition_graph(graph, num_parts, strategy=strategy, seed=seed,
                                     imbalance=imbalance, max_imbalance=max_imbalance)
        except PartitionError as exc:
            if strategy == "auto":
                raise
            row.update(phase="failed", error=str(exc))
            return row, None
        assignment, seconds = result.assignment, result.seconds
        row.update(phase=result.phase, reason=result.reason,
                   attempts=[a.describe() for a in result.attempts])
    report = quality_report(graph, assignment, num_parts, feature_width=feature_width, seconds=seconds)
    row.update(report.to_dict())
    return row, assignment
