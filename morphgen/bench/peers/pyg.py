"""PyTorch Geometric peer: full-batch GCN with GCNConv.

    python -m morphgen.bench.peers.pyg --data D.npz --spec SPEC.json --out OUT.json

Configuration (the fastest PyG offers on this machine without its optional compiled extensions):
- adjacency: a torch sparse CSR matrix adj_t (row = destination, column = source), which GCNConv
  multiplies with torch's CSR SpMM; torch_sparse.SparseTensor is used instead when that extension
  is installed.
- normalisation: GCNConv(cached=True) computes gcn_norm once (first epoch, inside warm-up):
  Â = D^-1/2 (A + I) D^-1/2 with D the IN-degree (self loop included) on both sides, also on
  directed graphs; the file's own self loops are dropped first and gcn_norm adds one per node
  (on a torch sparse adjacency gcn_norm computes A + I, which would double an existing loop).
- features: a torch sparse CSR tensor when spec.sparse_features and the file stores CSR features
  (GCNConv's linear layer multiplies it with sparse @ dense), otherwise dense float32.
- device: with spec.device "cuda:N" the adjacency, features and model are moved to that GPU before
  the baseline is taken (torch's CUDA CSR SpMM then does the aggregation).
"""
from __future__ import annotations

import sys

import numpy as np

from morphgen.bench.memory import start_training_peak

from .dataset import NodeClassificationData, load_init_weights
from .runner import PeerUnavailable, run_main
from .spec import BenchSpec
from .torch_loop import MODEL_CONFIG, build_stack, device_config, setup_torch, torch_device, train_full_batch


def _import_pyg():
    try:
        import torch_geometric
        from torch_geometric.nn import GCNConv
    except ImportError as exc:
        raise PeerUnavailable(f"torch_geometric cannot be imported ({exc})") from exc
    return torch_geometric, GCNConv


def _adjacency(torch, data: NodeClassificationData, self_loops: bool):
    import torch_geometric.typing as pyg_typing

    src, dst = data.src, data.dst
    if self_loops:
        # gcn_norm on a torch sparse adjacency adds I to A, so an existing loop would get weight 2
        # (with edge_index or SparseTensor it keeps weight 1). Dropping the file's own loops makes
        # every format, and DGL, normalise the same A + I.
        keep = src != dst
        src, dst = src[keep], dst[keep]
    rows = torch.from_numpy(dst)          # adj_t: messages flow source -> destination
    cols = torch.from_numpy(src)
    n = data.num_nodes
    if pyg_typing.WITH_TORCH_SPARSE:
        from torch_sparse import SparseTensor
        return SparseTensor(row=rows, col=cols, sparse_sizes=(n, n)), "torch_sparse.SparseTensor adj_t"
    from torch_geometric.utils import to_torch_csr_tensor
    adj_t = to_torch_csr_tensor(torch.stack([rows, cols]), size=(n, n))
    return adj_t, "torch.sparse_csr adj_t (rows = destinations)"


def _features(torch, spec: BenchSpec, data: NodeClassificationData):
    if spec.sparse_features:
        indptr, indices, values = data.csr_features()
        x = torch.sparse_csr_tensor(torch.from_numpy(indptr), torch.from_numpy(indices),
                                    torch.from_numpy(values), size=(data.num_nodes, data.num_features))
        return x, "sparse (torch.sparse_csr)"
    return torch.from_numpy(data.dense_features()), "dense float32"


def train(spec: BenchSpec, data: NodeClassificationData) -> dict:
    torch = setup_torch(spec)
    torch_geometric, GCNConv = _import_pyg()
    import warnings
    warnings.filterwarnings("ignore", message=".*[Ss]parse.*")   # torch's "beta"/invariant notices
    device = torch_device(torch, spec)
    adj_t, adj_desc = _adjacency(torch, data, spec.self_loops)
    x, feat_desc = _features(torch, spec, data)
    adj_t, x = adj_t.to(device), x.to(device)
    baseline = start_training_peak()      # libraries imported, data in tensors, no model yet
    convs = [GCNConv(spec.layers[i], spec.layers[i + 1], cached=True, normalize=True,
                     add_self_loops=spec.self_loops, bias=spec.bias) for i in range(spec.num_layers)]
    if spec.init_weights is not None:
        with torch.no_grad():
            for conv, (w, b) in zip(convs, load_init_weights(spec.init_weights, spec.layers, spec.bias)):
                conv.lin.weight.copy_(torch.from_numpy(np.ascontiguousarray(w.T)))   # torch stores [out, in]
                if b is not None:
                    conv.bias.copy_(torch.from_numpy(b))
    model = build_stack(torch, convs, spec.dropout, lambda conv, h: conv(h, adj_t))
    result = train_full_batch(torch, model, lambda: model(x), spec, data, device)
    result["baseline_rss_bytes"] = baseline
    result["config"] = {
        **MODEL_CONFIG,
        "adjacency": adj_desc,
        "features": feat_desc,
        "normalisation": "gcn_norm cached: D_in^-1/2 (A+I) D_in^-1/2 (in-degree on both sides)",
        "self_loops": "existing removed, one per node added" if spec.self_loops else "none",
        "init": "given init_weights" if spec.init_weights else "GCNConv default (glorot), seed 0",
        "threads": spec.threads,
        "versions": {"torch": torch.__version__, "torch_geometric": torch_geometric.__version__},
        **device_config(torch, device),
    }
    return result


def main(argv=None) -> int:
    return run_main("pyg", train, argv)


if __name__ == "__main__":
    sys.exit(main())
