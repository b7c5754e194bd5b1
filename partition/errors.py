"""The one error type of the partitioner and the input checks that raise it."""
from __future__ import annotations

import numpy as np

from morphgen.errors import UserError


class PartitionError(UserError, ValueError):
    """Bad partitioner input or a corrupt saved partition; the message names the offending field."""


def check_graph(graph) -> None:
    """Re-check a Graph's edge arrays: they may have been mutated after the Graph validated them."""
    n = graph.num_nodes
    if not isinstance(n, (int, np.integer)) or n < 0:
        raise PartitionError(f"num_nodes: must be a non-negative integer, got {n!r}")
    src, dst = np.asarray(graph.src), np.asarray(graph.dst)
    if src.ndim != 1 or dst.ndim != 1 or src.shape != dst.shape:
        raise PartitionError(f"edge_index: source and destination rows differ in shape "
                             f"({src.shape} vs {dst.shape})")
    for name, arr in (("edge_index[0] (source)", src), ("edge_index[1] (destination)", dst)):
        if arr.size and (arr.min() < 0 or arr.max() >= n):
            bad = int(np.flatnonzero((arr < 0) | (arr >= n))[0])
            raise PartitionError(f"{name}: entry {bad} is {int(arr[bad])}, outside [0, {n})")


def check_num_parts(num_parts) -> int:
    if isinstance(num_parts, bool) or not isinstance(num_parts, (int, np.integer)) or num_parts < 1:
        raise PartitionError(f"num_parts: must be an integer >= 1, got {num_parts!r}")
    return int(num_parts)


def check_assignment(assignment, num_nodes: int, num_parts: int) -> np.ndarray:
    """An assignment gives every node exactly one part id in [0, num_parts)."""
    a = np.asarray(assignment)
    if a.shape != (num_nodes,):
        raise PartitionError(f"assignment: expected shape ({num_nodes},), got {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise PartitionError(f"assignment: expected integer part ids, got dtype {a.dtype}")
    a = a.astype(np.int64, copy=False)
    if a.size and (a.min() < 0 or a.max() >= num_parts):
        bad = int(np.flatnonzero((a < 0) | (a >= num_parts))[0])
        raise PartitionError(f"assignment: node {bad} has part {int(a[bad])}, outside [0, {num_parts})")
    return a
