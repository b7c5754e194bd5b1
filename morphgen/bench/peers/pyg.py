"""PyTorch Geometric peer: full-batch GCN (GCNConv), GraphSAGE (SAGEConv), GAT, GIN, APPNP, SGC (SGConv),
GCNII, EdgeConv, R-GCN (RGCNConv), R-GAT (RGATConv), HGT (HGTConv, in pyg_hgt.py).

    python -m morphgen.bench.peers.pyg --data D.npz --spec SPEC.json --out OUT.json

Configuration (the fastest PyG offers on this machine without its optional compiled extensions):
- adjacency: a torch sparse CSR matrix adj_t (row = destination, column = source), which GCNConv
  multiplies with torch's CSR SpMM; torch_sparse.SparseTensor is used instead when that extension
  is installed.
- normalisation: GCNConv(cached=True) computes gcn_norm once (first epoch, inside warm-up):
  Â = D^-1/2 (A + I) D^-1/2 with D the IN-degree (self loop included) on both sides, also on
  directed graphs; the file's own self loops are dropped first and gcn_norm adds one per node
  (on a torch sparse adjacency gcn_norm computes A + I, which would double an existing loop).
- SAGE: SAGEConv(aggr = spec.aggr): lin_l (neighbours, with the bias) after the mean or max over
  in-edges, lin_r (the node itself, no bias); no self loops are added and none are removed.
- GAT: GATConv(out / heads, heads, concat) on edge_index with the self loops already in it (the
  file's removed, one per node added, once before training: add_self_loops=False); attention
  dropout and slope from the spec.
- GIN: GINConv(gin_mlp, eps 0, not trained) on adj_t, no self loops (the node's own row is GIN's
  (1 + eps) x term).
- features: a torch sparse CSR tensor when spec.sparse_features and the file stores CSR features
  (GCNConv's linear layer multiplies it with sparse @ dense), otherwise dense float32. SAGEConv
  and GINConv aggregate their raw input first, which torch cannot do with sparse features: dense
  for them.
- APPNP: its MLP of torch_geometric.nn.Linear layers (which multiply sparse CSR features too),
  then APPNP(K = spec.hops, alpha = spec.teleport, cached) on adj_t: gcn_norm as GCNConv's,
  computed once.
- SGC: SGConv(K = spec.hops, cached) on adj_t: the K propagations of the features computed in the
  first epoch (inside warm-up) and reused; dense features (torch cannot propagate sparse ones).
- GCNII: torch_geometric.nn.Linear, GCN2Conv(alpha = spec.teleport, theta = spec.theta, layer
  l, shared_weights, cached) per hidden layer on adj_t (gcn_norm as GCNConv's), Linear; dropout
  before every GCN2Conv and the classifier, as PyG's GCNII example.
- EdgeConv: EdgeConv(Sequential(Linear(2 * in, out), ReLU()), aggr "max") on edge_index as
  stored (no loops added), then a Linear classifier; the Linear's weight is the program's Wi
  stacked on Wd (it reads [x_v, x_u - x_v]); dense features.
- R-GCN: RGCNConv or FastRGCNConv (spec.pyg_conv) with aggr "mean" (the mean over each relation's
  in-edges is R-GCN's 1/c_{i,r}), root_weight (the self-loop weight), bias, num_bases for the
  basis decomposition; edge_index [2, E] and edge_type [E] as stored (no loops added or removed).
  RGCNConv loops over the relations (a masked edge_index and one propagate each); FastRGCNConv
  gathers one weight matrix per edge. A featureless dataset is given as x=None (in_channels = N:
  the first layer's input is the node index, an embedding lookup of the weights, never an N x N
  identity matrix); features are dense.
- R-GAT: RGATConv(out / heads, heads, concat, additive self-attention across relations, dim 1,
  negative slope and attention dropout from the spec, bias) on edge_index and edge_type as
  stored; dense features (a featureless dataset as the dense identity: RGATConv multiplies every
  edge's input row with its relation's matrix, so node ids would not do).
- device: with spec.device "cuda:N" the adjacency, features and model are moved to that GPU before
  the baseline is taken (torch's CUDA CSR SpMM then does the aggregation).
"""
from __future__ import annotations

import sys

import numpy as np

from morphgen.bench.memory import start_training_peak

from .dataset import NodeClassificationData, load_init_weights
from .pyg_hgt import train_hgt
from .runner import PeerUnavailable, run_main
from .spec import BenchSpec
from .torch_loop import (build_gcnii, build_stack, device_config, gin_mlp, gin_targets, load_weights,
                         model_config, setup_torch, torch_device, train_full_batch)


def _import_pyg():
    try:
        import torch_geometric
        import torch_geometric.nn  # noqa: F401  (the convolutions)
    except ImportError as exc:
        raise PeerUnavailable(f"torch_geometric cannot be imported ({exc})") from exc
    return torch_geometric


def _convs(torch, spec: BenchSpec) -> list:
    from torch_geometric.nn import FastRGCNConv, GATConv, GCNConv, GINConv, RGCNConv, SAGEConv
    dims = list(zip(spec.layers[:-1], spec.layers[1:]))
    if spec.model == "rgat":
        from torch_geometric.nn import RGATConv
        return [RGATConv(i, o // h, spec.num_relations, heads=h, concat=True, negative_slope=spec.negative_slope,
                         dropout=spec.attention_dropout, bias=spec.bias, attention_mode="additive-self-attention",
                         attention_mechanism="across-relation", dim=1)
                for (i, o), h in zip(dims, spec.heads)]
    if spec.model == "rgcn":
        conv = {"RGCNConv": RGCNConv, "FastRGCNConv": FastRGCNConv}[spec.pyg_conv]
        return [conv(i, o, spec.num_relations, num_bases=spec.num_bases, aggr="mean", root_weight=True,
                     bias=spec.bias) for i, o in dims]
    if spec.model == "gin":
        return [GINConv(gin_mlp(torch, i, o, norm), eps=0.0, train_eps=False)
                for (i, o), norm in zip(dims, spec.norms)]
    if spec.model == "gat":
        return [GATConv(i, o // h, heads=h, concat=True, negative_slope=spec.negative_slope,
                        dropout=spec.attention_dropout, add_self_loops=False, bias=spec.bias)
                for (i, o), h in zip(dims, spec.heads)]
    if spec.model == "sage":
        return [SAGEConv(i, o, aggr=spec.aggr, bias=spec.bias) for i, o in dims]
    if spec.model == "appnp":
        from torch_geometric.nn import Linear
        return [Linear(i, o, bias=spec.bias) for i, o in dims]
    if spec.model == "edgeconv":
        from torch_geometric.nn import EdgeConv, Linear
        (i, o), (_, c) = dims
        mlp = torch.nn.Sequential(Linear(2 * i, o, bias=spec.bias), torch.nn.ReLU())
        return [EdgeConv(mlp, aggr="max"), Linear(o, c, bias=spec.bias)]
    if spec.model == "gcnii":
        from torch_geometric.nn import GCN2Conv, Linear
        return ([Linear(*dims[0], bias=spec.bias)]
                + [GCN2Conv(o, spec.teleport, spec.theta, layer=layer, shared_weights=True, cached=True)
                   for layer, (_, o) in enumerate(dims[1:-1], start=1)]
                + [Linear(*dims[-1], bias=spec.bias)])
    if spec.model == "sgc":
        from torch_geometric.nn import SGConv
        return [SGConv(i, o, K=spec.hops, cached=True, add_self_loops=True, bias=spec.bias) for i, o in dims]
    return [GCNConv(i, o, cached=True, normalize=True, add_self_loops=spec.self_loops, bias=spec.bias)
            for i, o in dims]


# Where morphgen's parameters go in each convolution: load_weights targets (attribute, name, transpose).
_TARGETS = {
    "gcn": (("lin.weight", "W", True), ("bias", "b", False)),
    "appnp": (("weight", "W", True), ("bias", "b", False)),
    "sgc": (("lin.weight", "W", True), ("lin.bias", "b", False)),
    "sage": (("lin_l.weight", "W_neigh", True), ("lin_r.weight", "W_self", True), ("lin_l.bias", "b", False)),
    "gat": (("lin.weight", "W", True), ("att_src", "a_src", False), ("att_dst", "a_dst", False),
            ("bias", "b", False)),
    # weight: [R, in, out] per relation, or the bases [B, in, out] with comp [R, B]; root [in, out]
    "rgcn": (("weight", "W", False), ("weight", "V", False), ("comp", "A", False), ("root", "S", False),
             ("bias", "b", False)),
    # weight [R, in, heads * out]; q and k [heads * out, heads] (dim 1)
    "rgat": (("weight", "W", False), ("q", "Q", False), ("k", "K", False), ("bias", "b", False)),
}


def weight_targets(conv, model: str) -> tuple:
    """load_weights targets of a PyG convolution of `model`: where each of morphgen's arrays goes."""
    if model == "gin":
        return tuple((f"nn.{path}", name, t) for path, name, t in gin_targets(conv.nn))
    if model == "gcnii":                  # GCN2Conv's one shared [in, out] matrix, or a Linear's
        return (("weight1", "W", False),) if hasattr(conv, "weight1") else _TARGETS["appnp"]
    if model == "edgeconv":               # the message MLP's Linear, or the classifier
        return (("nn.0.weight", "W", True), ("nn.0.bias", "b", False)) if hasattr(conv, "nn") else _TARGETS["appnp"]
    return _TARGETS[model]


_NORMALISATION = {
    "gcn": "gcn_norm cached: D_in^-1/2 (A+I) D_in^-1/2 (in-degree on both sides)",
    "sage": "none (SAGEConv: lin_l(aggr over in-edges) + lin_r(x))",
    "gat": "softmax of leaky_relu(a_src . Wh[src] + a_dst . Wh[dst]) over each node's in-edges",
    "gin": "none (GINConv: mlp(x + sum over in-edges))",
    "appnp": "APPNP gcn_norm cached: D_in^-1/2 (A+I) D_in^-1/2, h <- (1 - alpha) A_hat h + alpha h0",
    "sgc": "SGConv gcn_norm: D_in^-1/2 (A+I) D_in^-1/2, A_hat^K x cached",
    "gcnii": "GCN2Conv gcn_norm cached: D_in^-1/2 (A+I) D_in^-1/2, (1 - alpha) A_hat h + alpha h0",
    "edgeconv": "none (EdgeConv: max over in-edges of nn([x_v, x_u - x_v]))",
    "rgcn": "aggr mean per relation: 1/c_{i,r}, c_{i,r} = in-edges of node i of relation r",
    "rgat": "softmax of leaky_relu(W_r x_i . q + W_r x_j . k) over each node's in-edges (across relations), per head",
}


def _edge_index(torch, data: NodeClassificationData, self_loops: bool):
    """edge_index [2, E] (source row first); with self_loops, exactly one loop per node."""
    src, dst = data.src, data.dst
    if self_loops:
        keep = src != dst
        loops = np.arange(data.num_nodes, dtype=np.int64)
        src, dst = np.concatenate([src[keep], loops]), np.concatenate([dst[keep], loops])
    return torch.from_numpy(np.stack([src, dst])), "edge_index [2, E] (message passing: GATConv, EdgeConv)"


def _adjacency(torch, data: NodeClassificationData, self_loops: bool, weighted: bool = False):
    """adj_t (rows = destinations); ``weighted``: its values are the edge weights, which gcn_norm
    sums into the degrees (the loops it adds weigh 1)."""
    import torch_geometric.typing as pyg_typing

    src, dst = data.src, data.dst
    weight = data.edge_weights() if weighted else None
    if self_loops:
        # gcn_norm on a torch sparse adjacency adds I to A, so an existing loop would get weight 2
        # (with edge_index or SparseTensor it keeps weight 1). Dropping the file's own loops makes
        # every format, and DGL, normalise the same A + I.
        keep = src != dst
        src, dst = src[keep], dst[keep]
        weight = None if weight is None else weight[keep]
    rows = torch.from_numpy(dst)          # adj_t: messages flow source -> destination
    cols = torch.from_numpy(src)
    values = None if weight is None else torch.from_numpy(weight)
    n = data.num_nodes
    what = " weighted by the edge weights" if weighted else ""
    if pyg_typing.WITH_TORCH_SPARSE:
        from torch_sparse import SparseTensor
        return (SparseTensor(row=rows, col=cols, value=values, sparse_sizes=(n, n)),
                "torch_sparse.SparseTensor adj_t" + what)
    from torch_geometric.utils import to_torch_csr_tensor
    adj_t = to_torch_csr_tensor(torch.stack([rows, cols]), edge_attr=values, size=(n, n))
    return adj_t, "torch.sparse_csr adj_t (rows = destinations)" + what


def _features(torch, spec: BenchSpec, data: NodeClassificationData):
    if spec.sparse_features and spec.model in ("sage", "gin", "sgc", "edgeconv"):
        return torch.from_numpy(data.dense_features()), "dense float32 (the convolution aggregates its raw input, which torch cannot do sparse)"
    if spec.sparse_features:
        indptr, indices, values = data.csr_features()
        x = torch.sparse_csr_tensor(torch.from_numpy(indptr), torch.from_numpy(indices),
                                    torch.from_numpy(values), size=(data.num_nodes, data.num_features))
        return x, "sparse (torch.sparse_csr)"
    return torch.from_numpy(data.dense_features()), "dense float32"


def _relational_inputs(torch, data: NodeClassificationData):
    """edge_index [2, E] and edge_type [E] as stored; x None for a featureless dataset (node ids)."""
    edge_index = torch.from_numpy(np.stack([data.src, data.dst]))
    edge_type = torch.from_numpy(data.edge_types())
    if data.featureless:
        return (edge_index, edge_type), None, "none: x=None, in_channels = N (node ids, an embedding lookup)"
    return (edge_index, edge_type), torch.from_numpy(data.dense_features()), "dense float32"


def train(spec: BenchSpec, data: NodeClassificationData) -> dict:
    torch = setup_torch(spec)
    torch_geometric = _import_pyg()
    import warnings
    warnings.filterwarnings("ignore", message=".*[Ss]parse.*")   # torch's "beta"/invariant notices
    device = torch_device(torch, spec)
    if spec.model in ("rgcn", "rgat"):
        return _train_rgcn(torch, torch_geometric, spec, data, device)
    if spec.model == "hgt":
        return train_hgt(torch, torch_geometric, spec, data, device)
    if spec.model in ("gat", "edgeconv"):
        adj_t, adj_desc = _edge_index(torch, data, spec.self_loops)
    else:
        adj_t, adj_desc = _adjacency(torch, data, spec.self_loops, spec.edge_weight)
    x, feat_desc = _features(torch, spec, data)
    adj_t, x = adj_t.to(device), x.to(device)
    baseline = start_training_peak()      # libraries imported, data in tensors, no model yet
    convs = _convs(torch, spec)
    if spec.init_weights is not None:
        with torch.no_grad():
            for conv, weights in zip(convs, load_init_weights(spec)):
                load_weights(torch, conv, weights, weight_targets(conv, spec.model))
    if spec.model == "gcnii":
        model = build_gcnii(torch, convs[0], convs[1:-1], convs[-1], spec.dropout,
                            lambda conv, h, h0: conv(h, h0, adj_t), spec.activation, spec.input_dropout)
    elif spec.model == "edgeconv":        # the classifier takes no graph
        model = build_stack(torch, convs, spec.dropout, lambda conv, h: conv(h, adj_t) if hasattr(conv, "nn")
                            else conv(h), spec.activation, input_dropout=spec.input_dropout)
    elif spec.model == "appnp":           # the MLP's layers take no graph; the propagation follows them
        from torch_geometric.nn import APPNP
        propagation = APPNP(spec.hops, spec.teleport, cached=True)
        model = build_stack(torch, convs, spec.dropout, lambda conv, h: conv(h), spec.activation,
                            input_dropout=spec.input_dropout, propagate=lambda h: propagation(h, adj_t))
    else:
        model = build_stack(torch, convs, spec.dropout, lambda conv, h: conv(h, adj_t), spec.activation,
                            input_dropout=spec.input_dropout)
    result = train_full_batch(torch, model, lambda: model(x), spec, data, device)
    result["baseline_rss_bytes"] = baseline
    default_init = {"gcn": "GCNConv default (glorot)", "sage": "SAGEConv default (kaiming uniform)",
                    "gat": "GATConv default (glorot)", "gin": "torch Linear default (kaiming uniform)",
                    "appnp": "torch_geometric Linear default (kaiming uniform)",
                    "sgc": "SGConv's Linear default (kaiming uniform)",
                    "gcnii": "Linear default (kaiming uniform), GCN2Conv default (glorot)",
                    "edgeconv": "Linear default (kaiming uniform)"}[spec.model]
    result["config"] = {
        **model_config(spec),
        "adjacency": adj_desc,
        "features": feat_desc,
        "normalisation": _NORMALISATION[spec.model] + (" (weighted degrees)" if spec.edge_weight else ""),
        "self_loops": "existing removed, one per node added" if spec.self_loops else "none added",
        "init": "given init_weights" if spec.init_weights else f"{default_init}, seed 0",
        "threads": spec.threads,
        "versions": {"torch": torch.__version__, "torch_geometric": torch_geometric.__version__},
        **device_config(torch, device),
    }
    return result


def _train_rgcn(torch, torch_geometric, spec: BenchSpec, data: NodeClassificationData, device) -> dict:
    """R-GCN (RGCNConv / FastRGCNConv) or R-GAT (RGATConv): typed edges as stored."""
    (edge_index, edge_type), x, feat_desc = _relational_inputs(torch, data)
    if spec.model == "rgat" and x is None:
        x, feat_desc = torch.eye(data.num_nodes), "the dense identity (featureless: RGATConv takes no node ids)"
    edge_index, edge_type = edge_index.to(device), edge_type.to(device)
    x = x.to(device) if x is not None else None
    baseline = start_training_peak()      # libraries imported, data in tensors, no model yet
    convs = _convs(torch, spec)
    if spec.init_weights is not None:
        with torch.no_grad():
            for conv, weights in zip(convs, load_init_weights(spec)):
                load_weights(torch, conv, weights, _TARGETS[spec.model])
    model = build_stack(torch, convs, spec.dropout, lambda conv, h: conv(h, edge_index, edge_type), spec.activation,
                        input_dropout=spec.input_dropout)
    result = train_full_batch(torch, model, lambda: model(x), spec, data, device)
    result["baseline_rss_bytes"] = baseline
    if spec.model == "rgat":
        conv_desc = (f"RGATConv(heads={list(spec.heads)}, concat, additive-self-attention, across-relation, dim=1, "
                     f"negative_slope={spec.negative_slope}, bias={spec.bias})")
    else:
        conv_desc = f"{spec.pyg_conv}(aggr='mean', root_weight=True, bias={spec.bias}, num_bases={spec.num_bases})"
    result["config"] = {
        **model_config(spec),
        "conv": conv_desc,
        "adjacency": "edge_index [2, E] + edge_type [E] (as stored)",
        "features": feat_desc + (" (sparse_features requested: the relational convolutions take dense input)"
                                 if spec.sparse_features else ""),
        "normalisation": _NORMALISATION[spec.model],
        "self_loops": "none (root_weight is the self connection)" if spec.model == "rgcn" else "none",
        "init": "given init_weights" if spec.init_weights else f"{conv_desc.split('(')[0]} default (glorot), seed 0",
        "threads": spec.threads,
        "versions": {"torch": torch.__version__, "torch_geometric": torch_geometric.__version__},
        **device_config(torch, device),
    }
    return result


def main(argv=None) -> int:
    return run_main("pyg", train, argv)


if __name__ == "__main__":
    sys.exit(main())
