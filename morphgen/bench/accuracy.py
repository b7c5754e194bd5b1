"""Test accuracy of an example against PyTorch Geometric's model trained the same way.

    python -m morphgen.bench.accuracy gat --dataset cora --seeds 0 1 2 [--data-dir DIR]

Both sides train full batch for the program's epoch count on the same preprocessed data (the
program's gnn.normalizeFeatures and gnn.addSelfLoops applied by morphgen's own functions) and
report the test accuracy of the last epoch, or, when the program declares gnn.earlyStopping, of
the epoch with the best validation accuracy, stopping after the same patience on both sides.
The PyG models are written as the papers and PyG's own examples write them.  Only the models
listed in PEERS are compared; the figures go to docs/accuracy.md.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

from morphgen.errors import UserError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _homogeneous_inputs(torch, dataset) -> tuple:
    """Dense features and the edges without self loops (GATConv adds its own)."""
    from morphgen.pipeline import features_payload
    x = torch.from_numpy(np.asarray(features_payload(dataset, "dense")[1], np.float32))
    g = dataset.graph
    keep = g.src != g.dst
    return x, torch.from_numpy(np.stack([g.src[keep], g.dst[keep]]))


def _gat_pyg(torch, dataset):
    """Velickovic et al. for cora/citeseer: 8 heads x 8 (elu, concatenated), 1 output head,
    dropout 0.6 on each layer's input and on the attention coefficients."""
    from torch_geometric.nn import GATConv
    F = torch.nn.functional
    inputs = _homogeneous_inputs(torch, dataset)
    num_features, num_classes = inputs[0].shape[1], int(dataset.num_classes)

    class GAT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = GATConv(num_features, 8, heads=8, dropout=0.6)
            self.conv2 = GATConv(64, num_classes, heads=1, concat=False, dropout=0.6)

        def forward(self, x, edge_index):
            x = F.elu(self.conv1(F.dropout(x, 0.6, self.training), edge_index))
            return self.conv2(F.dropout(x, 0.6, self.training), edge_index)

    return GAT(), dict(lr=0.005, weight_decay=5e-4), inputs


def _gin_pyg(torch, dataset):
    """examples/gin.mp: GIN-0 layers whose MLP is linear, batch norm, relu, linear; batch norm and
    relu between layers; dropout 0.5 before the second and third layers.  Adam's weight decay
    spares the batch norms' scale and shift, as in the example."""
    from torch_geometric.nn import GINConv
    nn, F = torch.nn, torch.nn.functional
    inputs = _homogeneous_inputs(torch, dataset)
    widths, norms = [inputs[0].shape[1], 64, 64, int(dataset.num_classes)], [True, True, False]

    class GIN(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs, self.norms = nn.ModuleList(), nn.ModuleList()
            for k, m, norm in zip(widths, widths[1:], norms):
                # no bias before a batch norm, as the example (the norm's shift is the bias)
                mlp = nn.Sequential(nn.Linear(k, m, bias=not norm), nn.BatchNorm1d(m) if norm else nn.Identity(),
                                    nn.ReLU(), nn.Linear(m, m, bias=not norm))
                self.convs.append(GINConv(mlp, eps=0.0, train_eps=False))
                self.norms.append(nn.BatchNorm1d(m) if norm else nn.Identity())

        def forward(self, x, edge_index):
            for i, (conv, norm) in enumerate(zip(self.convs, self.norms)):
                if i > 0:
                    x = F.dropout(x, 0.5, self.training)
                x = norm(conv(x, edge_index))
                if i < len(self.convs) - 1:
                    x = F.relu(x)
            return x

    model = GIN()
    bn = [p for mod in model.modules() if isinstance(mod, nn.BatchNorm1d) for p in mod.parameters()]
    rest = [p for p in model.parameters() if all(p is not q for q in bn)]
    groups = [{"params": rest, "weight_decay": 5e-4}, {"params": bn, "weight_decay": 0.0}]
    return model, dict(params=groups, lr=0.01), inputs


def _typed_inputs(torch, dataset) -> tuple:
    """PyG's heterogeneous inputs: each node type's own features (its block of x, see
    morphgen.data.typed_features; the identity for a featureless dataset) and one edge index per
    edge type, in type-local node ids."""
    g = dataset.graph
    names = g.meta.get("node_type_names") or [f"t{t}" for t in range(g.num_ntypes)]
    rows = [np.flatnonzero(g.ntype == t) for t in range(g.num_ntypes)]
    local = np.empty(g.num_nodes, np.int64)
    for r in rows:
        local[r] = np.arange(r.size)
    blocks = dataset.meta.get("feature_blocks")
    x = dataset.features.tocsr() if dataset.features is not None else None
    x_dict = {}
    for t, r in enumerate(rows):
        if x is None:
            part = np.eye(r.size, dtype=np.float32)
        else:
            lo, hi = blocks[t]["columns"] if blocks else (0, x.shape[1])
            part = x[r][:, lo:hi].toarray()
        x_dict[names[t]] = torch.from_numpy(part)
    edges = {}
    for r in range(g.num_etypes):
        sel = g.etype == r
        if not sel.any():
            continue
        s, d = g.src[sel], g.dst[sel]
        key = (names[g.ntype[s[0]]], f"rel{r}", names[g.ntype[d[0]]])
        edges[key] = torch.from_numpy(np.stack([local[s], local[d]]))
    return x_dict, edges, [(names[t], torch.from_numpy(r)) for t, r in enumerate(rows)]


def _hgt_pyg(torch, dataset):
    """PyG's HGT example: a per-type Linear to 64 then relu, one HGTConv (2 heads), a Linear to
    the classes; Adam lr 0.005, weight decay 0.001.  Logits for every node, in global order."""
    from torch_geometric.nn import HGTConv
    nn = torch.nn
    x_dict, edges, rows = _typed_inputs(torch, dataset)
    node_types = list(x_dict)
    metadata = (node_types, list(edges))
    num_nodes, num_classes = dataset.num_nodes, int(dataset.num_classes)

    class HGT(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin_dict = nn.ModuleDict({t: nn.Linear(x_dict[t].shape[1], 64) for t in node_types})
            self.conv = HGTConv(64, 64, metadata, heads=2)
            self.lin = nn.Linear(64, num_classes)

        def forward(self, x_dict, edge_index_dict):
            h = {t: self.lin_dict[t](x).relu() for t, x in x_dict.items()}
            h = self.conv(h, edge_index_dict)
            out = torch.zeros(num_nodes, num_classes)
            for t, r in rows:
                out = out.index_copy(0, r, self.lin(h[t]))
            return out

    return HGT(), dict(lr=0.005, weight_decay=0.001), (x_dict, edges)


PEERS = {"gat": _gat_pyg, "gin": _gin_pyg, "hgt": _hgt_pyg}


def pyg_accuracy(model_name: str, dataset, epochs: int, seed: int, patience=None) -> float:
    """Test accuracy of PyG's model (GATConv adds the self loops itself; the graph is given
    without any): at the last epoch, or with ``patience`` (the program's gnn.earlyStopping) at the
    epoch of the best validation accuracy, training stopped ``patience`` epochs after it."""
    import torch
    torch.manual_seed(seed)
    torch.set_num_threads(2)
    y = torch.from_numpy(dataset.labels.astype(np.int64))
    train, val, test = (torch.from_numpy(m) for m in (dataset.train_mask, dataset.val_mask, dataset.test_mask))
    model, opt_args, inputs = PEERS[model_name](torch, dataset)
    params = opt_args.pop("params", model.parameters())
    opt = torch.optim.Adam(params, **opt_args)

    def accuracy(mask):
        model.eval()
        with torch.no_grad():
            pred = model(*inputs).argmax(dim=1)
        return float((pred[mask] == y[mask]).float().mean())

    best_val, best_epoch, best_state = -1.0, 0, None
    for epoch in range(1, epochs + 1):
        model.train()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(*inputs)[train], y[train])
        loss.backward()
        opt.step()
        if patience:
            acc = accuracy(val)
            if acc > best_val:
                best_val, best_epoch = acc, epoch
                best_state = {k: v.clone() for k, v in model.state_dict().items()}
            if epoch - best_epoch >= patience:
                break
    if best_state is not None:
        model.load_state_dict(best_state)
    return accuracy(test)


def morphgen_accuracy(model_name: str, dataset, seed: int) -> float:
    import morphgen
    model = morphgen.compile(EXAMPLES / f"{model_name}.mp", threads=2, seed=seed)
    return float(model.fit(dataset, eval_every=0).final["test_acc"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m morphgen.bench.accuracy", description=__doc__.split("\n\n")[0])
    ap.add_argument("model", choices=sorted(PEERS))
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--data-dir")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = ap.parse_args(argv)
    try:
        from morphgen.data import load_dataset
        from morphgen.frontend import compile_file
        from morphgen.pipeline import normalize_features
        dataset = load_dataset(args.dataset, data_dir=args.data_dir)
        program = compile_file(str(EXAMPLES / f"{args.model}.mp"))
        peer_data = normalize_features(dataset, program.feature_normalization)
        rows = []
        for seed in args.seeds:
            ours = morphgen_accuracy(args.model, dataset, seed)
            theirs = pyg_accuracy(args.model, peer_data, program.epochs, seed, program.early_stopping)
            rows.append((seed, ours, theirs))
            print(f"seed {seed}: morphgen {ours:.4f}  PyG {theirs:.4f}", flush=True)
    except UserError as exc:
        print(exc, file=sys.stderr)
        return 2
    for i, who in ((1, "morphgen"), (2, "PyG")):
        vals = [r[i] for r in rows]
        spread = statistics.stdev(vals) if len(vals) > 1 else 0.0
        print(f"{who}: mean {statistics.mean(vals):.4f} +- {spread:.4f} over seeds {args.seeds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
