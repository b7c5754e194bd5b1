"""The triples a link-prediction epoch scores: every training triple (target 1) and, for each,
``negatives`` corrupted copies (target 0) whose head or tail (each with probability 1/2) is
replaced by a uniformly drawn node, as in R-GCN and PyG's R-GCN link-prediction example.
Negatives are not filtered against the true triples (nor are they there)."""
from __future__ import annotations

import numpy as np


def epoch_triples(positives: np.ndarray, num_nodes: int, negatives: int, seed: int, epoch: int) -> np.ndarray:
    """int64 ``[n * (1 + negatives), 4]``: (head, relation, tail, target); reproducible from
    (seed, epoch)."""
    rng = np.random.default_rng([seed & 0xFFFFFFFF, epoch])
    n = positives.shape[0]
    out = np.empty((n * (1 + negatives), 4), np.int64)
    out[:n, :3], out[:n, 3] = positives, 1
    corrupt = np.tile(positives, (negatives, 1))
    heads = rng.random(corrupt.shape[0]) < 0.5
    drawn = rng.integers(0, num_nodes, corrupt.shape[0])
    corrupt[heads, 0] = drawn[heads]
    corrupt[~heads, 2] = drawn[~heads]
    out[n:, :3], out[n:, 3] = corrupt, 0
    return out
