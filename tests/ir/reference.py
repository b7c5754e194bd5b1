"""Independent hand-written numpy references of common GNN layers (evaluation mode).

Written directly from the papers' formulas with a dense adjacency matrix and explicit loops;
they share no code with morphgen.interp.  ``A[v, u]`` counts the edges ``u -> v``, so
``A @ H`` sums over incoming edges.  Parameter names follow tests/ir/models.py.
"""
from __future__ import annotations

import numpy as np


def adjacency(n, src, dst):
    a = np.zeros((n, n))
    for u, v in zip(src, dst):
        a[v, u] += 1.0
    return a


def relu(x):
    return np.maximum(x, 0.0)


def elu(x):
    return np.where(x > 0, x, np.exp(np.minimum(x, 0.0)) - 1.0)


def gcn(n, src, dst, x, params, layers=2):
    """Kipf & Welling with PyG's gcn_norm: D^-1/2 (A + I) D^-1/2, D = in-degree + 1."""
    a_hat = adjacency(n, src, dst) + np.eye(n)
    d = a_hat.sum(axis=1)                      # row sums = in-degree + 1
    norm = a_hat / np.sqrt(d)[:, None] / np.sqrt(d)[None, :]
    h = x
    for layer in range(layers):
        h = norm @ (h @ params[f"layer{layer}.W"]) + params[f"layer{layer}.b"]
        if layer < layers - 1:
            h = relu(h)
    return h


def sage(n, src, dst, x, params, reduce="mean", layers=2):
    """GraphSAGE: h_v' = agg_{u->v} h_u · Wn + h_v · Ws + b (empty neighbourhood -> 0)."""
    h = x
    for layer in range(layers):
        neigh = np.zeros_like(h)
        for v in range(n):
            rows = [h[u] for u, t in zip(src, dst) if t == v]
            if rows:
                neigh[v] = np.mean(rows, axis=0) if reduce == "mean" else np.max(rows, axis=0)
        h = neigh @ params[f"layer{layer}.Wn"] + h @ params[f"layer{layer}.Ws"] + params[f"layer{layer}.b"]
        if layer < layers - 1:
            h = relu(h)
    return h


def gin(n, src, dst, x, params, layers=2):
    """GIN-0: MLP((1 + 0) h_v + Σ_{u->v} h_u)."""
    a = adjacency(n, src, dst)
    h = x
    for layer in range(layers):
        s = h + a @ h
        t = relu(s @ params[f"layer{layer}.W1"] + params[f"layer{layer}.b1"])
        h = t @ params[f"layer{layer}.W2"] + params[f"layer{layer}.b2"]
        if layer < layers - 1:
            h = relu(h)
    return h


def gat(n, src, dst, x, params, layers=2):
    """Single-head GAT over in-neighbours: α_uv = softmax_u(LeakyReLU(a_s·z_u + a_d·z_v))."""
    h = x
    for layer in range(layers):
        z = h @ params[f"layer{layer}.W"]
        a_s = params[f"layer{layer}.a_src"][:, 0]
        a_d = params[f"layer{layer}.a_dst"][:, 0]
        out = np.zeros((n, z.shape[1]))
        for v in range(n):
            nbrs = [u for u, t in zip(src, dst) if t == v]
            if not nbrs:
                continue
            e = np.array([z[u] @ a_s + z[v] @ a_d for u in nbrs])
            e = np.where(e > 0, e, 0.2 * e)
            alpha = np.exp(e - e.max())
            alpha /= alpha.sum()
            out[v] = sum(al * z[u] for al, u in zip(alpha, nbrs))
        h = out + params[f"layer{layer}.b"]
        if layer < layers - 1:
            h = elu(h)
    return h


def rgcn(n, src, dst, etype, num_etypes, x, params):
    """R-GCN: h_v' = Σ_r Σ_{u ∈ N_r(v)} h_u W_r / |N_r(v)| + h_v S + b (x = I if None)."""
    h = np.eye(n) if x is None else x
    for layer in (1, 2):
        w, s, b = params[f"W{layer}"], params[f"S{layer}"], params[f"b{layer}"]
        out = h @ s + b
        for v in range(n):
            for r in range(num_etypes):
                nbrs = [u for u, t, et in zip(src, dst, etype) if t == v and et == r]
                for u in nbrs:
                    out[v] += h[u] @ w[r] / len(nbrs)
        h = relu(out) if layer == 1 else out
    return h
