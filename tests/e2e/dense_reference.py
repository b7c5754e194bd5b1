"""A two-layer GCN written out with explicit dense matrices, in float64 (GUIDE §5 references).

    P = D^-1/2 (A + I) D^-1/2,   A[v, u] = 1 for an edge u -> v,   D = diag(rowsum(A + I))
    logits = P relu(P X W0 + b0) W1 + b1,   loss = mean over labelled train nodes of CE

The backward is derived by hand: gradients flow through P^T, so on a directed graph (where
P != P^T) a backward that forgets the transpose, or normalises at the wrong end, disagrees.
Parameter names follow tests/ir/models.gcn.
"""
from __future__ import annotations

import numpy as np


def gcn_matrix(graph) -> np.ndarray:
    n = graph.num_nodes
    a = np.zeros((n, n))
    np.add.at(a, (graph.dst, graph.src), 1.0)
    a += np.eye(n)
    d = a.sum(axis=1)
    scale = 1.0 / np.sqrt(d)
    return scale[:, None] * a * scale[None, :]


def _softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def gcn_forward_backward(graph, x, labels, mask, params):
    """(loss, logits, grads by parameter name) of the two-layer GCN, float64."""
    p = gcn_matrix(graph)
    x = np.asarray(x, np.float64)
    w0, b0 = params["layer0.W"].astype(np.float64), params["layer0.b"].astype(np.float64)
    w1, b1 = params["layer1.W"].astype(np.float64), params["layer1.b"].astype(np.float64)
    px = p @ x
    z0 = px @ w0 + b0
    h1 = np.maximum(z0, 0.0)
    ph1 = p @ h1
    logits = ph1 @ w1 + b1

    sel = np.asarray(mask, bool) & (labels >= 0)
    count = int(sel.sum())
    probs = _softmax(logits)
    rows = np.flatnonzero(sel)
    loss = -np.mean(np.log(probs[rows, labels[rows]]))
    g = np.zeros_like(logits)
    g[rows] = probs[rows]
    g[rows, labels[rows]] -= 1.0
    g /= count

    grads = {"layer1.W": ph1.T @ g, "layer1.b": g.sum(axis=0)}
    dh1 = p.T @ (g @ w1.T)
    dz0 = dh1 * (z0 > 0)
    grads["layer0.W"] = px.T @ dz0
    grads["layer0.b"] = dz0.sum(axis=0)
    return float(loss), logits, grads
