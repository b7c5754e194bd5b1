"""The full-batch training loop the torch-based peers share, so PyG and DGL are timed identically.

One epoch = zero_grad, forward over the whole graph, cross-entropy over the training nodes (mean),
backward, one Adam step (torch's Adam: weight decay as an L2 term added to the gradient, on every
parameter but the norms' scale and shift, which morphgen's layers spare too). The epoch time is
wall-clock around exactly that. Accuracy is evaluated once after the last epoch (eval mode:
dropout off) and is not timed.

On a GPU (spec.device "cuda:N") the model, features, adjacency, labels and masks all live on that
device; CUDA kernels run asynchronously, so the clock is read only after torch.cuda.synchronize(),
and the peak device memory is torch.cuda.max_memory_allocated from before the data was moved.

Imported only after the runner has set the thread environment, so importing torch here is safe.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import numpy as np

from morphgen.errors import UserError

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


def torch_device(torch, spec: BenchSpec):
    """The device to train on. A GPU that torch cannot use is an error, never a quiet CPU run:
    the result would be read as a GPU measurement. Resets the peak memory counter, so it covers
    the data as well as training (as morphgen's allocated device bytes do)."""
    if not spec.on_cuda:
        return torch.device("cpu")
    device = torch.device(spec.device)
    if not torch.cuda.is_available():
        build = "built without CUDA" if torch.version.cuda is None else f"CUDA {torch.version.cuda}, no GPU visible"
        raise UserError(f"device {spec.device}: torch has no CUDA device here (torch {torch.__version__}, {build})")
    if device.index >= torch.cuda.device_count():
        raise UserError(f"device {spec.device}: torch sees {torch.cuda.device_count()} CUDA device(s), "
                        f"numbered from 0")
    torch.cuda.set_device(device)
    torch.cuda.reset_peak_memory_stats(device)
    return device


def device_config(torch, device) -> dict:
    """What a reader needs to know about where a peer ran (merged into its config)."""
    if device.type != "cuda":
        return {}
    return {"device": str(device), "device_name": torch.cuda.get_device_name(device),
            "cuda": torch.version.cuda,
            "timing": MODEL_CONFIG["timing"] + "; torch.cuda.synchronize() before each clock read",
            "peak_device_memory": "torch.cuda.max_memory_allocated, reset before the data was moved"}


def _clock(torch, device) -> Callable[[], float]:
    """perf_counter, after the GPU's queued work has finished when there is a GPU."""
    if device.type != "cuda":
        return time.perf_counter

    def synced() -> float:
        torch.cuda.synchronize(device)
        return time.perf_counter()
    return synced


def median_after_warmup(times: list[float], warmup: int) -> float:
    return float(statistics.median(times[warmup:]))


def train_full_batch(torch, model, forward: Callable[[], "torch.Tensor"], spec: BenchSpec,
                     data: NodeClassificationData, device=None) -> dict:
    """Train `model` for spec.epochs epochs; `forward()` returns the logits of every node, from
    inputs the caller has already put on `device` (default: the CPU)."""
    import torch.nn.functional as F

    device = device if device is not None else torch.device("cpu")
    y = torch.from_numpy(data.y).to(device)
    train_idx = torch.from_numpy(np.flatnonzero(data.train_mask)).to(device)
    if train_idx.numel() == 0:
        raise ValueError("dataset has an empty train_mask: nothing to train on")
    model.to(device)                      # before the optimizer, which keeps the parameters it is given
    opt = torch.optim.Adam(decay_groups(torch, model, spec.weight_decay), lr=spec.lr)
    clock = _clock(torch, device)
    times, losses = [], []
    for _ in range(spec.epochs):
        t0 = clock()
        model.train()
        opt.zero_grad(set_to_none=True)
        logits = forward()
        loss = F.cross_entropy(logits[train_idx], y[train_idx])
        loss.backward()
        opt.step()
        times.append(clock() - t0)
        losses.append(float(loss.detach()))
    model.eval()
    with torch.no_grad():
        pred = forward().argmax(dim=1).cpu().numpy()

    def acc(mask: np.ndarray):
        return float((pred[mask] == data.y[mask]).mean()) if mask.any() else None

    result = {
        "epoch_times_s": times,
        "epoch_time_s": median_after_warmup(times, spec.warmup),
        "first_epoch_loss": losses[0],
        "final_loss": losses[-1],
        "epoch_losses": losses,
        "train_acc": acc(data.train_mask), "val_acc": acc(data.val_mask), "test_acc": acc(data.test_mask),
    }
    if device.type == "cuda":
        result["peak_device_bytes"] = int(torch.cuda.max_memory_allocated(device))
    return result


def decay_groups(torch, model, weight_decay: float) -> list:
    """Adam's parameter groups: weight decay on every parameter but the batch and layer norms'
    scale and shift, as morphgen's layers have it (their `norm.gamma`/`norm.beta` are spared,
    morphgen/frontend/directives.py), so that training from the same weights follows the same
    path (the parity check compares several epochs)."""
    norms = (torch.nn.BatchNorm1d, torch.nn.LayerNorm)
    spared = {id(p) for m in model.modules() if isinstance(m, norms) for p in m.parameters()}
    return [{"params": [p for p in model.parameters() if id(p) not in spared], "weight_decay": weight_decay},
            {"params": [p for p in model.parameters() if id(p) in spared], "weight_decay": 0.0}]


def build_stack(torch, convs: list, dropout: float, call: Callable, activation: str = "relu",
                input_dropout: float = 0.0, propagate=None):
    """A stack of convolutions: conv, ReLU, dropout between layers, and `input_dropout` on the
    input features first when the program has it (on a sparse CSR input, on its stored values,
    as morphgen's sparse feature path drops them).

    `call(conv, h)` applies one convolution; the peers differ only in what that needs.
    `activation` (spec.ACTIVATIONS) runs between layers. `propagate(h)`, if given, maps the
    last layer's output (APPNP's propagation after its MLP; it has no parameters to train).
    """
    import torch.nn.functional as F
    act = {"relu": F.relu, "elu": F.elu}[activation]

    class GCNStack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList(convs)

        def forward(self, x):
            h = _drop_input(torch, x, input_dropout, self.training)
            for i, conv in enumerate(self.convs):
                if i > 0:
                    h = F.dropout(h, p=dropout, training=self.training)
                h = call(conv, h)
                if i < len(self.convs) - 1:
                    h = act(h)
            return h if propagate is None else propagate(h)

    return GCNStack()


def _drop_input(torch, x, p: float, training: bool):
    """Dropout on the input features; on a sparse CSR input, on its stored values."""
    import torch.nn.functional as F
    if p <= 0:
        return x
    if x is None or not x.is_floating_point():
        raise ValueError("input_dropout on a featureless input (node ids): there are no features to drop")
    if x.layout == torch.sparse_csr:
        return torch.sparse_csr_tensor(x.crow_indices(), x.col_indices(),
                                       F.dropout(x.values(), p=p, training=training), x.shape)
    return F.dropout(x, p=p, training=training)


def build_gcnii(torch, first, convs: list, last, dropout: float, call: Callable, activation: str = "relu",
                input_dropout: float = 0.0):
    """GCNII as PyG's example builds it: h0 = act(first(x)), then per GCN2Conv h = act(call(conv,
    dropout(h), h0)), and last(dropout(h)); `input_dropout` on the features first."""
    import torch.nn.functional as F
    act = {"relu": F.relu, "elu": F.elu}[activation]

    class GCNII(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.convs, self.last = first, torch.nn.ModuleList(convs), last

        def forward(self, x):
            h = h0 = act(self.first(_drop_input(torch, x, input_dropout, self.training)))
            for conv in self.convs:
                h = act(call(conv, F.dropout(h, p=dropout, training=self.training), h0))
            return self.last(F.dropout(h, p=dropout, training=self.training))

    return GCNII()


def gin_mlp(torch, fan_in: int, fan_out: int, norm: bool):
    """GIN's MLP as morphgen's layer has it: linear, [batch norm], ReLU, linear, [batch norm];
    the linears have biases only without the norms (whose shift plays that part)."""
    nn = torch.nn
    if norm:
        return nn.Sequential(nn.Linear(fan_in, fan_out, bias=False), nn.BatchNorm1d(fan_out), nn.ReLU(),
                             nn.Linear(fan_out, fan_out, bias=False), nn.BatchNorm1d(fan_out))
    return nn.Sequential(nn.Linear(fan_in, fan_out), nn.ReLU(), nn.Linear(fan_out, fan_out))


def load_weights(torch, conv, weights: dict, targets: tuple) -> None:
    """Copy morphgen's arrays into a convolution's parameters.  `targets` holds, per array,
    (attribute path in the module, morphgen's name, transpose): morphgen's matrices are [in, out]
    and torch's Linear stores [out, in].  A name the layer does not have (no bias) is skipped;
    vectors are reshaped to the parameter ([heads * out] -> [1, heads, out], heads outermost)."""
    for path, name, transpose in targets:
        if name not in weights:
            continue
        param = conv
        for attr in path.split("."):
            param = getattr(param, attr)
        a = weights[name].T if transpose else weights[name]
        param.copy_(torch.from_numpy(np.ascontiguousarray(a)).reshape(param.shape))


def gin_targets(mlp) -> tuple:
    """load_weights targets of gin_mlp's modules (indices into the Sequential)."""
    targets, linear, norm = [], 0, 0
    for index, module in enumerate(mlp):
        kind = type(module).__name__
        if kind == "Linear":
            linear += 1
            targets += [(f"{index}.weight", f"W{linear}", True), (f"{index}.bias", f"b{linear}", False)]
        elif kind == "BatchNorm1d":
            norm += 1
            targets += [(f"{index}.weight", f"norm{norm}.gamma", False), (f"{index}.bias", f"norm{norm}.beta", False)]
    return tuple(targets)


_MODEL_NAMES = {"gcn": "GCN", "sage": "GraphSAGE", "gat": "GAT", "gin": "GIN-0", "rgcn": "R-GCN", "hgt": "HGT",
                "rgat": "R-GAT", "appnp": "APPNP", "sgc": "SGC", "gcnii": "GCNII",
                "edgeconv": "EdgeConv (max over the in-edges)"}


def model_config(spec: BenchSpec) -> dict:
    """MODEL_CONFIG with the model and its activation named: what every peer's result says it trained."""
    name = _MODEL_NAMES[spec.model]
    if spec.model == "sage":
        name += f" ({spec.aggr})"
    if spec.model == "gin":
        name += f" (MLP linear-[BN]-ReLU-linear-[BN], batch norm per layer {list(spec.norms)})"
    if spec.model in ("gat", "rgat"):
        name += (f" (heads {list(spec.heads)}, attention dropout {spec.attention_dropout}, "
                 f"slope {spec.negative_slope}" + (f", {spec.num_relations} relations" if spec.model == "rgat" else "")
                 + ")")
    if spec.model == "rgcn":
        name += (f" ({spec.num_relations} relations, mean over each relation's in-edges, self-loop weight"
                 + (f", {spec.num_bases} bases" if spec.num_bases else "") + ")")
    if spec.model == "appnp":
        return {**MODEL_CONFIG, "model": (f"APPNP: MLP (linear -> {spec.activation} -> dropout between layers, "
                                          f"dropout {spec.input_dropout} on the input features) -> {spec.hops} "
                                          f"propagation steps, teleport alpha {spec.teleport}")}
    if spec.model == "sgc":
        return {**MODEL_CONFIG, "model": f"SGC: {spec.hops} propagation steps of the input features (cached) -> linear"}
    if spec.model == "gcnii":
        return {**MODEL_CONFIG, "model": (f"GCNII: linear -> {spec.activation} (h0) -> {spec.num_layers - 2} x "
                                          f"(dropout -> GCN2Conv(alpha {spec.teleport}, theta {spec.theta}) -> "
                                          f"{spec.activation}) -> dropout -> linear; dropout {spec.input_dropout} "
                                          f"on the input features")}
    if spec.model == "hgt":
        return {**MODEL_CONFIG, "model": (f"HGT: typed input projection -> ReLU -> HGTConv ({spec.heads[1]} heads, "
                                          f"{spec.num_relations} edge types, {spec.num_node_types} node types) "
                                          f"-> linear classifier")}
    described = MODEL_CONFIG["model"].replace("GCN", name, 1).replace("ReLU", spec.activation, 1)
    if spec.input_dropout > 0:
        described = described.replace("no dropout on the input features",
                                      f"dropout {spec.input_dropout} on the input features", 1)
    return {**MODEL_CONFIG, "model": described}


MODEL_CONFIG = {
    "model": "GCN: conv -> ReLU -> dropout between layers, no dropout on the input features",
    "loss": "cross-entropy (mean) over train_mask nodes",
    "optimizer": "torch.optim.Adam, weight_decay as L2 on all parameters but the norms' scale and shift",
    "timing": "wall clock of zero_grad+forward+loss+backward+step; epoch_time_s = median after warm-up",
}
