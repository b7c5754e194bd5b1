"""DGL peer: full-batch GCN (GraphConv(norm='both')), GraphSAGE (SAGEConv), GAT, GIN, APPNP (APPNPConv),
SGC (SGConv), GCNII (GCN2Conv), EdgeConv, R-GCN (RelGraphConv).

    python -m morphgen.bench.peers.dgl --data D.npz --spec SPEC.json --out OUT.json

Configuration and DGL conventions (see DEVELOPERS.md, "Benchmark peers"):
- graph: dgl.graph((src, dst)); with self_loops, existing self loops are removed and one loop per
  node added (the same graph PyG's add_remaining_self_loops builds); the sparse formats are created
  before the first epoch so format conversion is not timed.
- normalisation 'both': h_v = sum_{u->v} h_u / sqrt(outdeg(u) * indeg(v)), degrees clamped at 1.
  On a directed graph the SOURCE side uses the out-degree, unlike PyG (in-degree on both sides);
  on a symmetric graph the two agree.
- SAGE: SAGEConv(aggregator_type 'mean'): fc_neigh without bias, fc_self with it; DGL projects before aggregating when the layer narrows. DGL has no max aggregator
  ('pool' applies a linear layer and ReLU before the max), so SAGE-max is refused, not approximated.
- GAT: GATConv(out / heads, heads) on the graph with one loop per node, its [N, heads, out]
  output flattened (concatenated heads); attention dropout and slope from the spec.
- GIN: GINConv(gin_mlp, 'sum', init_eps 0, learn_eps False), no self loops.
- APPNP: its MLP of torch Linear layers, then APPNPConv(k = spec.hops, alpha = spec.teleport) on
  the graph with one loop per node; APPNPConv normalises as GraphConv's 'both' (out-degree at the
  source, in-degree at the destination; the same on a symmetric graph).
- SGC: SGConv(k = spec.hops, cached=True) on the graph with one loop per node: the propagated
  features computed in the first epoch (inside warm-up) and reused; in-degree on both sides.
- GCNII: torch Linear, GCN2Conv(layer l, alpha = spec.teleport, lambda_ = spec.theta,
  project_initial_features, no bias) per hidden layer on the graph with one loop per node (in-degree
  on both sides), Linear; dropout before every GCN2Conv and the classifier, as PyG's example.
- EdgeConv: EdgeConv(batch_norm=False) on the graph as stored, then a torch Linear classifier.
  DGL's computes theta(x_v - x_u) + phi(x_v), max over in-edges: theta's weight is the program's
  -Wd (Adam's steps keep the sign: the gradient and both moments flip with it), phi's is Wi with
  the bias; theta's bias is held at 0 (two biases summed would train twice as fast under Adam).
  The ReLU of the program's message follows the max (the same, ReLU being monotone).
- R-GCN: RelGraphConv(num_rels, regularizer None or 'basis' with num_bases, self_loop=True, bias),
  the edge norm 1/c_{i,r} (c_{i,r}: in-edges of node i of relation r) passed as `norm`; the edges
  are sorted by type once before training (a stable sort) and the layers called with
  presorted=True (TypedLinear's segment_mm instead of gather_mm). A featureless dataset's first
  layer takes node ids: RelGraphConv with its message reading row (etype, source id) of the
  relation weights and the self-loop weight's row of the node, the lookup an identity input
  amounts to (RelGraphConv itself would gather an N-wide feature row per edge).
- features: always dense. GraphConv rejects sparse input features, so spec.sparse_features is
  recorded in the config as not honoured rather than silently ignored.
- device: with spec.device "cuda:N" the graph (after its self loops are fixed), features and model
  are moved to that GPU; a dgl without CUDA support (the CPU wheel) is an error, not a CPU run.
- DGL 2.1.0 imports on torch 2.13 only if its `graphbolt` submodule (compiled against other torch
  versions, unused here) is kept from loading: a stub module is put in sys.modules first.
"""
from __future__ import annotations

import os
import sys
import types

import numpy as np

from morphgen.bench.memory import start_training_peak
from morphgen.errors import UserError

from .dataset import NodeClassificationData, load_init_weights
from .runner import PeerUnavailable, run_main
from .spec import BenchSpec
from .torch_loop import (build_gcnii, build_stack, device_config, gin_mlp, gin_targets, load_weights,
                         model_config, setup_torch, torch_device, train_full_batch)

_GRAPHBOLT = "dgl.graphbolt"


def import_dgl():
    """Import dgl with its graphbolt submodule stubbed out (it fails to load on this torch)."""
    os.environ.setdefault("DGLBACKEND", "pytorch")   # otherwise dgl writes ~/.dgl/config.json
    stubbed = _GRAPHBOLT not in sys.modules
    if stubbed:
        sys.modules[_GRAPHBOLT] = types.ModuleType(_GRAPHBOLT)
    try:
        import dgl
        import dgl.nn.pytorch  # noqa: F401  (the convolutions)
    except ImportError as exc:
        if stubbed:
            sys.modules.pop(_GRAPHBOLT, None)
        raise PeerUnavailable(f"dgl cannot be imported ({exc})") from exc
    return dgl


def require_cuda(dgl, device) -> None:
    """torch may see the GPU while dgl cannot use it: the PyPI wheel is CPU-only, and moving a graph
    there fails deep in libdgl. Asking dgl's device API first gives a one-line error instead."""
    if device.type == "cuda" and not dgl.ndarray.gpu(device.index).exist:
        raise UserError(f"device {device}: dgl has no CUDA device here (dgl {dgl.__version__} is built "
                        f"without CUDA, or does not see GPU {device.index})")


def build_graph(dgl, torch, data: NodeClassificationData, self_loops: bool, device=None):
    g = dgl.graph((torch.from_numpy(data.src), torch.from_numpy(data.dst)), num_nodes=data.num_nodes)
    if self_loops:
        g = dgl.add_self_loop(dgl.remove_self_loop(g))
    if device is not None:
        g = g.to(device)
    g.create_formats_()                   # on the device the epochs use
    return g


def node_id_rel_graph_conv(dgl):
    """RelGraphConv whose input is node ids (a featureless graph's identity input): the message of
    edge e is row src(e) of relation etype(e)'s weight matrix, scaled by the edge norm, and the
    self loop adds row v of loop_weight. The same parameters and message passing as RelGraphConv."""
    from dgl import function as fn
    from dgl.nn.pytorch import RelGraphConv

    class NodeIdRelGraphConv(RelGraphConv):
        def message(self, edges):
            w = self.linear_r.get_weight()                     # [R, N, out]
            rows = edges.data["etype"] * w.shape[1] + edges.src["id"]
            m = w.reshape(-1, w.shape[2])[rows]
            if "norm" in edges.data:
                m = m * edges.data["norm"]
            return {"m": m}

        def forward(self, g, ids, etypes, norm=None, *, presorted=False):
            self.presorted = presorted
            with g.local_scope():
                g.srcdata["id"] = ids
                if norm is not None:
                    g.edata["norm"] = norm
                g.edata["etype"] = etypes
                g.update_all(self.message, fn.sum("m", "h"))
                h = g.dstdata["h"]
                if self.bias:
                    h = h + self.h_bias
                if self.self_loop:
                    h = h + self.loop_weight[ids[: g.num_dst_nodes()]]
                return self.dropout(h)

    return NodeIdRelGraphConv


def _rgcn_convs(dgl, spec: BenchSpec, featureless: bool) -> list:
    from dgl.nn.pytorch import RelGraphConv
    dims = list(zip(spec.layers[:-1], spec.layers[1:]))
    regularizer = "basis" if spec.num_bases else None
    return [(node_id_rel_graph_conv(dgl) if featureless and k == 0 else RelGraphConv)(
                i, o, spec.num_relations, regularizer=regularizer, num_bases=spec.num_bases, bias=spec.bias,
                self_loop=True)
            for k, (i, o) in enumerate(dims)]


def relational_graph(dgl, torch, data: NodeClassificationData, device=None):
    """The typed graph with its edges sorted by type (stable), the types and R-GCN's edge norm
    1/c_{i,r} in that order."""
    etype = data.edge_types()
    order = np.argsort(etype, kind="stable")
    src, dst, etype = data.src[order], data.dst[order], etype[order]
    _, inverse, counts = np.unique(dst * max(data.num_etypes, 1) + etype, return_inverse=True, return_counts=True)
    norm = (1.0 / counts[inverse]).astype(np.float32)[:, None]
    g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=data.num_nodes)
    etypes, norm = torch.from_numpy(etype), torch.from_numpy(norm)
    if device is not None:
        g, etypes, norm = g.to(device), etypes.to(device), norm.to(device)
    g.create_formats_()
    return g, etypes, norm


def weighted_gcn_graph(dgl, torch, data: NodeClassificationData, device=None):
    """The graph with one loop per node (weight 1; the file's own loops removed, as build_graph
    does) and each edge's GCN coefficient w / sqrt(deg(src) deg(dst)), deg the weighted in-degree
    (PyG's gcn_norm; DGL's EdgeWeightNorm('both') would take the source's out-degree instead).
    Computed once, before the epochs, as GCNConv caches its own."""
    keep = data.src != data.dst
    loops = np.arange(data.num_nodes, dtype=np.int64)
    src = torch.from_numpy(np.concatenate([data.src[keep], loops]))
    dst = torch.from_numpy(np.concatenate([data.dst[keep], loops]))
    weight = torch.from_numpy(np.concatenate([data.edge_weights()[keep], np.ones(data.num_nodes, np.float32)]))
    degree = torch.zeros(data.num_nodes, dtype=torch.float32).index_add_(0, dst, weight)
    scale = degree.pow(-0.5).masked_fill(degree == 0, 0.0)
    g = dgl.graph((src, dst), num_nodes=data.num_nodes)
    coefficients = weight * scale[src] * scale[dst]
    if device is not None:
        g, coefficients = g.to(device), coefficients.to(device)
    g.create_formats_()
    return g, coefficients


def _convs(torch, spec: BenchSpec) -> list:
    from dgl.nn.pytorch import GATConv, GINConv, GraphConv, SAGEConv, SGConv
    dims = list(zip(spec.layers[:-1], spec.layers[1:]))
    if spec.model == "appnp":
        return [torch.nn.Linear(i, o, bias=spec.bias) for i, o in dims]
    if spec.model == "sgc":
        return [SGConv(i, o, k=spec.hops, cached=True, bias=spec.bias) for i, o in dims]
    if spec.model == "edgeconv":
        from dgl.nn.pytorch import EdgeConv
        (i, o), (_, c) = dims
        conv = EdgeConv(i, o, batch_norm=False, allow_zero_in_degree=True)
        conv.theta.bias.requires_grad_(False)          # phi's bias is the message's one bias
        with torch.no_grad():
            conv.theta.bias.zero_()
            if not spec.bias:
                conv.phi.bias.zero_()
        conv.phi.bias.requires_grad_(spec.bias)
        return [conv, torch.nn.Linear(o, c, bias=spec.bias)]
    if spec.model == "gcnii":
        from dgl.nn.pytorch import GCN2Conv
        return ([torch.nn.Linear(*dims[0], bias=spec.bias)]
                + [GCN2Conv(o, layer, alpha=spec.teleport, lambda_=spec.theta, project_initial_features=True,
                            bias=False) for layer, (_, o) in enumerate(dims[1:-1], start=1)]
                + [torch.nn.Linear(*dims[-1], bias=spec.bias)])
    if spec.model == "gin":
        return [GINConv(gin_mlp(torch, i, o, norm), "sum", init_eps=0.0, learn_eps=False)
                for (i, o), norm in zip(dims, spec.norms)]
    if spec.model == "gat":
        return [GATConv(i, o // h, h, attn_drop=spec.attention_dropout, negative_slope=spec.negative_slope,
                        allow_zero_in_degree=not spec.self_loops, bias=spec.bias)
                for (i, o), h in zip(dims, spec.heads)]
    if spec.model == "sage":
        if spec.aggr != "mean":
            raise UserError(f"DGL's SAGEConv has no '{spec.aggr}' aggregator (its 'pool' applies a linear "
                            f"layer and ReLU before the max, another model)")
        return [SAGEConv(i, o, "mean", bias=spec.bias) for i, o in dims]
    norm = "none" if spec.edge_weight else "both"      # weighted: the coefficients carry the norm
    return [GraphConv(i, o, norm=norm, weight=True, bias=spec.bias, allow_zero_in_degree=not spec.self_loops)
            for i, o in dims]


# Where morphgen's parameters go in each convolution: load_weights targets (attribute, name,
# transpose). GraphConv stores [in, out]; SAGEConv's one bias is fc_self's (except for its 'gcn'
# aggregator); GATConv's attn_l is the source side, attn_r the destination.
_TARGETS = {
    "gcn": (("weight", "W", False), ("bias", "b", False)),
    "appnp": (("weight", "W", True), ("bias", "b", False)),
    "sgc": (("fc.weight", "W", True), ("fc.bias", "b", False)),
    "sage": (("fc_neigh.weight", "W_neigh", True), ("fc_self.weight", "W_self", True), ("fc_self.bias", "b", False)),
    "gat": (("fc.weight", "W", True), ("attn_l", "a_src", False), ("attn_r", "a_dst", False), ("bias", "b", False)),
    # TypedLinear: W [R, in, out] per relation, or the bases [B, in, out] with coeff [R, B]
    "rgcn": (("linear_r.W", "W", False), ("linear_r.W", "V", False), ("linear_r.coeff", "A", False),
             ("loop_weight", "S", False), ("h_bias", "b", False)),
}


def _load_edgeconv(torch, conv, weights: dict) -> None:
    """morphgen's W (Wi stacked on Wd, [2 * in, out]) and b into EdgeConv's phi and theta."""
    w = weights["W"]
    fan_in = w.shape[0] // 2
    conv.phi.weight.copy_(torch.from_numpy(np.ascontiguousarray(w[:fan_in].T)))
    conv.theta.weight.copy_(torch.from_numpy(np.ascontiguousarray(-w[fan_in:].T)))
    if "b" in weights:
        conv.phi.bias.copy_(torch.from_numpy(weights["b"]))


def _targets(conv, model: str) -> tuple:
    if model == "gin":
        return tuple((f"apply_func.{path}", name, t) for path, name, t in gin_targets(conv.apply_func))
    if model == "gcnii":                  # GCN2Conv's one [in, out] matrix, or a Linear's
        return (("weight1", "W", False),) if hasattr(conv, "weight1") else _TARGETS["appnp"]
    if model == "edgeconv":               # the classifier (_load_edgeconv fills the EdgeConv)
        return _TARGETS["appnp"]
    return _TARGETS[model]


_NORMALISATION = {
    "gcn": "GraphConv norm='both': outdeg(src)^-1/2 * indeg(dst)^-1/2, degrees clamped at 1",
    "sage": "none (SAGEConv: fc_self(h) + fc_neigh(mean over in-edges))",
    "gat": "edge softmax of leaky_relu(attn_l . Wh[src] + attn_r . Wh[dst]) over in-edges",
    "gin": "none (GINConv: apply_func(x + sum over in-edges))",
    "appnp": "APPNPConv: outdeg(src)^-1/2 * indeg(dst)^-1/2 with one loop per node, "
             "h <- (1 - alpha) A_hat h + alpha h0",
    "sgc": "SGConv: indeg^-1/2 on both sides with one loop per node, A_hat^k x cached",
    "gcnii": "GCN2Conv: indeg^-1/2 on both sides with one loop per node, (1 - alpha) A_hat h + alpha h0",
    "edgeconv": "none (EdgeConv: max over in-edges of theta(x_v - x_u) + phi(x_v))",
    "rgcn": "edge norm 1/c_{i,r} (in-edges of node i of relation r) passed as RelGraphConv's norm",
}


def train(spec: BenchSpec, data: NodeClassificationData) -> dict:
    torch = setup_torch(spec)
    device = torch_device(torch, spec)
    dgl = import_dgl()
    require_cuda(dgl, device)
    if spec.model == "rgcn":
        return _train_rgcn(dgl, torch, spec, data, device)
    coefficients = None
    if spec.edge_weight:
        g, coefficients = weighted_gcn_graph(dgl, torch, data, device)
    else:
        g = build_graph(dgl, torch, data, spec.self_loops, device)
    x = torch.from_numpy(data.dense_features()).to(device)
    baseline = start_training_peak()      # libraries imported, data in tensors, no model yet
    convs = _convs(torch, spec)
    if spec.init_weights is not None:
        with torch.no_grad():
            for conv, weights in zip(convs, load_init_weights(spec)):
                if spec.model == "edgeconv" and hasattr(conv, "theta"):
                    _load_edgeconv(torch, conv, weights)
                else:
                    load_weights(torch, conv, weights, _targets(conv, spec.model))
    propagate = None
    if spec.model == "appnp":             # the MLP's layers take no graph; the propagation follows them
        from dgl.nn.pytorch import APPNPConv
        propagation = APPNPConv(spec.hops, spec.teleport)
        call, propagate = (lambda conv, h: conv(h)), (lambda h: propagation(g, h))   # noqa: E731
    elif spec.model == "gat":
        call = lambda conv, h: conv(g, h).flatten(1)          # noqa: E731
    elif spec.model == "edgeconv":        # the classifier takes no graph
        call = lambda conv, h: conv(g, h) if hasattr(conv, "theta") else conv(h)     # noqa: E731
    elif coefficients is not None:
        call = lambda conv, h: conv(g, h, edge_weight=coefficients)      # noqa: E731
    else:
        call = lambda conv, h: conv(g, h)                     # noqa: E731
    if spec.model == "gcnii":
        model = build_gcnii(torch, convs[0], convs[1:-1], convs[-1], spec.dropout,
                            lambda conv, h, h0: conv(g, h, h0), spec.activation, spec.input_dropout)
    else:
        model = build_stack(torch, convs, spec.dropout, call, spec.activation,
                            input_dropout=spec.input_dropout, propagate=propagate)
    result = train_full_batch(torch, model, lambda: model(x), spec, data, device)
    result["baseline_rss_bytes"] = baseline
    conv_name = {"gcn": "GraphConv", "sage": "SAGEConv", "gat": "GATConv", "gin": "GINConv", "appnp": "Linear",
                 "sgc": "SGConv", "gcnii": "GCN2Conv",
                 "edgeconv": "EdgeConv"}[spec.model]
    result["config"] = {
        **model_config(spec),
        "adjacency": "DGLGraph (formats coo/csr/csc created before training)",
        "features": "dense float32" + ((f" (sparse_features requested: {conv_name} rejects sparse input)"
                                        if spec.model not in ("appnp", "gcnii") else
                                        " (sparse_features requested: its first layer, a Linear, is given dense "
                                        "features as every DGL model here)") if spec.sparse_features else ""),
        "normalisation": (_NORMALISATION[spec.model] if not spec.edge_weight else
                          "GraphConv norm='none' given edge_weight = w / sqrt(deg(src) deg(dst)), deg the "
                          "weighted in-degree with a loop of weight 1 (PyG's gcn_norm), computed once"),
        "self_loops": "existing removed, one per node added" if spec.self_loops else "none added",
        "init": "given init_weights" if spec.init_weights else (
            "torch Linear default (kaiming uniform), seed 0" if spec.model in ("appnp", "edgeconv") else
            "torch Linear default (kaiming uniform), GCN2Conv default (normal), seed 0" if spec.model == "gcnii" else
            f"{conv_name} default (xavier), seed 0"),
        "threads": spec.threads,
        "versions": {"torch": torch.__version__, "dgl": dgl.__version__},
        **device_config(torch, device),
    }
    return result


def _train_rgcn(dgl, torch, spec: BenchSpec, data: NodeClassificationData, device) -> dict:
    g, etypes, norm = relational_graph(dgl, torch, data, device)
    if data.featureless:
        x, feat_desc = torch.arange(data.num_nodes, device=device), "none: node ids (first layer looks its weights up)"
    else:
        x, feat_desc = torch.from_numpy(data.dense_features()).to(device), "dense float32"
    baseline = start_training_peak()      # libraries imported, data in tensors, no model yet
    convs = _rgcn_convs(dgl, spec, data.featureless)
    if spec.init_weights is not None:
        with torch.no_grad():
            for conv, weights in zip(convs, load_init_weights(spec)):
                load_weights(torch, conv, weights, _TARGETS["rgcn"])
    model = build_stack(torch, convs, spec.dropout, lambda conv, h: conv(g, h, etypes, norm, presorted=True),
                        spec.activation, input_dropout=spec.input_dropout)
    result = train_full_batch(torch, model, lambda: model(x), spec, data, device)
    result["baseline_rss_bytes"] = baseline
    regularizer = f"regularizer='basis', num_bases={spec.num_bases}" if spec.num_bases else "regularizer=None"
    result["config"] = {
        **model_config(spec),
        "conv": f"RelGraphConv({regularizer}, self_loop=True, bias={spec.bias}), presorted=True"
                + ("; first layer on node ids" if data.featureless else ""),
        "adjacency": "DGLGraph, edges sorted by type (formats created before training)",
        "features": feat_desc + (" (sparse_features requested: RelGraphConv takes dense input)"
                                 if spec.sparse_features else ""),
        "normalisation": _NORMALISATION["rgcn"],
        "self_loops": "none (loop_weight is the self connection)",
        "init": "given init_weights" if spec.init_weights else "RelGraphConv default, seed 0",
        "threads": spec.threads,
        "versions": {"torch": torch.__version__, "dgl": dgl.__version__},
        **device_config(torch, device),
    }
    return result


def main(argv=None) -> int:
    return run_main("dgl", train, argv)


if __name__ == "__main__":
    sys.exit(main())
