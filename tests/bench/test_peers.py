"""Peer runners (PyG, DGL), machine limits and memory accounting.

The parity tests are what make the benchmark fair: with dropout 0 and the same initial weights,
each peer's first-epoch loss must equal a float64 numpy GCN written here from the definitions,
using that peer's documented normalisation convention (PyG: in-degree on both sides; DGL 'both':
out-degree of the source, in-degree of the destination). The graph is small and directed, so the
two conventions give different losses and a runner using the wrong one fails.

These tests need torch, torch_geometric and dgl (`pip install .[bench]`); a missing library makes
them fail with the runner's error message, never skip.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from morphgen.bench import memory
from morphgen.bench.peers.launcher import run_peer
from morphgen.bench.peers.runner import RESULT_KEYS
from morphgen.bench.peers.spec import SpecError, parse_spec

# ---------------------------------------------------------------------------------------------
# A tiny directed graph and a float64 numpy GCN reference
# ---------------------------------------------------------------------------------------------
N, F, HIDDEN, C = 9, 6, 5, 3
LAYERS = [F, HIDDEN, HIDDEN, C]
# Directed, not symmetric; node 8 has no incoming edge, node 0 no outgoing one, 3->3 is an
# existing self loop (both peers must end up with exactly one loop on node 3).
EDGES = np.array([[1, 2, 2, 3, 3, 4, 5, 5, 6, 7, 8, 8, 1, 4],
                  [0, 0, 1, 1, 3, 2, 4, 0, 5, 6, 7, 0, 3, 6]], dtype=np.int64)


# Edge weights for the weighted GCN's parity: far from 1, so that weighing tells the models apart.
EDGE_WEIGHTS = np.where(np.arange(EDGES.shape[1]) % 3 == 0, 6.0, 0.1).astype(np.float32)


def _tiny_dataset(path: Path, sparse: bool, weighted: bool = False) -> Path:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((N, F)).astype(np.float32)
    x[rng.random((N, F)) < 0.5] = 0.0
    y = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2], dtype=np.int64)
    train = np.zeros(N, bool); train[[0, 1, 2, 3, 5, 8]] = True
    val = np.zeros(N, bool); val[[4, 6]] = True
    test = np.zeros(N, bool); test[[7]] = True
    arrays = dict(edge_index=EDGES, y=y, train_mask=train, val_mask=val, test_mask=test)
    if weighted:
        arrays["edge_weight"] = EDGE_WEIGHTS
    if sparse:
        rows, cols = np.nonzero(x)
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=N))]).astype(np.int64)
        arrays.update(x_indptr=indptr, x_indices=cols.astype(np.int64), x_data=x[rows, cols],
                      x_shape=np.array([N, F], dtype=np.int64))
    else:
        arrays["x"] = x
    np.savez(path, **arrays)
    return path


def _init_weights(path: Path) -> Path:
    rng = np.random.default_rng(11)
    arrays = {}
    for i in range(len(LAYERS) - 1):
        arrays[f"layer{i}.W"] = (rng.standard_normal((LAYERS[i], LAYERS[i + 1])) * 0.7).astype(np.float32)
        arrays[f"layer{i}.b"] = (rng.standard_normal(LAYERS[i + 1]) * 0.1).astype(np.float32)
    np.savez(path, **arrays)
    return path


def _train_nll(logits: np.ndarray, z) -> float:
    """Mean cross-entropy of the logits over the training nodes of the data file z."""
    logp = logits - logits.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    train = z["train_mask"]
    return float(-logp[train, z["y"][train]].mean())


def reference_first_loss(data_path: Path, weights_path: Path, convention: str, weighted: bool = False) -> float:
    """Cross-entropy of a float64 GCN forward, from the definitions (no library code); `weighted`:
    PyG's GCNConv given edge weights (the degrees sum them; the loop of each node weighs 1)."""
    z = np.load(data_path)
    if "x" in z.files:
        x = z["x"].astype(np.float64)
    else:
        x = np.zeros(tuple(z["x_shape"]))
        rows = np.repeat(np.arange(N), np.diff(z["x_indptr"]))
        x[rows, z["x_indices"]] = z["x_data"]
    src, dst = z["edge_index"]
    keep = src != dst                                        # existing loops replaced by one per node
    src = np.concatenate([src[keep], np.arange(N)])
    dst = np.concatenate([dst[keep], np.arange(N)])
    ew = np.concatenate([z["edge_weight"][keep], np.ones(N)]) if weighted else np.ones(src.size)
    indeg = np.bincount(dst, weights=ew, minlength=N).astype(np.float64)
    outdeg = np.bincount(src, weights=ew, minlength=N).astype(np.float64)
    src_deg = indeg if convention == "pyg" else outdeg
    coef = src_deg[src] ** -0.5 * ew * indeg[dst] ** -0.5
    w = np.load(weights_path)
    h = x
    for i in range(len(LAYERS) - 1):
        t = h @ w[f"layer{i}.W"].astype(np.float64)
        agg = np.zeros((N, t.shape[1]))
        np.add.at(agg, dst, coef[:, None] * t[src])
        h = agg + w[f"layer{i}.b"].astype(np.float64)
        if i < len(LAYERS) - 2:
            h = np.maximum(h, 0.0)
    return _train_nll(h, z)


def _sage_init_weights(path: Path) -> Path:
    rng = np.random.default_rng(13)
    arrays = {}
    for i in range(len(LAYERS) - 1):
        for name in ("W_neigh", "W_self"):
            arrays[f"layer{i}.{name}"] = (rng.standard_normal((LAYERS[i], LAYERS[i + 1])) * 0.7).astype(np.float32)
        arrays[f"layer{i}.b"] = (rng.standard_normal(LAYERS[i + 1]) * 0.1).astype(np.float32)
    np.savez(path, **arrays)
    return path


def reference_first_loss_sage(data_path: Path, weights_path: Path, aggr: str) -> float:
    """GraphSAGE from its definition in float64: W_neigh * aggr(in-neighbours) + W_self * h + b,
    over the stored edges (the 3->3 loop included, none added); no in-edge aggregates to 0."""
    z = np.load(data_path)
    x = z["x"].astype(np.float64)
    src, dst = z["edge_index"]
    w = np.load(weights_path)
    h = x
    for i in range(len(LAYERS) - 1):
        agg = np.zeros_like(h)
        for v in range(N):
            rows = h[src[dst == v]]
            if len(rows):
                agg[v] = rows.mean(0) if aggr == "mean" else rows.max(0)
        h = agg @ w[f"layer{i}.W_neigh"] + h @ w[f"layer{i}.W_self"] + w[f"layer{i}.b"]
        if i < len(LAYERS) - 2:
            h = np.maximum(h, 0.0)
    return _train_nll(h, z)


GAT_LAYERS, GAT_HEADS = [F, 8, C], [2, 1]


def _gat_init_weights(path: Path) -> Path:
    rng = np.random.default_rng(17)
    arrays = {}
    for i in range(len(GAT_LAYERS) - 1):
        arrays[f"layer{i}.W"] = (rng.standard_normal((GAT_LAYERS[i], GAT_LAYERS[i + 1])) * 0.7).astype(np.float32)
        for name in ("a_src", "a_dst", "b"):
            arrays[f"layer{i}.{name}"] = (rng.standard_normal(GAT_LAYERS[i + 1]) * 0.5).astype(np.float32)
    np.savez(path, **arrays)
    return path


def reference_first_loss_gat(data_path: Path, weights_path: Path) -> float:
    """GAT from its definition in float64: per head, softmax over each node's in-edges (the file's
    loops replaced by one per node) of leaky_relu(a_src . Wh[src] + a_dst . Wh[dst], 0.2), heads
    concatenated, bias, elu between layers."""
    z = np.load(data_path)
    x = z["x"].astype(np.float64)
    src, dst = z["edge_index"]
    keep = src != dst
    src = np.concatenate([src[keep], np.arange(N)])
    dst = np.concatenate([dst[keep], np.arange(N)])
    w = np.load(weights_path)
    h = x
    for i, heads in enumerate(GAT_HEADS):
        t = h @ w[f"layer{i}.W"]
        d = t.shape[1] // heads
        out = np.zeros_like(t)
        for k in range(heads):
            tk = t[:, k * d:(k + 1) * d]
            score = tk[src] @ w[f"layer{i}.a_src"][k * d:(k + 1) * d] + tk[dst] @ w[f"layer{i}.a_dst"][k * d:(k + 1) * d]
            score = np.where(score > 0, score, 0.2 * score)
            for v in range(N):
                into = dst == v
                alpha = np.exp(score[into] - score[into].max())
                out[v, k * d:(k + 1) * d] = (alpha / alpha.sum()) @ tk[src[into]]
        h = out + w[f"layer{i}.b"]
        if i < len(GAT_HEADS) - 1:
            h = np.where(h > 0, h, np.expm1(h))
    return _train_nll(h, z)


GIN_LAYERS, GIN_NORMS = [F, 8, C], [True, False]


def _gin_init_weights(path: Path) -> Path:
    rng = np.random.default_rng(19)
    arrays = {}
    for i, norm in enumerate(GIN_NORMS):
        fan_in, fan_out = GIN_LAYERS[i], GIN_LAYERS[i + 1]
        arrays[f"layer{i}.W1"] = (rng.standard_normal((fan_in, fan_out)) * 0.7).astype(np.float32)
        arrays[f"layer{i}.W2"] = (rng.standard_normal((fan_out, fan_out)) * 0.7).astype(np.float32)
        vectors = [f"norm{k}.{v}" for k in (1, 2) for v in ("gamma", "beta")] if norm else ["b1", "b2"]
        for name in vectors:
            arrays[f"layer{i}.{name}"] = (1.0 * name.endswith("gamma") + rng.standard_normal(fan_out) * 0.3).astype(np.float32)
    np.savez(path, **arrays)
    return path


def reference_first_loss_gin(data_path: Path, weights_path: Path) -> float:
    """GIN-0 from its definition in float64: MLP(h + sum over in-edges), the MLP linear, [batch
    norm], relu, linear, [batch norm] (training mode: the batch's mean and biased variance, eps
    1e-5), relu between layers; the stored edges as they are (3->3 included)."""
    z = np.load(data_path)
    h = z["x"].astype(np.float64)
    src, dst = z["edge_index"]
    w = np.load(weights_path)

    def norm(t, i, k):
        t = (t - t.mean(0)) / np.sqrt(t.var(0) + 1e-5)
        return t * w[f"layer{i}.norm{k}.gamma"] + w[f"layer{i}.norm{k}.beta"]

    for i, has_norm in enumerate(GIN_NORMS):
        agg = np.zeros_like(h)
        np.add.at(agg, dst, h[src])
        t = (h + agg) @ w[f"layer{i}.W1"]
        t = norm(t, i, 1) if has_norm else t + w[f"layer{i}.b1"]
        t = np.maximum(t, 0.0) @ w[f"layer{i}.W2"]
        h = norm(t, i, 2) if has_norm else t + w[f"layer{i}.b2"]
        if i < len(GIN_NORMS) - 1:
            h = np.maximum(h, 0.0)
    return _train_nll(h, z)


# A small typed graph: 3 relations, the edges not sorted by type, parallel edges of different
# types (1->0, 4->2), a node without in-edges (11); the first layer reads either features or, on
# the featureless file, node ids (identity input, F = N).
RG_N, RG_R, RG_BASES = 12, 3, 2
RG_EDGES = np.array([[1, 2, 3, 1, 4, 5, 6, 7, 8, 9, 10, 0, 4, 2, 3, 5, 6, 9, 1, 7],
                     [0, 0, 0, 0, 2, 2, 3, 3, 4, 5, 6, 7, 2, 8, 9, 10, 1, 4, 5, 8]], dtype=np.int64)
RG_TYPES = np.array([2, 0, 0, 1, 1, 0, 2, 2, 1, 0, 1, 2, 2, 0, 1, 2, 0, 1, 1, 0], dtype=np.int64)


def _rgcn_dataset(path: Path, featureless: bool) -> Path:
    rng = np.random.default_rng(23)
    y = np.arange(RG_N, dtype=np.int64) % C
    train = np.zeros(RG_N, bool); train[[0, 1, 2, 3, 4, 5, 8, 11]] = True
    val = np.zeros(RG_N, bool); val[[6, 9]] = True
    test = np.zeros(RG_N, bool); test[[7, 10]] = True
    arrays = dict(edge_index=RG_EDGES, edge_type=RG_TYPES, num_edge_types=np.int64(RG_R), y=y,
                  train_mask=train, val_mask=val, test_mask=test)
    if not featureless:
        arrays["x"] = rng.standard_normal((RG_N, F)).astype(np.float32)
    np.savez(path, **arrays)
    return path


def _rgcn_init_weights(path: Path, fan_in: int) -> Path:
    """Both parameterisations in one file: W per relation, and bases V with coefficients A."""
    rng = np.random.default_rng(29)
    dims = [fan_in, HIDDEN, C]
    arrays = {}
    for i in range(2):
        a, b = dims[i], dims[i + 1]
        arrays[f"layer{i}.W"] = (rng.standard_normal((RG_R, a, b)) * 0.7).astype(np.float32)
        arrays[f"layer{i}.V"] = (rng.standard_normal((RG_BASES, a, b)) * 0.7).astype(np.float32)
        arrays[f"layer{i}.A"] = rng.standard_normal((RG_R, RG_BASES)).astype(np.float32)
        arrays[f"layer{i}.S"] = (rng.standard_normal((a, b)) * 0.7).astype(np.float32)
        arrays[f"layer{i}.b"] = (rng.standard_normal(b) * 0.1).astype(np.float32)
    np.savez(path, **arrays)
    return path


def reference_first_loss_rgcn(data_path: Path, weights_path: Path, bases: bool, norm: str = "relation") -> float:
    """R-GCN from its definition in float64 (Schlichtkrull et al., eq. 2): h_i' = sum_r sum_{j in
    N_i^r} W_r h_j / c_{i,r} + S h_i + b, c_{i,r} the in-edges of i of relation r (norm "in_degree":
    all in-edges of i, to show the graph tells them apart), W_r = sum_b A[r, b] V_b with bases,
    the identity as input when the file has no features, relu between the layers."""
    z = np.load(data_path)
    x = z["x"].astype(np.float64) if "x" in z.files else np.eye(RG_N)
    src, dst = z["edge_index"]
    et = z["edge_type"]
    key = dst * RG_R + et if norm == "relation" else dst
    _, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
    c = counts[inverse].astype(np.float64)
    w = np.load(weights_path)
    h = x
    for i in range(2):
        W = (np.einsum("rb,bio->rio", w[f"layer{i}.A"], w[f"layer{i}.V"].astype(np.float64)) if bases
             else w[f"layer{i}.W"].astype(np.float64))
        msg = np.einsum("ei,eio->eo", h[src], W[et]) / c[:, None]
        agg = np.zeros((RG_N, W.shape[2]))
        np.add.at(agg, dst, msg)
        h = agg + h @ w[f"layer{i}.S"] + w[f"layer{i}.b"]
        if i == 0:
            h = np.maximum(h, 0.0)
    return _train_nll(h, z)


def _spec(**over) -> dict:
    spec = {"model": "gcn", "layers": LAYERS, "dropout": 0.0, "lr": 0.01, "weight_decay": 5e-4,
            "epochs": 4, "warmup": 1, "threads": 1, "bias": True, "self_loops": True,
            "sparse_features": False}
    spec.update(over)
    return spec


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("peers")
    return {"dense": _tiny_dataset(d / "dense.npz", sparse=False),
            "sparse": _tiny_dataset(d / "sparse.npz", sparse=True),
            "weighted": _tiny_dataset(d / "weighted.npz", sparse=False, weighted=True),
            "weighted_sparse": _tiny_dataset(d / "weighted_sparse.npz", sparse=True, weighted=True),
            "weights": _init_weights(d / "w.npz"), "sage_weights": _sage_init_weights(d / "sage_w.npz"),
            "gat_weights": _gat_init_weights(d / "gat_w.npz"), "gin_weights": _gin_init_weights(d / "gin_w.npz"),
            "rgcn_x": _rgcn_dataset(d / "rgcn_x.npz", featureless=False),
            "rgcn_ids": _rgcn_dataset(d / "rgcn_ids.npz", featureless=True),
            "rgcn_x_weights": _rgcn_init_weights(d / "rgcn_x_w.npz", F),
            "rgcn_ids_weights": _rgcn_init_weights(d / "rgcn_ids_w.npz", RG_N),
            "dir": d}


@pytest.fixture(scope="module")
def runs(files):
    """One run per (peer, feature storage) in parity mode, shared by the tests below."""
    w = str(files["weights"])
    sage = dict(model="sage", self_loops=False, init_weights=str(files["sage_weights"]))
    gat = dict(model="gat", layers=GAT_LAYERS, heads=GAT_HEADS, activation="elu", attention_dropout=0.0,
               init_weights=str(files["gat_weights"]))
    gin = dict(model="gin", layers=GIN_LAYERS, norms=GIN_NORMS, self_loops=False, bias=False,
               init_weights=str(files["gin_weights"]))
    rgcn = {data: dict(model="rgcn", layers=[F if data == "rgcn_x" else RG_N, HIDDEN, C], num_relations=RG_R,
                       self_loops=False, init_weights=str(files[f"{data}_weights"]), epochs=2)
            for data in ("rgcn_x", "rgcn_ids")}
    jobs = {
        # R-GCN: each PyG convolution on node ids (first layer, as on aifb) and floats (second
        # layer), one with bases; DGL on node ids and on features, one with bases.
        "pyg_rgcn_ids": ("pyg", "rgcn_ids", _spec(**rgcn["rgcn_ids"])),
        "pyg_fast_rgcn_ids_bases": ("pyg", "rgcn_ids", _spec(**rgcn["rgcn_ids"], num_bases=RG_BASES,
                                                             pyg_conv="FastRGCNConv")),
        "dgl_rgcn_ids": ("dgl", "rgcn_ids", _spec(**rgcn["rgcn_ids"])),
        "dgl_rgcn_x_bases": ("dgl", "rgcn_x", _spec(**rgcn["rgcn_x"], num_bases=RG_BASES)),
        "pyg_gin": ("pyg", "dense", _spec(**gin)),
        "dgl_gin": ("dgl", "dense", _spec(**gin)),
        "pyg_gat": ("pyg", "dense", _spec(**gat)),
        "dgl_gat": ("dgl", "dense", _spec(**gat)),
        "pyg_sage_mean": ("pyg", "dense", _spec(aggr="mean", **sage)),
        "pyg_sage_max": ("pyg", "dense", _spec(aggr="max", **sage)),
        "dgl_sage_mean": ("dgl", "dense", _spec(aggr="mean", **sage)),
        "dgl_sage_max": ("dgl", "dense", _spec(aggr="max", **sage, epochs=2)),
        "pyg_weighted": ("pyg", "weighted", _spec(init_weights=w, edge_weight=True)),
        "pyg_weighted_sparse": ("pyg", "weighted_sparse", _spec(init_weights=w, edge_weight=True,
                                                                sparse_features=True, epochs=2)),
        "dgl_weighted": ("dgl", "weighted", _spec(init_weights=w, edge_weight=True)),
        "pyg_dense": ("pyg", "dense", _spec(init_weights=w)),
        "pyg_sparse": ("pyg", "sparse", _spec(init_weights=w, sparse_features=True)),
        "dgl": ("dgl", "dense", _spec(init_weights=w)),
        "dgl_sparse": ("dgl", "sparse", _spec(init_weights=w, sparse_features=True, epochs=2)),
        "pyg_dropout": ("pyg", "dense", _spec(dropout=0.5, epochs=30, lr=0.05)),   # library init
        # The program's input dropout: on a sparse input's stored values (PyG), on dense rows (DGL).
        "pyg_sparse_input_dropout": ("pyg", "sparse", _spec(init_weights=w, sparse_features=True, input_dropout=0.5,
                                                            epochs=2)),
        "dgl_input_dropout": ("dgl", "dense", _spec(init_weights=w, input_dropout=0.5, epochs=2)),
    }
    # A run spends most of its time importing torch: one process per peer runs its jobs in turn
    # (tests/bench/peer_batch.py), the two peers side by side.
    d = files["dir"]
    batches = {}
    for name, (peer, data, spec) in jobs.items():
        parse_spec(spec)
        (d / f"{name}.spec.json").write_text(json.dumps(spec))
        (d / f"{name}.json").unlink(missing_ok=True)
        batches.setdefault(peer, []).append([str(files[data]), str(d / f"{name}.spec.json"), str(d / f"{name}.json")])
    for peer, batch in batches.items():
        (d / f"{peer}.jobs.json").write_text(json.dumps(batch))
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda peer: subprocess.run([sys.executable, "-m", "tests.bench.peer_batch", peer,
                                                   str(d / f"{peer}.jobs.json")],
                                                  cwd=Path(__file__).resolve().parents[2], capture_output=True,
                                                  timeout=600), batches))
    # A job whose result is missing (its process died before writing it) runs again alone, so
    # that the launcher reports why.
    return {name: (json.loads((d / f"{name}.json").read_text()) if (d / f"{name}.json").exists()
                   else run_peer(peer, files[data], spec, out=d / f"{name}.json", timeout_s=300))
            for name, (peer, data, spec) in jobs.items()}


# ---------------------------------------------------------------------------------------------
# Parity: the runners compute the same GCN as the reference
# ---------------------------------------------------------------------------------------------
def test_conventions_differ_on_the_test_graph(files):
    pyg = reference_first_loss(files["dense"], files["weights"], "pyg")
    dgl = reference_first_loss(files["dense"], files["weights"], "dgl")
    assert abs(pyg - dgl) > 1e-2, "the parity graph must tell the two normalisations apart"


def assert_first_loss(r: dict, expected: float) -> None:
    """A peer run finished and its first-epoch loss is the reference's within the parity tolerance."""
    assert r["error"] is None, r["error"]
    assert r["first_epoch_loss"] == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("name,convention", [("pyg_dense", "pyg"), ("pyg_sparse", "pyg"), ("dgl", "dgl")])
def test_parity_first_epoch_loss(runs, files, name, convention):
    assert_first_loss(runs[name], reference_first_loss(files["dense"], files["weights"], convention))


@pytest.mark.parametrize("name", ["pyg_weighted", "pyg_weighted_sparse", "dgl_weighted"])
def test_weighted_gcn_parity_first_epoch_loss(runs, files, name):
    """GCN weighing its edges: both peers take PyG's gcn_norm of the weights (DGL's coefficients
    computed so, its own EdgeWeightNorm('both') would take the source's out-degree)."""
    weighted = reference_first_loss(files["weighted"], files["weights"], "pyg", weighted=True)
    assert abs(weighted - reference_first_loss(files["dense"], files["weights"], "pyg")) > 1e-2
    assert_first_loss(runs[name], weighted)


def test_a_weighted_spec_needs_weights_in_the_data(files, tmp_path):
    r = run_peer("pyg", files["dense"], _spec(edge_weight=True), out=tmp_path / "r.json", timeout_s=300)
    assert "the dataset has no edge weights ('edge_weight')" in r["error"]


@pytest.mark.parametrize("name,aggr", [("pyg_sage_mean", "mean"), ("pyg_sage_max", "max"), ("dgl_sage_mean", "mean")])
def test_sage_parity_first_epoch_loss(runs, files, name, aggr):
    r = runs[name]
    assert_first_loss(r, reference_first_loss_sage(files["dense"], files["sage_weights"], aggr))
    assert r["config"]["model"].startswith(f"GraphSAGE ({aggr})")


@pytest.mark.parametrize("name", ["pyg_gat", "dgl_gat"])
def test_gat_parity_first_epoch_loss(runs, files, name):
    r = runs[name]
    assert_first_loss(r, reference_first_loss_gat(files["dense"], files["gat_weights"]))
    assert r["config"]["model"].startswith("GAT (heads [2, 1]") and "elu" in r["config"]["model"]


@pytest.mark.parametrize("name", ["pyg_gin", "dgl_gin"])
def test_gin_parity_first_epoch_loss(runs, files, name):
    r = runs[name]
    assert_first_loss(r, reference_first_loss_gin(files["dense"], files["gin_weights"]))
    assert r["config"]["model"].startswith("GIN-0")


@pytest.mark.parametrize("name,data,bases", [("pyg_rgcn_ids", "rgcn_ids", False),
                                             ("pyg_fast_rgcn_ids_bases", "rgcn_ids", True),
                                             ("dgl_rgcn_ids", "rgcn_ids", False),
                                             ("dgl_rgcn_x_bases", "rgcn_x", True)])
def test_rgcn_parity_first_epoch_loss(runs, files, name, data, bases):
    r = runs[name]
    assert_first_loss(r, reference_first_loss_rgcn(files[data], files[f"{data}_weights"], bases))
    assert r["config"]["model"].startswith(f"R-GCN ({RG_R} relations") and ("bases" in r["config"]["model"]) == bases
    assert ("FastRGCNConv" in r["config"]["conv"]) == ("fast" in name)


def test_rgcn_test_graph_tells_the_relation_norm_apart(files):
    for data in ("rgcn_x", "rgcn_ids"):
        per_relation, per_node = (reference_first_loss_rgcn(files[data], files[f"{data}_weights"], False, norm)
                                  for norm in ("relation", "in_degree"))
        assert abs(per_relation - per_node) > 1e-2
    assert (np.diff(RG_TYPES) < 0).any(), "edges out of type order: DGL's presorted layers need the sort"


def test_non_relational_peer_refuses_a_featureless_dataset(files):
    r = run_peer("pyg", files["rgcn_ids"], _spec(layers=[RG_N, HIDDEN, C]), timeout_s=300)
    assert "featureless" in r["error"] and r["epoch_time_s"] is None


def test_sage_mean_and_max_differ_on_the_test_graph(files):
    mean, mx = (reference_first_loss_sage(files["dense"], files["sage_weights"], a) for a in ("mean", "max"))
    assert abs(mean - mx) > 1e-2


def test_dgl_refuses_sage_max_rather_than_approximating_it(runs):
    r = runs["dgl_sage_max"]
    assert r["error"] is not None and "no 'max' aggregator" in r["error"] and r["epoch_times_s"] == []


def test_pyg_reports_its_configuration(runs):
    assert runs["pyg_sparse"]["config"]["features"].startswith("sparse")
    assert runs["pyg_dense"]["config"]["features"].startswith("dense")
    assert "csr" in runs["pyg_dense"]["config"]["adjacency"].lower() or "SparseTensor" in runs["pyg_dense"]["config"]["adjacency"]


@pytest.mark.parametrize("name,convention", [("pyg_sparse_input_dropout", "pyg"), ("dgl_input_dropout", "dgl")])
def test_input_dropout_is_applied_and_reported(runs, files, name, convention):
    """From the parity weights, dropping half the input changes the first loss, and the result says
    the model had it."""
    r = runs[name]
    assert r["error"] is None, r["error"]
    without = reference_first_loss(files["dense"], files["weights"], convention)
    assert abs(r["first_epoch_loss"] - without) > 1e-3
    assert "dropout 0.5 on the input features" in r["config"]["model"]


def test_dgl_records_that_sparse_features_are_not_honoured(runs, files):
    r = runs["dgl_sparse"]
    assert r["error"] is None, r["error"]
    assert "rejects sparse" in r["config"]["features"]
    expected = reference_first_loss(files["sparse"], files["weights"], "dgl")
    assert r["first_epoch_loss"] == pytest.approx(expected, abs=1e-4)


# ---------------------------------------------------------------------------------------------
# Result schema
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["pyg_dense", "dgl"])
def test_result_schema(runs, files, name):
    r = runs[name]
    on_disk = json.loads((files["dir"] / f"{name}.json").read_text())
    assert on_disk == r
    assert set(r) == set(RESULT_KEYS)
    assert r["error"] is None
    assert r["system"] == name.split("_")[0]
    assert len(r["epoch_times_s"]) == 4 and all(t > 0 for t in r["epoch_times_s"])
    assert r["epoch_time_s"] == pytest.approx(statistics.median(r["epoch_times_s"][1:]))
    for k in ("train_acc", "val_acc", "test_acc"):
        assert 0.0 <= r[k] <= 1.0
    assert np.isfinite(r["final_loss"]) and r["final_loss"] != r["first_epoch_loss"]   # it trained
    assert len(r["epoch_losses"]) == 4
    assert r["epoch_losses"][0] == r["first_epoch_loss"] and r["epoch_losses"][-1] == r["final_loss"]
    assert isinstance(r["peak_rss_bytes"], int) and isinstance(r["baseline_rss_bytes"], int)
    assert 0 < r["baseline_rss_bytes"] <= r["peak_rss_bytes"]
    assert r["config"]["threads"] == 1


def test_training_with_dropout_and_library_init_learns(runs):
    r = runs["pyg_dropout"]
    assert r["error"] is None, r["error"]
    assert r["final_loss"] < r["first_epoch_loss"]


# ---------------------------------------------------------------------------------------------
# Failures are reported in the JSON, never estimated
# ---------------------------------------------------------------------------------------------
def _shadow(tmp_path: Path, package: str, body: str) -> dict:
    """Environment whose PYTHONPATH puts a fake `package` ahead of the installed one."""
    pkg = tmp_path / "shadow" / package
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(body)
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path / "shadow"), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.parametrize("peer,package", [("pyg", "torch_geometric"), ("dgl", "dgl")])
def test_missing_peer_reports_error(files, tmp_path, peer, package):
    env = _shadow(tmp_path, package, f"raise ModuleNotFoundError(\"No module named '{package}'\", name='{package}')\n")
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-m", f"morphgen.bench.peers.{peer}", "--data", str(files["dense"]),
                           "--spec", str(_write_spec(tmp_path, _spec())), "--out", str(out)],
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    r = json.loads(out.read_text())
    assert set(r) == set(RESULT_KEYS)
    assert f"peer '{peer}' is not available" in r["error"] and package in r["error"]
    assert r["epoch_times_s"] == [] and r["epoch_time_s"] is None and r["first_epoch_loss"] is None


def test_killed_peer_reports_error(files, tmp_path):
    # What the kernel's OOM killer does: SIGKILL, no chance to write OUT.json (here at `import torch`).
    env = _shadow(tmp_path, "torch", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    r = run_peer("pyg", files["dense"], _spec(), env=env, timeout_s=300)
    assert "SIGKILL" in r["error"] and "before writing a result" in r["error"]
    assert r["epoch_time_s"] is None and r["peak_rss_bytes"] is None


def _write_spec(d: Path, spec: dict) -> Path:
    p = d / "spec.json"
    p.write_text(json.dumps(spec))
    return p


def test_spec_not_matching_data_names_the_field(files, tmp_path):
    r = run_peer("pyg", files["dense"], _write_spec(tmp_path, _spec(layers=[F + 1, 4, C])), timeout_s=300)
    assert "'layers'" in r["error"] and r["epoch_time_s"] is None


def test_missing_dataset_key_is_named(tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, edge_index=EDGES, y=np.zeros(N, np.int64), x=np.zeros((N, F), np.float32))
    r = run_peer("dgl", bad, _spec(), timeout_s=300)
    assert "missing key 'train_mask'" in r["error"]


def test_unknown_peer():
    r = run_peer("jraph", "nowhere.npz", _spec())
    assert "unknown peer 'jraph'" in r["error"] and set(r) == set(RESULT_KEYS)


@pytest.mark.parametrize("field,value", [("dropout", 1.5), ("epochs", 0), ("layers", [4]), ("threads", "2"),
                                         ("model", "transformer"), ("aggr", "max"), ("heads", [2, 1, 1]),
                                         ("norms", [True, False, False]), ("bias", 1), ("warmup", 4),
                                         ("colour", 1), ("num_relations", 3), ("num_bases", 2),
                                         ("pyg_conv", "RGCNConv")])
def test_bad_spec_names_the_field(field, value):
    with pytest.raises(SpecError, match=f"'{field}'"):
        parse_spec(_spec(**{field: value}))


@pytest.mark.parametrize("over,message", [({"edge_weight": 1}, "expected true or false"),
                                          ({"edge_weight": True, "model": "sage", "aggr": "mean"},
                                           "only a gcn model weighs its edges, not sage")])
def test_bad_edge_weight_spec_names_the_field(over, message):
    with pytest.raises(SpecError, match=f"spec field 'edge_weight': {message}"):
        parse_spec(_spec(**over))


@pytest.mark.parametrize("over,field", [({}, "num_relations"), ({"num_relations": 0}, "num_relations"),
                                        ({"num_relations": 3, "num_bases": 0}, "num_bases"),
                                        ({"num_relations": 3, "pyg_conv": "RGATConv"}, "pyg_conv"),
                                        ({"num_relations": 3, "aggr": "sum"}, "aggr")])
def test_bad_rgcn_spec_names_the_field(over, field):
    with pytest.raises(SpecError, match=f"'{field}'"):
        parse_spec(_spec(model="rgcn", **over))


def test_rgcn_parameters_are_named_and_shaped():
    spec = parse_spec(_spec(model="rgcn", layers=[7, 5, 3], num_relations=4, num_bases=2))
    assert spec.parameters(0) == {"V": (2, 7, 5), "A": (4, 2), "S": (7, 5), "b": (5,)}
    spec = parse_spec(_spec(model="rgcn", layers=[7, 5, 3], num_relations=4, bias=False))
    assert spec.parameters(1) == {"W": (4, 5, 3), "S": (5, 3)}


# ---------------------------------------------------------------------------------------------
# Memory helpers and the analytic minimum
# ---------------------------------------------------------------------------------------------
def test_rss_helpers_see_an_allocation():
    before = memory.peak_rss_bytes()
    block = np.ones(64 << 20, dtype=np.uint8)          # 64 MiB, touched
    assert memory.current_rss_bytes() >= block.nbytes
    assert memory.vm_hwm_bytes() >= memory.current_rss_bytes() - (1 << 20)
    assert memory.peak_rss_bytes() >= max(before, block.nbytes)


def test_analytic_minimum_by_hand():
    # N=10, E=30, F=8, hidden [4], C=3: params = 8*4+4 + 4*3+3 = 51
    parts = memory.analytic_minimum_breakdown(10, 30, 8, [4], 3)
    assert parts == {
        "graph": 11 * 8 + 30 * 4 + 10 * 4,
        "features": 10 * 8 * 4,
        "labels": 10 * 4 + 10,
        "parameters": 51 * 4 * 4,
        "activations": 10 * 4 * (4 + 3),
        "dropout": 5,                                   # ceil(10*4/8)
        "workspace": 2 * 10 * 4 * 4,
    }
    assert memory.analytic_minimum_bytes(10, 30, 8, [4], 3) == sum(parts.values())
    sparse = memory.analytic_minimum_breakdown(10, 30, 8, [4], 3, sparse_nnz=12)
    assert sparse["features"] == 11 * 8 + 12 * 8
    no_adam = memory.analytic_minimum_breakdown(10, 30, 8, [4], 3, adam=False, dropout=False)
    assert no_adam["parameters"] == 51 * 4 * 2 and no_adam["dropout"] == 0


def test_analytic_minimum_of_an_rgcn_by_hand():
    # N=10, E=30, R=4 relations, F=N featureless (no input stored), hidden [4], C=3
    parts = memory.analytic_minimum_breakdown(10, 30, 10, [4], 3, relations=4, identity_input=True)
    assert parts["graph"] == 11 * 8 + 30 * 4 + 30 * 4 + 30 * 4      # CSR, edge type, 1/c_(i,r)
    assert parts["features"] == 0
    assert parts["parameters"] == ((4 * 10 * 4 + 10 * 4 + 4) + (4 * 4 * 3 + 4 * 3 + 3)) * 4 * 4
    bases = memory.analytic_minimum_breakdown(10, 30, 10, [4], 3, relations=4, bases=2, identity_input=True)
    assert bases["parameters"] == ((2 * 10 * 4 + 4 * 2 + 10 * 4 + 4) + (2 * 4 * 3 + 4 * 2 + 4 * 3 + 3)) * 4 * 4
    assert {k: v for k, v in parts.items() if k not in ("graph", "features", "parameters")} == \
        {k: v for k, v in memory.analytic_minimum_breakdown(10, 30, 10, [4], 3).items()
         if k not in ("graph", "features", "parameters")}


@pytest.mark.parametrize("args,name", [((0, 1, 1, [2], 2), "N"), ((3, 1, 1, [0], 2), r"widths\[0\]"),
                                       ((3, 1, 1, [2], 2.5), "classes")])
def test_analytic_minimum_rejects_bad_arguments(args, name):
    with pytest.raises(memory.MemoryModelError, match=name):
        memory.analytic_minimum_bytes(*args)


# ---------------------------------------------------------------------------------------------
# Machine limits
# ---------------------------------------------------------------------------------------------
def test_stream_kernels_compute_copy_and_triad():
    from morphgen.bench.machine import load_kernels

    ffi, lib = load_kernels()
    rng = np.random.default_rng(0)
    b, c = rng.standard_normal(1001), rng.standard_normal(1001)
    a = np.zeros(1001)
    p = lambda v: ffi.cast("double *", ffi.from_buffer(v))   # noqa: E731
    lib.mg_copy(p(a), p(b), a.size, 2)
    np.testing.assert_array_equal(a, b)
    lib.mg_triad(p(a), p(b), p(c), 3.0, a.size, 2)
    np.testing.assert_allclose(a, b + 3.0 * c, rtol=1e-14, atol=1e-15)   # FMA may round once less


def test_sgemm_kernel_matches_numpy():
    from morphgen.bench.machine import load_kernels

    ffi, lib = load_kernels()
    rng = np.random.default_rng(1)
    A = rng.standard_normal((7, 5), dtype=np.float32)
    B = rng.standard_normal((5, 3), dtype=np.float32)
    Cm = np.zeros((7, 3), dtype=np.float32)
    t = np.zeros(2)
    f = lambda v, ty: ffi.cast(ty, ffi.from_buffer(v))   # noqa: E731
    lib.mg_time_sgemm(7, 3, 5, f(A, "float *"), f(B, "float *"), f(Cm, "float *"), 1, 2, f(t, "double *"))
    np.testing.assert_allclose(Cm, A @ B, rtol=1e-5, atol=1e-5)
    assert (t > 0).all()


def test_measure_machine_small():
    from morphgen.bench.machine import MachineError, measure_machine

    m = measure_machine(threads=2, stream_elements=1 << 20, gemm_size=128, reps=2)
    # Rates only need to be real measurements: the machine may be busy, so no lower bound.
    assert all(np.isfinite(m[k]) and m[k] > 0 for k in ("copy_gbs", "triad_gbs", "sgemm_gflops"))
    assert m["threads"] == 2 and m["cores"] >= 1 and m["cpu_model"]
    # The kernels' vector ISA is the widest this CPU has (simd.h), and the report says which.
    flags = next((line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("flags")), [])
    widest = "avx512" if "avx512f" in flags else "avx2" if {"avx2", "fma"} <= set(flags) else "portable"
    assert m["kernel_isa"] == widest
    with pytest.raises(MachineError, match="threads"):
        measure_machine(threads=0)
