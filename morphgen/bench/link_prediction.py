"""R-GCN link prediction against PyTorch Geometric's model trained the same way.

    python -m morphgen.bench.link_prediction --dataset wn18rr --epochs 300 --seeds 0 1 2

examples/rgcn_link.mp and PyG's rgcn_link_pred example (an embedding per entity, two RGCNConv
layers with per-relation mean aggregation, relu and dropout 0.2 between them, a DistMult decoder,
binary cross entropy plus 0.01 * (mean z^2 + mean R^2), Adam lr 0.01) train on the same triples
with the same negatives each epoch (morphgen.negative_sampling, one per positive), full batch,
and are ranked by the same filtered evaluation (morphgen.link_eval) after the last epoch.  PyG's
example clips the gradient norm to 1; morphgen has no clipping, so neither side clips here.
The widths (32) and the epoch count are the example's; the figures go to docs/accuracy.md.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from morphgen.errors import UserError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rgcn_link.mp"
HIDDEN, DROPOUT, REGULARIZATION, LR = 32, 0.2, 0.01, 0.01


def pyg_link_prediction(dataset, epochs: int, seed: int) -> dict:
    import torch
    from torch_geometric.nn import RGCNConv
    from morphgen.link_eval import ranking_metrics
    from morphgen.negative_sampling import epoch_triples
    torch.manual_seed(seed)
    torch.set_num_threads(2)
    nn, F = torch.nn, torch.nn.functional
    g = dataset.graph
    edge_index = torch.from_numpy(np.stack([g.src, g.dst]))
    edge_type = torch.from_numpy(g.etype)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.node_emb = nn.Parameter(torch.empty(g.num_nodes, HIDDEN))
            self.conv1 = RGCNConv(HIDDEN, HIDDEN, g.num_etypes)
            self.conv2 = RGCNConv(HIDDEN, HIDDEN, g.num_etypes)
            self.rel_emb = nn.Parameter(torch.empty(g.num_etypes, HIDDEN))
            nn.init.xavier_uniform_(self.node_emb)
            nn.init.xavier_uniform_(self.rel_emb)

        def encode(self):
            x = self.conv1(self.node_emb, edge_index, edge_type).relu()
            x = F.dropout(x, DROPOUT, self.training)
            return self.conv2(x, edge_index, edge_type)

        def score(self, z, t):
            return (z[t[:, 0]] * self.rel_emb[t[:, 1]] * z[t[:, 2]]).sum(dim=1)

    model = Model()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    for epoch in range(epochs):
        model.train()
        opt.zero_grad()
        t = torch.from_numpy(epoch_triples(dataset.train_triples, g.num_nodes, 1, seed, epoch))
        z = model.encode()
        loss = F.binary_cross_entropy_with_logits(model.score(z, t), t[:, 3].float())
        loss = loss + REGULARIZATION * (z.pow(2).mean() + model.rel_emb.pow(2).mean())
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        z = model.encode().numpy()
    known = dataset.known_triples()
    return ranking_metrics(z, model.rel_emb.detach().numpy(), dataset.test_triples, known, "test_")


def morphgen_link_prediction(dataset, epochs: int, seed: int) -> dict:
    import morphgen
    model = morphgen.compile(EXAMPLE, threads=2, seed=seed)
    model.bind(dataset)
    model.fit(epochs=epochs)
    return model.evaluate_links(splits=("test",))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m morphgen.bench.link_prediction",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="wn18rr")
    ap.add_argument("--data-dir")
    ap.add_argument("--epochs", type=int, default=None, help="default: the example's")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = ap.parse_args(argv)
    rows = []
    try:
        from morphgen.data import load_dataset
        from morphgen.frontend import compile_file
        dataset = load_dataset(args.dataset, data_dir=args.data_dir)
        epochs = args.epochs or compile_file(str(EXAMPLE)).epochs
        for seed in args.seeds:
            t0 = time.perf_counter()
            ours = morphgen_link_prediction(dataset, epochs, seed)
            t1 = time.perf_counter()
            theirs = pyg_link_prediction(dataset, epochs, seed)
            t2 = time.perf_counter()
            rows.append((ours, theirs))
            print(f"seed {seed}: morphgen MRR {ours['test_mrr']:.4f} Hits@10 {ours['test_hits@10']:.4f} "
                  f"({t1 - t0:.0f} s)  PyG MRR {theirs['test_mrr']:.4f} Hits@10 {theirs['test_hits@10']:.4f} "
                  f"({t2 - t1:.0f} s)", flush=True)
    except UserError as exc:
        print(exc, file=sys.stderr)
        return 2
    for i, who in ((0, "morphgen"), (1, "PyG")):
        for key in ("test_mrr", "test_hits@1", "test_hits@10"):
            vals = [r[i][key] for r in rows]
            spread = statistics.stdev(vals) if len(vals) > 1 else 0.0
            print(f"{who} {key}: {statistics.mean(vals):.4f} +- {spread:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
