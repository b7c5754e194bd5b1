"""Shared pieces of the end-to-end tests: paths, small datasets, the CLI runner.

The datasets are small and fixed (same shapes every time) so that the toolchain's build cache,
keyed by the generated source, serves every test after the first build of a program.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from morphgen.data import Dataset, LinkDataset, synthetic_dataset
from morphgen.graph import Graph

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
HOMOGENEOUS_EXAMPLES = ("gcn", "gcn3", "sage", "sage_layers", "gin", "gat")
RELATIONAL_EXAMPLES = ("rgcn", "rgcn_bases", "rgat", "hgt")

# A fixed threshold keeps the feature-path choice (and so the test) independent of the
# machine's calibration; dense features have sparsity 0 and take the dense path.
DENSE_THRESHOLD = 0.9


def example(name: str) -> Path:
    return EXAMPLES / f"{name}.mp"


def datasets_dir() -> Path:
    """The real datasets: ``../shared/datasets`` relative to the repository root (CI layout)."""
    path = (REPO.parent / "shared" / "datasets").resolve()
    if not (path / "cora.npz").is_file():
        raise AssertionError(f"the real datasets are missing: expected {path}/cora.npz "
                             f"(CI checks out shared/ beside the repository)")
    return path


def small_dataset(features: int = 17, seed: int = 1) -> Dataset:
    """A small homogeneous planted-community dataset (symmetric graph, dense features)."""
    return synthetic_dataset(nodes=120, edges=600, features=features, classes=3, train_per_class=10,
                             val=20, test=30, seed=seed)


def typed_dataset(features=7, nodes: int = 48, edges: int = 160, etypes: int = 3, ntypes: int = 2,
                  classes: int = 3, seed: int = 4, weighted: bool = False) -> Dataset:
    """A small relational dataset: directed typed edges, typed nodes, a zero in-degree node,
    dense features (or featureless when ``features`` is None), a few unlabelled nodes; with
    ``weighted``, edge weights in [0.1, 3) (drawn last: the rest is the unweighted dataset)."""
    rng = np.random.default_rng(seed)
    pairs = rng.choice(nodes * nodes, size=edges * 2, replace=False)
    src, dst = np.divmod(pairs, nodes)
    keep = (src != dst) & (dst != 0)                 # no self loops; node 0 has no in-edges
    src, dst = src[keep][:edges], dst[keep][:edges]
    graph = Graph(nodes, src, dst, etype=rng.integers(0, etypes, src.size),
                  ntype=rng.integers(0, ntypes, nodes), num_etypes=etypes, num_ntypes=ntypes)
    labels = rng.integers(0, classes, nodes).astype(np.int64)
    labels[-3:] = -1
    order = rng.permutation(nodes - 3)
    masks = [np.zeros(nodes, bool) for _ in range(3)]
    masks[0][order[:24]] = True
    masks[1][order[24:32]] = True
    masks[2][order[32:]] = True
    x = None if features is None else rng.normal(size=(nodes, features)).astype(np.float32)
    if weighted:
        graph.edge_weight = rng.uniform(0.1, 3.0, graph.num_edges).astype(np.float32)
        graph.validate()
    return Dataset(name="typed", graph=graph, features=x, labels=labels, train_mask=masks[0],
                   val_mask=masks[1], test_mask=masks[2], num_classes=classes)


# link prediction: a small knowledge graph (examples/rgcn_link.mp)
RELATIONS = 3


def knowledge_graph(nodes=60, seed=0):
    """Triples with structure to learn: clusters of 4 nodes; relation 0 links the members of a
    cluster, relation 1 each member of cluster k to each of cluster k + 1, relation 2 every node
    to its cluster's first member.  A held-out triple is implied by the others."""
    cluster = np.arange(nodes) // 4
    pairs = [(a, b) for a in range(nodes) for b in range(nodes) if a != b]
    triples = [(a, 0, b) for a, b in pairs if cluster[a] == cluster[b]]
    triples += [(a, 1, b) for a, b in pairs if cluster[b] == (cluster[a] + 1) % (nodes // 4)]
    triples += [(a, 2, 4 * cluster[a]) for a in range(nodes) if a % 4]
    triples = np.array(triples, np.int64)
    order = np.random.default_rng(seed).permutation(len(triples))
    test, valid, train = np.split(triples[order], [10, 20])
    src = np.concatenate([train[:, 0], train[:, 2]])
    dst = np.concatenate([train[:, 2], train[:, 0]])
    etype = np.concatenate([train[:, 1], train[:, 1] + RELATIONS])
    graph = Graph(nodes, src, dst, etype=etype, num_etypes=2 * RELATIONS)
    return train, valid, test, graph


def link_dataset(**kw) -> LinkDataset:
    train, valid, test, graph = knowledge_graph(**kw)
    return LinkDataset("kg", graph, None, train, valid, test, RELATIONS)


def write_link_npz(path, **kw):
    train, valid, test, graph = knowledge_graph(**kw)
    np.savez(path, num_nodes=graph.num_nodes, edge_index=np.stack([graph.src, graph.dst]), edge_type=graph.etype,
             num_edge_types=graph.num_etypes, train_triples=train, valid_triples=valid, test_triples=test,
             meta=np.array(json.dumps({"inverse_edge_type_offset": RELATIONS})))
    return path


def run_cli(*args, cwd=None, timeout=600, env=None) -> subprocess.CompletedProcess:
    """``python -m morphgen ARGS`` with this interpreter; output captured as text."""
    full_env = dict(os.environ)
    full_env.pop("MORPHGEN_DEBUG", None)      # the user-facing behaviour, never the debug one
    if env:
        full_env.update(env)
    return subprocess.run([sys.executable, "-m", "morphgen", *map(str, args)], cwd=cwd or REPO,
                          capture_output=True, text=True, timeout=timeout, env=full_env)


def assert_clean_failure(proc: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    """Exit ``code``, every needle in stderr, and no Python traceback."""
    text = proc.stdout + proc.stderr
    assert proc.returncode == code, f"exit {proc.returncode}, expected {code}:\n{text[-3000:]}"
    assert "Traceback" not in text, text[-3000:]
    for needle in needles:
        assert needle in proc.stderr, f"{needle!r} not in stderr:\n{proc.stderr[-3000:]}"
