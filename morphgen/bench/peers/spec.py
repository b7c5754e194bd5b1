"""The benchmark spec shared by every peer runner: parsing and validation (no torch here).

A spec is a JSON object; every field is checked once, here, so a runner never starts a model on a
half-valid configuration, and a bad spec is reported with the name of the offending field.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from morphgen.errors import UserError


class SpecError(UserError, ValueError):
    """A malformed benchmark spec; the message names the field."""


SUPPORTED_MODELS = ("gcn", "sage", "gat", "gin", "rgcn", "hgt", "rgat", "appnp", "sgc", "gcnii", "edgeconv")
# Models that propagate with GCN's normalisation, D^-1/2 (A + I) D^-1/2, a fixed number of `hops`
# outside their layers: APPNP after its MLP (with the `teleport` alpha to the MLP's output), SGC
# before its one linear layer.
PROPAGATING_MODELS = ("appnp", "sgc")
# The neighbourhood reductions each model can be given (rgcn: the mean over each relation's
# in-edges, R-GCN's 1/c_{i,r}).
_AGGREGATIONS = {"gcn": ("sum",), "sage": ("mean", "max"), "gat": ("sum",), "gin": ("sum",), "rgcn": ("mean",),
                 "hgt": ("sum",), "rgat": ("sum",), "appnp": ("sum",), "sgc": ("sum",), "gcnii": ("sum",),
                 "edgeconv": ("max",)}
ACTIVATIONS = ("relu", "elu")
# PyG's two R-GCN convolutions: RGCNConv loops over the relations, FastRGCNConv gathers one
# weight matrix per edge. Same model and parameters; the benchmark times both.
PYG_RGCN_CONVS = ("RGCNConv", "FastRGCNConv")


def layer_parameters(model: str, fan_in: int, fan_out: int, bias: bool = True,
                     norm: bool = False, relations: int = 1,
                     bases: Optional[int] = None, heads: int = 1) -> dict[str, tuple[int, ...]]:
    """The trainable parameters of one layer as morphgen names them (layer{i}.<name>), with their
    shapes: what the parity check hands from morphgen to the peers. Matrices are [in, out].
    GIN's two-layer MLP has batch norms instead of biases when `norm`. R-GCN: one matrix per
    relation W [relations, in, out], or with `bases` the bases V [bases, in, out] and their
    coefficients A [relations, bases] (W_r = sum_b A[r, b] V[b]); the self-loop weight S and b.
    R-GAT (RGATConv): W [relations, in, out], the query Q and key K [out, heads], the bias b."""
    if model == "rgat":                   # RGATConv: W per relation, query and key [out, heads], bias
        return {"W": (relations, fan_in, fan_out), "Q": (fan_out, heads), "K": (fan_out, heads), "b": (fan_out,)}
    if model == "rgcn":
        typed = ({"V": (bases, fan_in, fan_out), "A": (relations, bases)} if bases
                 else {"W": (relations, fan_in, fan_out)})
        return {**typed, "S": (fan_in, fan_out), **({"b": (fan_out,)} if bias else {})}
    if model in PROPAGATING_MODELS:       # APPNP's MLP layers, SGC's classifier: plain linear layers
        return {"W": (fan_in, fan_out), **({"b": (fan_out,)} if bias else {})}
    if model == "gin":
        mlp = {"W1": (fan_in, fan_out), "W2": (fan_out, fan_out)}
        if norm:
            return {**mlp, **{f"norm{k}.{v}": (fan_out,) for k in (1, 2) for v in ("gamma", "beta")}}
        return {**mlp, "b1": (fan_out,), "b2": (fan_out,)}
    matrices = {"gcn": ("W",), "sage": ("W_neigh", "W_self"), "gat": ("W",)}[model]
    out = {name: (fan_in, fan_out) for name in matrices}
    if model == "gat":                    # attention vectors [heads * out], source then destination
        out.update(a_src=(fan_out,), a_dst=(fan_out,))
    if bias:
        out["b"] = (fan_out,)
    return out


def hgt_layer_parameters(i: int, fan_in: int, fan_out: int, relations: int, ntypes: int,
                         heads: int) -> dict[str, tuple[int, ...]]:
    """An HGT's three layers (layers [F, H, H, C], heads [1, heads, 1]): 0 the typed input
    projection W [F, H] with a bias per node type; 1 HGTConv: K, Q, V and the output projection A
    per node type [T, H, H] with their biases, the relation matrices Watt (keys) and Wmsg (messages)
    per edge type, block diagonal as HGTConv's are: [R, H, H/heads], each head's H/heads square
    block under the previous one; the prior mu [R, heads] and the skip gate [T, 1]; 2 the classifier."""
    if i == 0:
        return {"W": (fan_in, fan_out), "b": (ntypes, fan_out)}
    if i == 2:
        return {"W": (fan_in, fan_out), "b": (fan_out,)}
    typed = {name: shape for m in ("K", "Q", "V", "A") for name, shape in
             ((m, (ntypes, fan_in, fan_out)), (f"b{m}", (ntypes, fan_out)))}
    blocks = (relations, fan_in, fan_out // heads)
    return {**typed, "Watt": blocks, "Wmsg": blocks,
            "mu": (relations, heads), "skip": (ntypes, 1)}


@dataclass(frozen=True)
class BenchSpec:
    model: str                       # SUPPORTED_MODELS
    aggr: str                        # neighbourhood reduction, one of _AGGREGATIONS[model]
    layers: tuple[int, ...]          # widths, input first and class count last: [F, 32, 32, C]
    dropout: float                   # between layers
    lr: float
    weight_decay: float
    epochs: int
    warmup: int
    threads: int
    bias: bool
    self_loops: bool
    init_weights: Optional[str]      # npz with layer{i}.W [in, out] and layer{i}.b [out]
    sparse_features: bool
    device: str = "cpu"              # torch device the peer trains on: "cpu" or "cuda:N"
    activation: str = "relu"         # between layers: ACTIVATIONS
    heads: tuple[int, ...] = ()      # gat, hgt, rgat: attention heads per layer (layers[i+1] counts all of them)
    attention_dropout: float = 0.0   # gat, rgat: dropout on the attention coefficients
    input_dropout: float = 0.0       # on the input features (their stored values where sparse)
    negative_slope: float = 0.2      # gat, rgat: leaky_relu slope of the attention scores
    norms: tuple[bool, ...] = ()     # gin: batch norm in each layer (after both MLP products and the layer)
    num_relations: int = 1           # rgcn, hgt, rgat: edge types (the data's edge_type values lie below it)
    num_node_types: int = 1          # hgt: node types (the data's node_type values lie below it)
    num_bases: Optional[int] = None  # rgcn: basis decomposition with this many bases, or none
    pyg_conv: str = "RGCNConv"       # rgcn, PyG only: PYG_RGCN_CONVS
    edge_weight: bool = False        # gcn: the messages weighed by the data's edge weights
    hops: int = 0                    # appnp, sgc: propagation steps K
    teleport: float = 0.0            # appnp, gcnii: the share alpha of the first output mixed into every step
    theta: float = 0.0               # gcnii: the identity mapping's beta_l = log(theta / l + 1)

    def parameters(self, i: int) -> dict[str, tuple[int, ...]]:
        """layer_parameters of layer i (hgt_layer_parameters for an hgt; a gcnii's first and last
        layers are linear with a bias, the GCN2Conv layers between them one square W each; an
        edgeconv's message MLP has W [2 * in, out], Wi over Wd, and its classifier W and b)."""
        if self.model == "edgeconv":       # the message MLP reads [x_v, x_u - x_v]: W is [2 * in, out]
            rows = 2 * self.layers[i] if i == 0 else self.layers[i]
            return {"W": (rows, self.layers[i + 1]), **({"b": (self.layers[i + 1],)} if self.bias else {})}
        if self.model == "gcnii":
            width = self.layers[i + 1]
            if 0 < i < self.num_layers - 1:
                return {"W": (width, width)}
            return {"W": (self.layers[i], width), **({"b": (width,)} if self.bias else {})}
        if self.model == "hgt":
            return hgt_layer_parameters(i, self.layers[i], self.layers[i + 1], self.num_relations,
                                        self.num_node_types, self.heads[i])
        return layer_parameters(self.model, self.layers[i], self.layers[i + 1], self.bias,
                                bool(self.norms[i]) if self.norms else False,
                                self.num_relations, self.num_bases, self.heads[i] if self.heads else 1)

    @property
    def num_layers(self) -> int:
        return len(self.layers) - 1

    @property
    def on_cuda(self) -> bool:
        return self.device != "cpu"


_DEFAULTS = {
    "model": "gcn", "aggr": None, "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-4, "epochs": 200,
    "warmup": 3, "threads": 1, "bias": True, "self_loops": True, "init_weights": None,
    "sparse_features": False, "device": "cpu", "activation": "relu", "heads": None,
    "attention_dropout": 0.0, "input_dropout": 0.0, "negative_slope": 0.2, "norms": None,
    "num_relations": None, "num_bases": None, "pyg_conv": None, "num_node_types": None,
    "edge_weight": False, "hops": None, "teleport": None, "theta": None,
}
# "cuda" alone is accepted and means GPU 0; the index is always written out after parsing, so a
# result names the GPU it ran on.
_DEVICE = re.compile(r"cpu|cuda(?::(\d+))?")


def _number(d: dict, key: str, lo: float, hi: float) -> float:
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise SpecError(f"spec field '{key}': expected a number in [{lo}, {hi}], got {v!r}")
    return float(v)


def _integer(d: dict, key: str, lo: int) -> int:
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise SpecError(f"spec field '{key}': expected an integer >= {lo}, got {v!r}")
    return v


def _flag(d: dict, key: str) -> bool:
    v = d[key]
    if not isinstance(v, bool):
        raise SpecError(f"spec field '{key}': expected true or false, got {v!r}")
    return v


def _device(d: dict) -> str:
    v = d["device"]
    m = _DEVICE.fullmatch(v) if isinstance(v, str) else None
    if m is None:
        raise SpecError(f"spec field 'device': expected \"cpu\" or \"cuda:N\", got {v!r}")
    return "cpu" if v == "cpu" else f"cuda:{int(m.group(1) or 0)}"


def _heads(d: dict, layers: list) -> tuple[int, ...]:
    """Heads per layer (default one each); every layer's width must split evenly across them."""
    heads = d["heads"] if d["heads"] is not None else [1] * (len(layers) - 1)
    if (not isinstance(heads, list) or len(heads) != len(layers) - 1
            or not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in heads)):
        raise SpecError(f"spec field 'heads': expected {len(layers) - 1} positive integers (one per layer), got {heads!r}")
    for i, h in enumerate(heads):
        if layers[i + 1] % h:
            raise SpecError(f"spec field 'heads': layer {i} has width {layers[i + 1]}, not a multiple of {h} heads")
    return tuple(heads)


def _norms(d: dict, layers: list) -> tuple[bool, ...]:
    """Batch norm per layer (gin; default none)."""
    norms = d["norms"] if d["norms"] is not None else [False] * (len(layers) - 1)
    if not isinstance(norms, list) or len(norms) != len(layers) - 1 or not all(isinstance(x, bool) for x in norms):
        raise SpecError(f"spec field 'norms': expected {len(layers) - 1} booleans (one per layer), got {norms!r}")
    return tuple(norms)


def _pyg_conv(d: dict, key: str) -> str:
    if d[key] not in PYG_RGCN_CONVS:
        raise SpecError(f"spec field '{key}': expected one of {', '.join(PYG_RGCN_CONVS)}, got {d[key]!r}")
    return d[key]


# The fields only some models have: their parser and those models (checked by parse_spec).
MODEL_FIELDS = {
    "num_relations": (lambda d, k: _integer(d, k, 1), ("rgcn", "hgt", "rgat")),
    "num_node_types": (lambda d, k: _integer(d, k, 1), ("hgt",)),
    "num_bases": (lambda d, k: _integer(d, k, 1), ("rgcn",)),
    "pyg_conv": (_pyg_conv, ("rgcn",)),
    "hops": (lambda d, k: _integer(d, k, 1), PROPAGATING_MODELS),          # propagation steps
    "teleport": (lambda d, k: _number(d, k, 0.0, 1.0), ("appnp", "gcnii")),
    "theta": (lambda d, k: _number(d, k, 1e-6, 1e6), ("gcnii",)),
}


def _model_fields(d: dict) -> dict:
    """The MODEL_FIELDS the spec gives, parsed (checked against the model by parse_spec)."""
    return {key: parse(d, key) for key, (parse, _) in MODEL_FIELDS.items() if d[key] is not None}


def parse_spec(raw: object) -> BenchSpec:
    """Validate a decoded JSON spec; missing optional fields take the defaults above."""
    if not isinstance(raw, dict):
        raise SpecError(f"spec: expected a JSON object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(_DEFAULTS) - {"layers"})
    if unknown:
        raise SpecError(f"spec field '{unknown[0]}': unknown field (known: layers, {', '.join(sorted(_DEFAULTS))})")
    if "layers" not in raw:
        raise SpecError("spec field 'layers': missing (widths such as [F, 32, 32, C])")
    d = {**_DEFAULTS, **raw}
    if d["model"] not in SUPPORTED_MODELS:
        raise SpecError(f"spec field 'model': {d['model']!r} is not supported (supported: {', '.join(SUPPORTED_MODELS)})")
    aggr = d["aggr"] if d["aggr"] is not None else _AGGREGATIONS[d["model"]][0]
    if aggr not in _AGGREGATIONS[d["model"]]:
        raise SpecError(f"spec field 'aggr': {aggr!r} is not an aggregation of {d['model']} "
                        f"(one of: {', '.join(_AGGREGATIONS[d['model']])})")
    layers = d["layers"]
    if (not isinstance(layers, list) or len(layers) < 2
            or not all(isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in layers)):
        raise SpecError(f"spec field 'layers': expected a list of at least two positive integers, got {layers!r}")
    init = d["init_weights"]
    if init is not None and not isinstance(init, str):
        raise SpecError(f"spec field 'init_weights': expected a path string or null, got {init!r}")
    spec = BenchSpec(
        model=d["model"], aggr=aggr, layers=tuple(layers),
        dropout=_number(d, "dropout", 0.0, 0.999), lr=_number(d, "lr", 0.0, 10.0),
        weight_decay=_number(d, "weight_decay", 0.0, 10.0),
        epochs=_integer(d, "epochs", 1), warmup=_integer(d, "warmup", 0),
        threads=_integer(d, "threads", 1), bias=_flag(d, "bias"), self_loops=_flag(d, "self_loops"),
        init_weights=init, sparse_features=_flag(d, "sparse_features"), device=_device(d),
        activation=d["activation"], heads=_heads(d, layers),
        attention_dropout=_number(d, "attention_dropout", 0.0, 0.999),
        input_dropout=_number(d, "input_dropout", 0.0, 0.999),
        negative_slope=_number(d, "negative_slope", 0.0, 10.0), norms=_norms(d, layers),
        edge_weight=_flag(d, "edge_weight"), **_model_fields(d),
    )
    if spec.edge_weight and spec.model != "gcn":
        raise SpecError(f"spec field 'edge_weight': only a gcn model weighs its edges, not {spec.model}")
    if spec.activation not in ACTIVATIONS:
        raise SpecError(f"spec field 'activation': expected one of {', '.join(ACTIVATIONS)}, got {spec.activation!r}")
    if spec.model not in ("gat", "hgt", "rgat") and d["heads"] is not None:
        raise SpecError(f"spec field 'heads': only gat, hgt and rgat models have attention heads, not {spec.model}")
    if spec.model != "gin" and d["norms"] is not None:
        raise SpecError(f"spec field 'norms': only a gin model has batch norms in its layers, not {spec.model}")
    if spec.model in ("rgcn", "hgt", "rgat") and d["num_relations"] is None:
        raise SpecError(f"spec field 'num_relations': missing (an {spec.model} model needs the number of edge types)")
    if spec.model == "hgt":
        _check_hgt(spec, d)
    if spec.model in PROPAGATING_MODELS:
        _check_propagation(spec, d)
    if spec.model == "gcnii":
        _check_gcnii(spec, d)
    if spec.model == "edgeconv" and len(spec.layers) != 3:
        raise SpecError(f"spec field 'layers': an edgeconv has [F, H, C] (EdgeConv, a linear classifier), "
                        f"got {list(spec.layers)}")
    for key, (_, models) in MODEL_FIELDS.items():
        if spec.model not in models and d[key] is not None:
            raise SpecError(f"spec field '{key}': only {' and '.join(models)} models have it, not {spec.model}")
    if spec.warmup >= spec.epochs:
        raise SpecError(f"spec field 'warmup': {spec.warmup} leaves no timed epoch out of epochs={spec.epochs}")
    return spec


def _check_hgt(spec: BenchSpec, d: dict) -> None:
    """An hgt's layers are [F, H, H, C] with heads [1, h, 1] (hgt_layer_parameters)."""
    if d["num_node_types"] is None:
        raise SpecError("spec field 'num_node_types': missing (an hgt model needs the number of node types)")
    if len(spec.layers) != 4 or spec.layers[1] != spec.layers[2]:
        raise SpecError(f"spec field 'layers': an hgt has [F, H, H, C] (input projection, HGTConv, "
                        f"classifier), got {list(spec.layers)}")
    if spec.heads[0] != 1 or spec.heads[2] != 1:
        raise SpecError(f"spec field 'heads': an hgt has heads only in its HGTConv layer ([1, h, 1]), "
                        f"got {list(spec.heads)}")


def _check_propagation(spec: BenchSpec, d: dict) -> None:
    """appnp and sgc name their steps; appnp its teleport share; sgc is one linear layer."""
    if d["hops"] is None:
        raise SpecError(f"spec field 'hops': missing (an {spec.model} model needs the number of propagation steps)")
    if spec.model == "appnp" and d["teleport"] is None:
        raise SpecError("spec field 'teleport': missing (an appnp model needs its teleport share alpha)")
    if spec.model == "sgc" and len(spec.layers) != 2:
        raise SpecError(f"spec field 'layers': an sgc has one linear layer [F, C], got {list(spec.layers)}")


def _check_gcnii(spec: BenchSpec, d: dict) -> None:
    """A gcnii is [F, H, H, ..., H, C]: a linear layer, GCN2Conv layers of width H, a linear
    classifier; it names its teleport share and its theta."""
    for key in ("teleport", "theta"):
        if d[key] is None:
            raise SpecError(f"spec field '{key}': missing (a gcnii model needs its {key})")
    hidden = spec.layers[1:-1]
    if len(hidden) < 2 or len(set(hidden)) != 1:
        raise SpecError(f"spec field 'layers': a gcnii has [F, H, H, ..., H, C] (a linear layer, GCN2Conv "
                        f"layers of width H, a classifier), got {list(spec.layers)}")


def load_spec(path: str | Path) -> BenchSpec:
    try:
        raw = json.loads(Path(path).read_text())
    except OSError as exc:
        raise SpecError(f"spec file {path}: cannot be read ({exc.strerror or exc})") from exc
    except json.JSONDecodeError as exc:
        raise SpecError(f"spec file {path}: not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from exc
    return parse_spec(raw)
