"""PyG's heterogeneous graph transformer: a typed input projection, HGTConv, a linear classifier.

The model examples/hgt.mp writes (program_shape recognises it, attention_shape.py):

    h   = relu(x_t @ W_t + b_t)                      per node type t
    h'  = HGTConv(h, edge_index_dict)                PyG's, `heads` heads
    out = h' @ W + b                                 every node; the loss reads the training nodes

PyG takes a graph as dictionaries keyed by node type and by (source type, relation, destination
type). Here node type t is "t<t>" and an edge of type r from type s to type d belongs to
("t<s>", "r<r>", "t<d>"). An edge type that joins several node-type pairs (AIFB's do) becomes one
PyG relation per pair; each starts from the edge type's weights, so the first epoch is the
program's, and is trained on its own afterwards (the config says how many relations PyG has).

Input projection: a node type with features of its own reads only its block of columns of x
(`feature_blocks`), as a torch sparse CSR matrix when spec.sparse_features; a type without
(a featureless graph, or a one-hot block) has a learned row per node, as morphgen's identity
input does. HGTConv keeps one (D x D) block per head of each relation matrix (D = width / heads).
"""
from __future__ import annotations

import numpy as np

from morphgen.bench.memory import start_training_peak

from .dataset import NodeClassificationData, load_init_weights
from .spec import BenchSpec
from .torch_loop import device_config, model_config, train_full_batch


class HeteroGraph:
    """The data as PyG's dictionaries: node type t's rows, and edges grouped by relation."""

    def __init__(self, data: NodeClassificationData, num_node_types: int):
        ntype = data.node_types()
        self.rows = [np.flatnonzero(ntype == t) for t in range(num_node_types)]
        self.types = [t for t in range(num_node_types) if self.rows[t].size]     # PyG wants no empty type
        local = np.empty(data.num_nodes, np.int64)
        for rows in self.rows:
            local[rows] = np.arange(rows.size)
        key = (ntype[data.src] * data.num_etypes + data.edge_types()) * num_node_types + ntype[data.dst]
        order = np.argsort(key, kind="stable")
        groups, starts = np.unique(key[order], return_index=True)
        self.relations = []                  # (PyG edge type, the program's edge type, local edge_index)
        for k, lo, hi in zip(groups, starts, list(starts[1:]) + [order.size]):
            e = order[lo:hi]
            src_type_and_r, d = divmod(int(k), num_node_types)
            s, r = divmod(src_type_and_r, data.num_etypes)
            self.relations.append(((f"t{s}", f"r{r}", f"t{d}"), r, np.stack([local[data.src[e]], local[data.dst[e]]])))

    @property
    def metadata(self) -> tuple:
        return [f"t{t}" for t in self.types], [name for name, _, _ in self.relations]


def _type_inputs(torch, spec: BenchSpec, data: NodeClassificationData, graph: HeteroGraph) -> dict:
    """Per node type with features of its own, its block of x (sparse CSR or dense)."""
    import scipy.sparse as sp
    columns = data.type_columns()
    if spec.sparse_features and not data.featureless:
        indptr, indices, values = data.csr_features()
        whole = sp.csr_matrix((values, indices, indptr), shape=(data.num_nodes, data.num_features))
    elif not data.featureless:
        whole = data.dense_features()     # densified once (from CSR it is a fresh N x F array)
    x = {}
    for t in graph.types:
        if columns[t] is None:
            continue
        lo, hi = columns[t]
        if spec.sparse_features:
            block = whole[graph.rows[t]][:, lo:hi].tocsr()
            x[t] = torch.sparse_csr_tensor(torch.from_numpy(block.indptr.astype(np.int64)),
                                           torch.from_numpy(block.indices.astype(np.int64)),
                                           torch.from_numpy(block.data.astype(np.float32)), size=block.shape)
        else:
            x[t] = torch.from_numpy(np.ascontiguousarray(whole[graph.rows[t], lo:hi]))
    return x


def _model(torch, spec: BenchSpec, data: NodeClassificationData, graph: HeteroGraph, x: dict, rows: dict):
    """The model; `x` per typed input (its width), `rows` per node type its node ids (on the device)."""
    from torch_geometric.nn import HGTConv
    nn = torch.nn
    hidden, classes = spec.layers[1], spec.layers[-1]

    class HGT(nn.Module):
        def __init__(self):
            super().__init__()
            # the input projection: x_t @ W_t for a type with features, a learned row per node otherwise
            self.proj = nn.ParameterDict({
                f"t{t}": nn.Parameter(torch.empty(x[t].shape[1] if t in x else graph.rows[t].size, hidden))
                for t in graph.types})
            self.proj_bias = nn.ParameterDict({f"t{t}": nn.Parameter(torch.zeros(hidden)) for t in graph.types})
            for p in self.proj.values():
                nn.init.xavier_uniform_(p)
            self.conv = HGTConv(hidden, hidden, graph.metadata, heads=spec.heads[1])
            self.out = nn.Linear(hidden, classes)

        def forward(self, x_dict, edge_index_dict):
            h = {}
            for t in graph.types:
                w = self.proj[f"t{t}"]
                h[f"t{t}"] = torch.relu((x_dict[t] @ w if t in x_dict else w) + self.proj_bias[f"t{t}"])
            h = self.conv(h, edge_index_dict)
            logits = torch.zeros(data.num_nodes, classes, device=self.out.weight.device)
            for t in graph.types:
                if h.get(f"t{t}") is not None:          # a type no edge points to has no output
                    logits = logits.index_copy(0, rows[t], self.out(h[f"t{t}"]))
            return logits

    return HGT()


def load_hgt_weights(torch, model, spec: BenchSpec, data: NodeClassificationData, graph: HeteroGraph) -> None:
    """morphgen's three layers (spec.hgt_layer_parameters) into the PyG model."""
    proj, c, out = load_init_weights(spec)           # c: HGTConv's parameters, by morphgen's names

    def t_of(a):
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
    columns = data.type_columns()
    heads = spec.heads[1]
    d = spec.layers[1] // heads
    for t in graph.types:
        name = f"t{t}"
        if columns[t] is not None:
            rows = slice(*columns[t])
        elif data.feature_blocks is not None:        # a one-hot block: node j of the type is column lo + j
            lo = data.feature_blocks[t]["columns"][0]
            rows = slice(lo, lo + graph.rows[t].size)
        else:                                        # featureless: node i is column i
            rows = graph.rows[t]
        model.proj[name].copy_(t_of(proj["W"][rows]))
        model.proj_bias[name].copy_(t_of(proj["b"][t]))
        kqv = model.conv.kqv_lin.lins[name]
        kqv.weight.copy_(t_of(np.concatenate([c["K"][t].T, c["Q"][t].T, c["V"][t].T])))
        kqv.bias.copy_(t_of(np.concatenate([c["bK"][t], c["bQ"][t], c["bV"][t]])))
        model.conv.out_lin.lins[name].weight.copy_(t_of(c["A"][t].T))
        model.conv.out_lin.lins[name].bias.copy_(t_of(c["bA"][t]))
        model.conv.skip[name].copy_(t_of(c["skip"][t]))
    relations = len(graph.relations)
    for j, (key, r, _) in enumerate(graph.relations):
        model.conv.p_rel["__".join(key)].copy_(t_of(c["mu"][r]).reshape(1, heads))
        for h in range(heads):          # HeteroLinear type h * relations + j holds head h's block
            rows = slice(h * d, (h + 1) * d)        # Watt[r]: [heads * d, d], the heads' blocks stacked
            model.conv.k_rel.weight[h * relations + j].copy_(t_of(c["Watt"][r][rows]))
            model.conv.v_rel.weight[h * relations + j].copy_(t_of(c["Wmsg"][r][rows]))
    model.out.weight.copy_(t_of(out["W"].T))
    model.out.bias.copy_(t_of(out["b"]))


def train_hgt(torch, torch_geometric, spec: BenchSpec, data: NodeClassificationData, device) -> dict:
    graph = HeteroGraph(data, spec.num_node_types)
    x = {t: v.to(device) for t, v in _type_inputs(torch, spec, data, graph).items()}
    edges = {key: torch.from_numpy(ei).to(device) for key, _, ei in graph.relations}
    baseline = start_training_peak()      # libraries imported, data in tensors, no model yet
    rows = {t: torch.from_numpy(graph.rows[t]).to(device) for t in graph.types}
    model = _model(torch, spec, data, graph, x, rows)
    if spec.init_weights is not None:
        with torch.no_grad():
            load_hgt_weights(torch, model, spec, data, graph)
    result = train_full_batch(torch, model, lambda: model(x, edges), spec, data, device)
    result["baseline_rss_bytes"] = baseline
    typed = sum(1 for t in graph.types if t in x)
    result["config"] = {
        **model_config(spec),
        "conv": (f"HGTConv({spec.layers[1]}, {spec.layers[1]}, heads={spec.heads[1]}) over {len(graph.types)} "
                 f"node types and {len(graph.relations)} relations (source type, edge type, destination type)"),
        "adjacency": "edge_index_dict: one [2, E_r] per relation, node ids local to their type",
        "features": (f"{typed} node type(s) read their own columns of x "
                     f"({'sparse CSR' if spec.sparse_features else 'dense float32'}); "
                     f"{len(graph.types) - typed} have a learned row per node"),
        "normalisation": "softmax of (k W_att[r]) . q * mu[r] / sqrt(d) over each node's in-edges, per head",
        "self_loops": "none",
        "init": "given init_weights" if spec.init_weights else "PyG defaults (glorot), seed 0",
        "threads": spec.threads,
        "versions": {"torch": torch.__version__, "torch_geometric": torch_geometric.__version__},
        **device_config(torch, device),
    }
    return result
