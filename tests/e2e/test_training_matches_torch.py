"""Training, checked against an independent implementation: torch's autograd and Adam.

The same model is trained by morphgen and by PyTorch Geometric from the same initial weights and
with the same dropout masks (torch's dropout replaced by morphgen's counter-based stream, keyed by
(seed, epoch, site)); every epoch's loss must agree to float32 round-off.  Unlike the benchmark's
parity check (dropout off), this covers what only training with dropout exercises: the masks of
the backward regenerated from the forward's key, the epoch advancing the key, GAT's masks on the
attention coefficients of each edge (rows in the canonical edge order), GCN's dropout of sparse
input features inside the sparse kernels, for GIN, batch norm's statistics under dropout, and
GCNConv's edge weights (examples/gcn_weighted.mp) in its sums and its degrees.
A wrong gradient, optimizer step or mask shows from the second epoch on, a mask on the wrong rows
from the first.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch                                   # the [bench] extra, which `make test` installs
import torch_geometric.nn as pyg_nn

from morphgen.api import CompiledModel
from morphgen.bench.peers.pyg import weight_targets
from morphgen.bench.peers.torch_loop import load_weights
from morphgen.data.synthetic import synthetic_dataset
from morphgen.interp import dropout_keep_mask
from morphgen.pipeline import preprocess

from tests.e2e.support import example


EPOCHS = 6
SEED = 3


@pytest.fixture(scope="module")
def data():
    return synthetic_dataset(nodes=200, edges=1500, features=24, classes=4, train_per_class=12, val=20,
                             test=40, seed=2, sparsity=0.0)


@pytest.fixture(scope="module")
def weighted_data():
    return synthetic_dataset(nodes=200, edges=1500, features=24, classes=4, train_per_class=12, val=20,
                             test=40, seed=2, sparsity=0.0, weighted=1)


@pytest.fixture(scope="module")
def sparse_data():
    return synthetic_dataset(nodes=200, edges=1500, features=40, classes=4, train_per_class=12, val=20,
                             test=40, seed=5, sparsity=0.9)


def _morphgen(name: str, data, monkeypatch):
    monkeypatch.setenv("MORPHGEN_OPT_LEVEL", "0")       # numbers, not speed: a faster build
    sparse = sp.issparse(data.features)
    model = CompiledModel(example(name), threads=2, seed=SEED, sparsity_threshold=0.5 if sparse else None)
    model.bind(data)
    assert model.feature_path[0] == ("sparse" if sparse else "dense")
    shapes = {p.name: p.value.shape for p in model.program.params}
    params = {k: np.array(v, np.float32).reshape(shapes[k]) for k, v in model.get_params().items()}
    sites = [(op.output.id, op.output.assoc) for op in model.program.forward if op.opcode == "dropout"]
    return model, params, sites


class MorphgenDropout:
    """torch.nn.functional.dropout with morphgen's masks: the k-th call of an epoch is site k.
    An edge value's mask is keyed by the edges' canonical order (by destination, morphgen/layout.py),
    torch's rows are in the input order: `edge_order[k]` is the input edge at canonical position k."""

    def __init__(self, sites, edge_order=None, epoch_offset=0):
        self.sites, self.edge_order, self.epoch, self.calls, self.epoch_offset = sites, edge_order, 0, 0, epoch_offset

    def __call__(self, x, p=0.5, training=True, inplace=False):
        if not training or p == 0:
            return x
        site, assoc = self.sites[self.calls]
        self.calls += 1
        keep = dropout_keep_mask(SEED, self.epoch + self.epoch_offset, site, p, x.numel()).reshape(tuple(x.shape))
        if assoc == "edge":
            by_input_order = np.empty_like(keep)
            by_input_order[self.edge_order] = keep
            keep = by_input_order
        return x * torch.from_numpy(keep.astype(np.float32)) / (1.0 - p)


def _load(convs, params, model: str):
    """morphgen's initial parameters into the peer's convolutions, as the benchmark's parity
    check hands them over (pyg.weight_targets, torch_loop.load_weights)."""
    with torch.no_grad():
        for layer, conv in enumerate(convs):
            prefix = f"layer{layer}."
            weights = {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}
            load_weights(torch, conv, weights, weight_targets(conv, model))


def _gin(data, params):
    from morphgen.bench.accuracy import _gin_pyg
    model, opt_args, inputs = _gin_pyg(torch, data)
    _load(model.convs, params, "gin")
    groups = opt_args.pop("params")
    return model, torch.optim.Adam(groups, **opt_args), inputs


class TwoLayers(torch.nn.Module):
    """conv, activation, conv; dropout p on each layer's input (the examples' `dropout = p`)."""

    def __init__(self, convs, activation, p):
        super().__init__()
        self.convs, self.activation, self.p = torch.nn.ModuleList(convs), activation, p

    def forward(self, x, *edges):
        dropout = torch.nn.functional.dropout          # looked up per call: the tests replace it
        x = self.activation(self.convs[0](dropout(x, self.p, self.training), *edges))
        return self.convs[1](dropout(x, self.p, self.training), *edges)


def _two_layers(data, params, convs, model, activation, p, lr):
    """TwoLayers from morphgen's weights, its Adam, and its inputs (dense features, the edges in
    input order and their weights, if any)."""
    _load(convs, params, model)
    x = data.features.toarray() if sp.issparse(data.features) else data.features
    g = data.graph
    inputs = (torch.from_numpy(np.asarray(x, np.float32)), torch.from_numpy(np.stack([g.src, g.dst])))
    if g.edge_weight is not None:
        inputs += (torch.from_numpy(g.edge_weight),)
    model = TwoLayers(convs, activation, p)
    return model, torch.optim.Adam(model.parameters(), lr=lr, weight_decay=5e-4), inputs


def _sage(data, params):
    """examples/sage.mp: SAGEConv(mean) x 2, relu between, dropout 0.5 on each layer's input."""
    convs = [pyg_nn.SAGEConv(data.features.shape[1], 64), pyg_nn.SAGEConv(64, data.num_classes)]
    return _two_layers(data, params, convs, "sage", torch.nn.functional.relu, 0.5, lr=0.01)


def _gat(data, params):
    """examples/gat.mp: GATConv 8 heads x 8 (elu), then 1 head; dropout 0.6 on each layer's input
    and on the attention coefficients.  The graph already has the program's self loops (given
    in `data`), so GATConv adds none."""
    convs = [pyg_nn.GATConv(data.features.shape[1], 8, heads=8, dropout=0.6, add_self_loops=False),
             pyg_nn.GATConv(64, data.num_classes, heads=1, concat=False, dropout=0.6, add_self_loops=False)]
    return _two_layers(data, params, convs, "gat", torch.nn.functional.elu, 0.6, lr=0.005)


def _gcn(data, params):
    """examples/gcn.mp: GCNConv 16 (relu), then GCNConv to the classes; dropout 0.5 on each
    layer's input.  `data` has sparse features: morphgen drops them inside its sparse kernels."""
    convs = [pyg_nn.GCNConv(data.features.shape[1], 16), pyg_nn.GCNConv(16, data.num_classes)]
    return _two_layers(data, params, convs, "gcn", torch.nn.functional.relu, 0.5, lr=0.01)


def _gcn_weighted(data, params):
    """examples/gcn_weighted.mp: GCNConv given the edge weights (its self loops weigh 1), as gcn.mp
    otherwise.  The program names its weights W1, b1, W2, b2."""
    convs = [pyg_nn.GCNConv(data.features.shape[1], 16), pyg_nn.GCNConv(16, data.num_classes)]
    by_layer = {f"layer{i}.{k}": params[f"{k}{i + 1}"] for i in range(2) for k in ("W", "b")}
    return _two_layers(data, by_layer, convs, "gcn", torch.nn.functional.relu, 0.5, lr=0.01)


class OneConv(torch.nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.conv = conv

    def forward(self, x, edges):
        return self.conv(x, edges)


def _sgc(data, params):
    """examples/sgc.mp: SGConv with K = 2 (GCN's normalisation with self loops), no dropout.
    morphgen computes the propagation once and, the training rows being few, reduces the
    weight's and the bias's gradients over those rows alone (passes/train_rows.py)."""
    conv = pyg_nn.SGConv(data.features.shape[1], data.num_classes, K=2)
    with torch.no_grad():
        conv.lin.weight.copy_(torch.from_numpy(params["W"].T.copy()))
        conv.lin.bias.copy_(torch.from_numpy(params["b"]))
    inputs = (torch.from_numpy(np.asarray(data.features, np.float32)),
              torch.from_numpy(np.stack([data.graph.src, data.graph.dst])))
    model = OneConv(conv)
    return model, torch.optim.Adam(model.parameters(), lr=0.2, weight_decay=5e-5), inputs


PEERS = {"gat": _gat, "gcn": _gcn, "gcn_weighted": _gcn_weighted, "gin": _gin, "sage": _sage, "sgc": _sgc}
DROPOUT_SITES = {"gat": 4, "sgc": 0}


def _train_torch(name, data, params, dropout, monkeypatch):
    monkeypatch.setattr(torch.nn.functional, "dropout", dropout)
    model, opt, inputs = PEERS[name](data, params)
    y = torch.from_numpy(data.labels.astype(np.int64))
    train = torch.from_numpy(data.train_mask)
    losses = []
    for epoch in range(EPOCHS):
        dropout.epoch, dropout.calls = epoch, 0
        model.train()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(*inputs)[train], y[train])
        loss.backward()
        opt.step()
        assert dropout.calls == len(dropout.sites), "every dropout of the program must run once per epoch"
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.parametrize("name", sorted(PEERS))
def test_training_with_dropout_follows_torch(name, data, sparse_data, weighted_data, monkeypatch):
    data = {"gcn": sparse_data, "gcn_weighted": weighted_data}.get(name, data)
    model, params, sites = _morphgen(name, data, monkeypatch)
    assert len(sites) == DROPOUT_SITES.get(name, 2)
    ours = [float(model.session.train_epoch()) for _ in range(EPOCHS)]
    # the program's preprocessing (gin.mp and gat.mp normalise rows, gat.mp adds self loops)
    peer_data = preprocess(data, model.program)
    dropout = MorphgenDropout(sites, edge_order=peer_data.graph.by_dst[1])
    theirs = _train_torch(name, peer_data, params, dropout, monkeypatch)
    assert len(set(np.round(ours, 4))) == EPOCHS, "the losses must move from epoch to epoch"
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)


def test_other_masks_are_told_apart(data, monkeypatch):
    """The comparison can fail: the masks of the wrong epoch give other losses from the start."""
    model, params, sites = _morphgen("sage", data, monkeypatch)
    ours = [float(model.session.train_epoch()) for _ in range(EPOCHS)]
    theirs = _train_torch("sage", data, params, MorphgenDropout(sites, epoch_offset=1), monkeypatch)
    assert abs(ours[0] - theirs[0]) > 1e-3
