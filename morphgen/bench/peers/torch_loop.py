"""The full-batch training loop the torch-based peers share, so PyG and DGL are timed identically.

One epoch = zero_grad, forward over the whole graph, cross-entropy over the training nodes (mean),
backward, one Adam step (torch's Adam: weight decay as an L2 term added to the gradient, on every
parameter). The epoch time is wall-clock around exactly that. Accuracy is evaluated once after the
last epoch (eval mode: dropout off) and is not timed.

Imported only after the runner has set the thread environment, so importing torch here is safe.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import numpy as np

from .dataset import NodeClassificationData
from .runner import PeerUnavailable
from .spec import BenchSpec


def import_torch():
    try:
        import torch
    except ImportError as exc:
        raise PeerUnavailable(f"torch cannot be imported ({exc})") from exc
    return torch


def setup_torch(spec: BenchSpec):
    torch = import_torch()
    torch.set_num_threads(spec.threads)
    torch.manual_seed(0)           # the libraries' own init (when no init_weights) is reproducible
    return torch


def median_after_warmup(times: list[float], warmup: int) -> float:
    return float(statistics.median(times[warmup:]))


def train_full_batch(torch, model, forward: Callable[[], "torch.Tensor"], spec: BenchSpec,
                     data: NodeClassificationData) -> dict:
    """Train `model` for spec.epochs epochs; `forward()` returns the logits of every node."""
    import torch.nn.functional as F

    y = torch.from_numpy(data.y)
    train_idx = torch.from_numpy(np.flatnonzero(data.train_mask))
    if train_idx.numel() == 0:
        raise ValueError("dataset has an empty train_mask: nothing to train on")
    opt = torch.optim.Adam(model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay)
    times, losses = [], []
    for _ in range(spec.epochs):
        t0 = time.perf_counter()
        model.train()
        opt.zero_grad(set_to_none=True)
        logits = forward()
        loss = F.cross_entropy(logits[train_idx], y[train_idx])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
    model.eval()
    with torch.no_grad():
        pred = forward().argmax(dim=1).numpy()

    def acc(mask: np.ndarray):
        return float((pred[mask] == data.y[mask]).mean()) if mask.any() else None

    return {
        "epoch_times_s": times,
        "epoch_time_s": median_after_warmup(times, spec.warmup),
        "first_epoch_loss": losses[0],
        "final_loss": losses[-1],
        "train_acc": acc(data.train_mask), "val_acc": acc(data.val_mask), "test_acc": acc(data.test_mask),
    }


def build_stack(torch, convs: list, dropout: float, call: Callable):
    """A GCN stack: conv, ReLU, dropout between layers (not on the input, which may be sparse).

    `call(conv, h)` applies one convolution; the peers differ only in what that needs.
    """
    import torch.nn.functional as F

    class GCNStack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList(convs)

        def forward(self, x):
            h = x
            for i, conv in enumerate(self.convs):
                if i > 0:
                    h = F.dropout(h, p=dropout, training=self.training)
                h = call(conv, h)
                if i < len(self.convs) - 1:
                    h = F.relu(h)
            return h

    return GCNStack()


MODEL_CONFIG = {
    "model": "GCN: conv -> ReLU -> dropout between layers, no dropout on the input features",
    "loss": "cross-entropy (mean) over train_mask nodes",
    "optimizer": "torch.optim.Adam, weight_decay as L2 on all parameters",
    "timing": "wall clock of zero_grad+forward+loss+backward+step; epoch_time_s = median after warm-up",
}
