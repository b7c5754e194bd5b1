"""Graphs for the partition command and the benchmark: datasets by name or path, and R-MAT.

Dataset specs go to ``morphgen.data.load_graph`` when that loader is available; otherwise a
minimal reader here handles ``.npz`` archives with an ``edge_index`` array (names resolve in
the data directory or $MORPHGEN_DATA).  ``rmat:NODES:EDGES[:SEED]`` builds an R-MAT graph.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from morphgen.graph import Graph, GraphError

from .errors import PartitionError


def symmetrize(graph: Graph) -> Graph:
    """Add the reverse of every edge that lacks one (drops nothing, adds no self loops)."""
    n = graph.num_nodes
    keys = graph.src * n + graph.dst
    rev = graph.dst * n + graph.src
    missing = ~np.isin(rev, keys) & (graph.src != graph.dst)
    return Graph(n, np.concatenate([graph.src, graph.dst[missing]]),
                 np.concatenate([graph.dst, graph.src[missing]]))


def rmat_graph(num_nodes: int, num_edges: int, seed: int = 0) -> Graph:
    from morphgen.data.synthetic import rmat
    return rmat(num_nodes, num_edges, seed=seed)


def _parse_rmat(spec: str) -> Graph:
    fields = spec.split(":")[1:]
    if len(fields) not in (2, 3):
        raise PartitionError(f"dataset {spec!r}: expected rmat:NODES:EDGES[:SEED]")
    try:
        values = [int(f) for f in fields]
    except ValueError:
        raise PartitionError(f"dataset {spec!r}: NODES, EDGES and SEED must be integers") from None
    return rmat_graph(*values)


def _resolve(spec: str, data_dir) -> Path:
    path = Path(spec)
    if path.suffix == ".npz" or path.exists():
        if not path.exists():
            raise PartitionError(f"dataset {spec!r}: file not found")
        return path
    dirs = [d for d in (data_dir, os.environ.get("MORPHGEN_DATA")) if d]
    for d in dirs:
        candidate = Path(d) / f"{spec}.npz"
        if candidate.exists():
            return candidate
    where = ", ".join(dirs) if dirs else "no data directory (use --data-dir or $MORPHGEN_DATA)"
    raise PartitionError(f"dataset {spec!r}: not found in {where}")


def _read_npz(path: Path) -> Graph:
    try:
        with np.load(path, allow_pickle=False) as z:
            if "edge_index" not in z.files:
                raise PartitionError(f"{path}: no edge_index array")
            ei = z["edge_index"]
            n = int(z["num_nodes"]) if "num_nodes" in z.files else None
            if n is None and "y" in z.files:
                n = int(z["y"].shape[0])
    except PartitionError:
        raise
    except Exception as exc:
        raise PartitionError(f"{path}: unreadable archive ({exc})") from None
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise PartitionError(f"{path}: edge_index must have shape [2, E], got {ei.shape}")
    if n is None:
        n = int(ei.max()) + 1 if ei.size else 0
    try:
        return Graph(n, ei[0], ei[1])
    except GraphError as exc:
        raise PartitionError(f"{path}: {exc}") from None


def load_input_graph(spec: str, data_dir=None, symmetric: bool = False) -> Graph:
    if spec.startswith("rmat:"):
        graph = _parse_rmat(spec)
    else:
        try:
            from morphgen.data import load_graph  # the project's loader, when present
        except ImportError:
            load_graph = None
        graph = load_graph(spec, data_dir=data_dir) if load_graph else _read_npz(_resolve(spec, data_dir))
    return symmetrize(graph) if symmetric else graph
