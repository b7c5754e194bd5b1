"""Shared test helpers: small random directed graphs, data, and finite-difference checks."""
from __future__ import annotations

import numpy as np
import pytest

from morphgen.autodiff import differentiate
from morphgen.graph import Graph
from morphgen.interp import Interpreter, init_params


def random_graph(n=9, e=22, seed=0, etypes=1, ntypes=1, weighted=False) -> Graph:
    """A directed graph with no duplicate edges and no self loops (so max has no ties between
    an edge and the self term), the last two nodes isolated and node 0 of in-degree zero.
    ``weighted``: edge weights in [0.1, 3), none near zero (programs may divide by them)."""
    rng = np.random.default_rng(seed)
    active = n - 2
    pairs = [(u, v) for u in range(active) for v in range(1, active) if u != v]
    pick = rng.choice(len(pairs), size=min(e, len(pairs)), replace=False)
    src = np.array([pairs[i][0] for i in pick], np.int64)
    dst = np.array([pairs[i][1] for i in pick], np.int64)
    g = Graph(n, src, dst,
              etype=rng.integers(0, etypes, src.size) if etypes > 1 else None,
              ntype=rng.integers(0, ntypes, n) if ntypes > 1 else None,
              num_etypes=etypes, num_ntypes=ntypes,
              edge_weight=rng.uniform(0.1, 3.0, src.size) if weighted else None)
    assert g.in_degree[0] == 0 and g.in_degree[-1] == 0 and g.out_degree[-1] == 0
    assert not np.array_equal(np.sort(src * n + dst), np.sort(dst * n + src)), "graph is symmetric"
    return g


def random_data(graph: Graph, width, classes, seed=1):
    rng = np.random.default_rng(seed)
    n = graph.num_nodes
    x = None if width is None else rng.normal(size=(n, width))
    labels = rng.integers(0, classes, n)
    labels[1] = -1                           # an unlabelled node
    mask = rng.random(n) < 0.8
    mask[2] = True
    return x, labels, mask


def perturbed_params(program, seed=3):
    """Random (not zero) values for every param so that biases matter in the checks."""
    params = init_params(program, seed=seed)
    rng = np.random.default_rng(seed + 100)
    return {k: v + 0.3 * rng.normal(size=v.shape) for k, v in params.items()}


def assert_same_loss_and_gradients(before, after, graph, x, labels, mask, params, seed=3):
    """Two forms of one program (before and after a rewrite) give the same loss and every
    gradient on the same data, in float64."""
    loss0, grads0, _ = Interpreter(before, graph, x, labels, mask, dtype=np.float64, seed=seed).run(params)
    loss1, grads1, _ = Interpreter(after, graph, x, labels, mask, dtype=np.float64, seed=seed).run(params)
    assert loss1 == pytest.approx(loss0, rel=1e-12)
    for name in grads0:
        np.testing.assert_allclose(grads1[name], grads0[name], rtol=1e-9, atol=1e-12, err_msg=name)


def finite_difference_check(program, graph, x, labels, mask, params, eps=1e-6, rtol=1e-5,
                            atol=1e-7, max_entries=40, seed=5, triples=None):
    """Compare generated gradients with central differences (float64) on sampled entries."""
    if not program.backward:
        differentiate(program)
    interp = Interpreter(program, graph, x, labels, mask, dtype=np.float64, seed=seed, triples=triples)
    loss, grads, _ = interp.run(params)
    assert np.isfinite(loss)
    assert set(grads) == {p.name for p in program.params if p.trainable}, "every weight must get a gradient"
    rng = np.random.default_rng(0)
    for name, g in grads.items():
        p = params[name]
        assert g.shape == p.shape, name
        assert np.all(np.isfinite(g)), name
        flat = np.arange(p.size)
        if p.size > max_entries:
            flat = rng.choice(p.size, max_entries, replace=False)
        for i in flat:
            idx = np.unravel_index(i, p.shape)
            old = p[idx]
            p[idx] = old + eps
            up = interp.loss(params)
            p[idx] = old - eps
            down = interp.loss(params)
            p[idx] = old
            numeric = (up - down) / (2 * eps)
            assert abs(numeric - g[idx]) <= atol + rtol * max(abs(numeric), abs(g[idx])), (
                f"{program.name}: d loss / d {name}{idx}: generated {g[idx]!r}, numeric {numeric!r}")
    return loss, grads
