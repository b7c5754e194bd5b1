"""A uniform random node-classification graph in the canonical npz format, for peer timings.

Edges are drawn uniformly (source and destination independent, self loops redrawn, duplicates
kept: they are rare at benchmark densities and every system sees the same list). Features are
dense standard normal float32, labels uniform, split 10% / 10% / 20%. The learning task is
meaningless on purpose: the graph only has to have the requested size for timing and memory.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from morphgen.errors import UserError


def write_random_graph(path: str | Path, num_nodes: int, num_edges: int, num_features: int,
                       num_classes: int, seed: int = 0) -> Path:
    for name, v, lo in (("num_nodes", num_nodes, 2), ("num_edges", num_edges, 0),
                        ("num_features", num_features, 1), ("num_classes", num_classes, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise UserError(f"write_random_graph: '{name}' must be an integer >= {lo}, got {v!r}")
    rng = np.random.default_rng(seed)
    src = rng.integers(0, num_nodes, num_edges, dtype=np.int64)
    dst = rng.integers(0, num_nodes, num_edges, dtype=np.int64)
    loops = src == dst
    while loops.any():                       # redraw self loops so the model's own loop is the only one
        dst[loops] = rng.integers(0, num_nodes, int(loops.sum()), dtype=np.int64)
        loops = src == dst
    x = rng.standard_normal((num_nodes, num_features), dtype=np.float32)
    y = rng.integers(0, num_classes, num_nodes, dtype=np.int64)
    order = rng.permutation(num_nodes)
    masks = {k: np.zeros(num_nodes, dtype=bool) for k in ("train_mask", "val_mask", "test_mask")}
    a, b, c = num_nodes // 10, num_nodes // 5, (2 * num_nodes) // 5
    masks["train_mask"][order[:a]] = True
    masks["val_mask"][order[a:b]] = True
    masks["test_mask"][order[b:c]] = True
    path = Path(path)
    np.savez(path, edge_index=np.stack([src, dst]), x=x, y=y, **masks)
    return path
