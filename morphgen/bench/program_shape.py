"""What a peer needs to train the same model as a morphgen program, read from its forward IR.

`program_shape` walks the front end's forward ops (no code generation) layer by layer and
recognises the stacks PyG and DGL can rebuild with one library convolution per layer:

    GCN   linear, aggregate(sum, gcn norm, self loops); or, weighing the edges (gnn.layer(...,
          edge_weight = true)), linear, [graph_scalar edge_weight, in the first such layer],
          aggregate(sum, the weights, gcn_weighted norm, self loops); or, written out
          (examples/gcn_weighted.mp, or as message passing: coefficients n_src * n_dst), linear,
          aggregate(sum, [the weights], node_scale norm with the scale rsqrt(d + 1), self loops), d
          the in-degree or the in-edges' weights summed: the form the compiler's passes give the
          row scales around a sum (fold_node_scales, fold_edge_normalisation), the scale computed
          once (hoist_graph_constants)
    SAGE  aggregate(mean | max), linear (neighbours), linear (the node itself), add
    GAT   linear, dot (source), dot (destination), gather, gather, add, leaky_relu, edge_softmax,
          [dropout (attention)], gather (source), head_mul | mul, scatter(sum)
    GIN   aggregate(sum), add (the node itself, eps 0), then the MLP linear NORM relu linear NORM
          with NORM = batch_standardize mul bias_add (batch norm) or bias_add
    R-GCN gather (source), [basis_combine(A, V)], typed_linear (by edge type), [graph_scalar
          rel_degree], div (by rel_degree: 1/c_{i,r}), scatter(sum, destination), linear (the
          node itself: the self-loop weight), add

each after an optional dropout on the layer's input and followed by [bias_add] [relu | elu]; the
last layer has no activation and feeds cross_entropy. Anything else is not approximated:
`PeerModel.unsupported` says why, and the peers are reported as such.

Relational attention (typed weights and an edge softmax) reads its values several times, so it
is matched as a dataflow pattern instead (attention_shape.py): an HGT gets PyG's HGTConv, an
R-GAT in RGATConv's form a stack of PyG's RGATConv. So are the models that propagate with GCN's
normalisation written out (propagation_shape.py): APPNP, SGC and GCNII; and EdgeConv
(edgeconv_shape.py).
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from morphgen.errors import UserError
from morphgen.ir_ops import aggregate_scale, aggregate_weights, reads_edge_weights

from .attention_shape import match_hgt, match_rgat
from .edgeconv_shape import looks_like_edgeconv, match_edgeconv
from .propagation_shape import looks_propagating, match_propagation


class BenchError(UserError):
    """Bad input to a benchmark (model, dataset, option); the message names it."""


@dataclass
class PeerModel:
    """What a peer needs to build the same model as a morphgen program."""
    conv: str                       # "gcn" | "sage" | "gat" | ... (spec.SUPPORTED_MODELS)
    aggr: str                       # the neighbourhood reduction: "sum" (gcn, gat), "mean" | "max" (sage)
    layers: list                    # widths with symbols: ["F", 32, 32, "C"] (all heads together)
    dropouts: list                  # dropout on the input of each layer (morphgen's semantics)
    bias: bool
    optimizer: str
    lr: float
    weight_decay: float
    epochs: int
    activation: str = "relu"        # between layers
    heads: list = field(default_factory=list)   # attention heads per layer (gat)
    attention_dropout: float = 0.0  # dropout on the attention coefficients (gat)
    negative_slope: float = 0.2     # leaky_relu of the attention scores (gat)
    norms: list = field(default_factory=list)   # batch norm in each layer's MLP (gin)
    num_bases: Optional[int] = None # basis decomposition of the relation weights (rgcn)
    hops: int = 0                   # propagation steps (appnp, sgc)
    teleport: float = 0.0           # the share of the first output mixed into every step (appnp, gcnii)
    theta: float = 0.0              # the identity mapping's beta_l = log(theta / l + 1) (gcnii)
    # Per layer, the peers' parameter name -> the program's (rgcn, whose weights the program
    # declares and names itself); empty: morphgen names them layer{i}.<name>.
    parameter_names: list = field(default_factory=list)
    self_loops: bool = True         # a loop at every node: GCN's A + I, gnn.addSelfLoops for GAT
    edge_weight: bool = False       # gcn: the messages weighed by the data's edge weights
    feature_normalization: Optional[str] = None   # gnn.normalizeFeatures kind, applied for the peers
    unsupported: Optional[str] = None   # why the peers cannot run this program, or None
    notes: list = field(default_factory=list)   # semantic differences a reader must know
    # peer -> why that one peer cannot run the program (the others can)
    peer_unsupported: dict = field(default_factory=dict)
    # program parameter -> heads: the parity check starts it block diagonal (one block per head),
    # which is all a peer that keeps only those blocks can load (hgt's relation matrices)
    block_diagonal: dict = field(default_factory=dict)

    @property
    def input_dropout(self) -> float:
        """The dropout on the input features (the peers apply it too)."""
        return float(self.dropouts[0]) if self.dropouts else 0.0

    @property
    def hidden_dropout(self) -> float:
        """The dropout between layers (what the peers apply)."""
        inner = self.dropouts[1:]
        return float(inner[0]) if inner else 0.0

    def resolved_layers(self, num_features: int, num_classes: int) -> list:
        table = {"F": num_features, "C": num_classes}
        out = []
        for w in self.layers:
            if isinstance(w, int):
                out.append(w)
            elif w in table:
                out.append(table[w])
            else:
                raise BenchError(f"layer width '{w}': only F and C can be bound from the data")
        return out


@dataclass
class _Layer:
    end: int                        # index of the first op after the layer
    kind: str
    aggr: str
    heads: int = 1
    attention_dropout: float = 0.0
    negative_slope: float = 0.2
    norm: bool = False
    bases: Optional[int] = None     # rgcn: number of bases, or None
    params: Optional[dict] = None   # rgcn: peer parameter name -> program parameter name
    edge_weight: bool = False       # gcn: weighs its messages by the edge weights


def _width(dim):
    return dim if isinstance(dim, int) else str(dim)


def _opcodes(ops, i, n):
    return [op.opcode for op in ops[i:i + n]]


def _gcn_layer(ops, i, problems, n, scales: dict) -> Optional[_Layer]:
    j = i + 1
    if j < len(ops) and reads_edge_weights(ops[j]):
        j += 1              # the edge weights, which the later layers weighing their edges read too
    if _opcodes(ops, i, 1) != ["linear"] or _opcodes(ops, j, 1) != ["aggregate"]:
        problems.append(f"layer {n}: ops {_opcodes(ops, i, j + 1 - i)} are not a GCN layer (linear, aggregate)")
        return None
    agg = ops[j]
    if agg.attrs.get("norm") == "node_scale":
        return _written_out_gcn_layer(ops[i], agg, j + 1, problems, n, scales)
    weighted = agg.attrs.get("norm") == "gcn_weighted"
    weights = _producer(ops, agg.inputs[1]) if len(agg.inputs) == 2 else None
    if weighted and not reads_edge_weights(weights):
        problems.append(f"layer {n}: its GCN normalisation weighs the edges by values other than e.edge_weight")
    if (agg.attrs.get("reduce") != "sum" or agg.attrs.get("norm") not in ("gcn", "gcn_weighted")
            or not agg.attrs.get("self_loops") or (len(agg.inputs) != 1 and not weighted)):
        problems.append(f"layer {n}: aggregation {agg.attrs} is not GCN's normalised sum with self loops")
    return _Layer(j + 1, "gcn", "sum", edge_weight=weighted)


def _written_out_gcn_layer(linear, agg, end, problems, n, scales: dict) -> _Layer:
    """A GCN layer whose normalisation the program writes itself, folded into one aggregation."""
    kind = scales.get(aggregate_scale(agg).id)
    weights = aggregate_weights(agg)
    if kind is None:
        problems.append(f"layer {n}: the scales around its sum are not GCN's rsqrt(degree + 1)")
    elif (kind == "gcn_weighted") != (weights is not None and weights.id in scales.get("edge_weights", ())):
        problems.append(f"layer {n}: its messages and its degrees do not weigh the edges alike")
    if agg.attrs.get("reduce") != "sum" or not agg.attrs.get("self_loops"):
        problems.append(f"layer {n}: aggregation {agg.attrs} is not GCN's sum with the node's own row")
    params = {"W": _param_name(linear.inputs[1], "weight", problems, n)}
    return _Layer(end, "gcn", "sum", edge_weight=kind == "gcn_weighted", params=params)


def _gcn_scales(program) -> dict:
    """value id -> "gcn" | "gcn_weighted" for GCN's normalisation written out, rsqrt(d + 1) with d
    the in-degree or the in-edges' weights summed; under "edge_weights" the ids of the values
    that read the data's edge weights."""
    ops = program.invariant + program.forward
    prod = {op.output.id: op for op in ops if op.output is not None}
    scales = {"edge_weights": {op.output.id for op in ops if reads_edge_weights(op)}}
    for op in ops:
        shift = prod.get(op.inputs[0].id) if op.opcode == "rsqrt" else None
        if shift is None or shift.opcode != "shift" or float(shift.attrs.get("c", 0.0)) != 1.0:
            continue
        degree = prod.get(shift.inputs[0].id)
        if degree is not None and degree.opcode == "graph_scalar" and degree.attrs.get("kind") == "in_degree":
            scales[op.output.id] = "gcn"
        elif (degree is not None and degree.opcode == "scatter" and degree.attrs.get("reduce") == "sum"
              and degree.attrs.get("end", "dst") == "dst" and degree.inputs[0].id in scales["edge_weights"]):
            scales[op.output.id] = "gcn_weighted"
    return scales


def _with_normalisation_folded(program):
    """A copy of the program with row scales around its sums folded into its aggregations and
    their scales computed once, as the compiler does (passes: fold_node_scales,
    fold_edge_normalisation, hoist_graph_constants), when it has any; None otherwise (the other
    layers are matched in the front end's form)."""
    from morphgen.passes import (eliminate_common_subexpressions, fold_edge_aggregations, fold_edge_normalisation,
                                 fold_node_scales, fold_self_terms, hoist_graph_constants, remove_dead_forward,
                                 sink_gathers)
    program = copy.deepcopy(program)
    sink_gathers(program)                 # a message u.h * u.norm: a row scale the folds below take
    eliminate_common_subexpressions(program)
    fold_edge_aggregations(program)
    folded = fold_edge_normalisation(program)
    fold_self_terms(program)
    if not folded + fold_node_scales(program):
        return None
    eliminate_common_subexpressions(program)      # APPNP's teleport term, once for every step
    remove_dead_forward(program)
    hoist_graph_constants(program)
    return program


def _sage_layer(ops, i, problems, n) -> Optional[_Layer]:
    seq = _opcodes(ops, i, 4)
    if seq != ["aggregate", "linear", "linear", "add"]:
        problems.append(f"layer {n}: ops {seq} are not a SAGE layer (aggregate, linear, linear, add)")
        return None
    agg, neigh, self_ = ops[i], ops[i + 1], ops[i + 2]
    if agg.attrs.get("norm") != "none" or agg.attrs.get("self_loops"):
        problems.append(f"layer {n}: aggregation {agg.attrs} is not SAGE's plain neighbourhood")
    if neigh.inputs[0] is not agg.output or self_.inputs[0] is not agg.inputs[0]:
        problems.append(f"layer {n}: the two products are not W_neigh * aggregate(h) and W_self * h")
    return _Layer(i + 4, "sage", str(agg.attrs.get("reduce")))


_GAT_SCORES = ["linear", "dot", "dot", "gather", "gather", "add", "leaky_relu", "edge_softmax"]


def _gat_layer(ops, i, problems, n) -> Optional[_Layer]:
    if _opcodes(ops, i, len(_GAT_SCORES)) != _GAT_SCORES:
        problems.append(f"layer {n}: ops {_opcodes(ops, i, len(_GAT_SCORES))} are not a GAT layer")
        return None
    lin, dot_a, dot_b, gather_a, gather_b = ops[i:i + 5]
    heads = int(dot_a.attrs.get("heads", 1))
    by_end = {gather_a.attrs.get("end"): gather_a.inputs[0], gather_b.attrs.get("end"): gather_b.inputs[0]}
    if set(by_end) != {"src", "dst"} or {id(by_end["src"]), id(by_end["dst"])} != {id(dot_a.output), id(dot_b.output)}:
        problems.append(f"layer {n}: the attention scores are not a_src . Wh[src] + a_dst . Wh[dst]")
    slope = float(ops[i + 6].attrs.get("alpha", 0.2))
    j, p_att = i + len(_GAT_SCORES), 0.0
    if j < len(ops) and ops[j].opcode == "dropout":
        p_att = float(ops[j].attrs.get("p", 0.0))
        j += 1
    tail = _opcodes(ops, j, 3)
    if tail not in (["gather", "head_mul", "scatter"], ["gather", "mul", "scatter"]):
        problems.append(f"layer {n}: ops {tail} do not weight the messages by the attention")
        return None
    if ops[j].inputs[0] is not lin.output or ops[j + 2].attrs.get("reduce") != "sum":
        problems.append(f"layer {n}: the messages are not the attention-weighted sum of W h[src]")
    return _Layer(j + 3, "gat", "sum", heads, p_att, slope)


def _gin_norm(ops, j, problems, n) -> tuple[Optional[int], bool]:
    """After one of the MLP's products: batch norm (batch_standardize mul bias_add) or a bias."""
    if _opcodes(ops, j, 3) == ["batch_standardize", "mul", "bias_add"]:
        bs = ops[j].attrs
        if float(bs.get("eps", 1e-5)) != 1e-5 or float(bs.get("momentum", 0.1)) != 0.1:
            problems.append(f"layer {n}: batch norm eps {bs.get('eps')} momentum {bs.get('momentum')} "
                            "(the peers use torch's 1e-5 and 0.1)")
        return j + 3, True
    if _opcodes(ops, j, 1) == ["bias_add"]:
        return j + 1, False
    problems.append(f"layer {n}: ops {_opcodes(ops, j, 3)} after an MLP product are neither a batch norm nor a bias")
    return None, False


def _gin_layer(ops, i, problems, n) -> Optional[_Layer]:
    agg, add = ops[i], ops[i + 1]
    if agg.attrs.get("reduce") != "sum" or agg.attrs.get("norm") != "none" or agg.attrs.get("self_loops"):
        problems.append(f"layer {n}: aggregation {agg.attrs} is not GIN's plain sum")
    if {id(v) for v in add.inputs} != {id(agg.inputs[0]), id(agg.output)}:
        problems.append(f"layer {n}: the node's own row is not added once to the sum (GIN-0)")
    j = i + 2
    if _opcodes(ops, j, 1) != ["linear"]:
        problems.append(f"layer {n}: the GIN aggregation is not followed by the MLP's linear")
        return None
    width = ops[j].output.width
    j, norm1 = _gin_norm(ops, j + 1, problems, n)
    if j is None or _opcodes(ops, j, 2) != ["relu", "linear"]:
        problems.append(f"layer {n}: the GIN MLP is not linear, norm, relu, linear, norm")
        return None
    if ops[j + 1].output.width != width:
        problems.append(f"layer {n}: the MLP's hidden width differs from its output (the peers use one width)")
    j, norm2 = _gin_norm(ops, j + 2, problems, n)
    if j is None:
        return None
    if norm1 != norm2:
        problems.append(f"layer {n}: batch norm after one MLP product only")
    return _Layer(j, "gin", "sum", norm=norm1)


def _producer(ops, value):
    return next((op for op in ops if op.output is value), None)


def _param_name(value, what: str, problems, n) -> Optional[str]:
    if getattr(value, "assoc", None) != "param" or not value.name:
        problems.append(f"layer {n}: the {what} is not a declared weight")
        return None
    return value.name


def _rgcn_layer(ops, i, problems, n) -> Optional[_Layer]:
    gather = ops[i]
    h = gather.inputs[0]
    if gather.attrs.get("end") != "src":
        problems.append(f"layer {n}: the messages gather the {gather.attrs.get('end')} end, not the source")
        return None
    j, basis = i + 1, None
    if _opcodes(ops, j, 1) == ["basis_combine"]:
        basis, j = ops[j], j + 1
    if _opcodes(ops, j, 1) != ["typed_linear"] or ops[j].inputs[0] is not gather.output:
        problems.append(f"layer {n}: ops {_opcodes(ops, i, 3)} are not an R-GCN layer "
                        "(gather, typed_linear by edge type, div by rel_degree, scatter, linear, add)")
        return None
    typed, j = ops[j], j + 1
    weight = typed.inputs[1]
    if weight.domain != "etype":
        problems.append(f"layer {n}: the typed weights are indexed by {weight.domain}, not by the edge type")
    params = {}
    if basis is not None:
        coeff, bases_value = basis.inputs
        if weight is not basis.output or coeff.domain != "etype" or len(bases_value.shape) != 3:
            problems.append(f"layer {n}: the basis decomposition is not (A[etypes][B] * V[B][in][out])[e.etype]")
            return None
        params["A"] = _param_name(coeff, "basis coefficient matrix", problems, n)
        params["V"] = _param_name(bases_value, "basis matrix", problems, n)
        bases = bases_value.shape[0]
    else:
        params["W"] = _param_name(weight, "relation weight", problems, n)
        bases = None
    if _opcodes(ops, j, 1) == ["graph_scalar"]:
        j += 1
    div = None
    if _opcodes(ops, j, 1) == ["div"]:
        div, j = ops[j], j + 1
    if _opcodes(ops, j, 3) != ["scatter", "linear", "add"]:
        problems.append(f"layer {n}: ops {_opcodes(ops, j, 3)} after the typed product are not R-GCN's "
                        "[div by rel_degree], scatter (sum), linear (self loop), add")
        return None
    scatter, lin, add = ops[j:j + 3]
    norm = _producer(ops[:j], div.inputs[1]) if div is not None and div.inputs[0] is typed.output else None
    if norm is None or norm.opcode != "graph_scalar" or norm.attrs.get("kind") != "rel_degree":
        problems.append(f"layer {n}: the messages are not divided by e.rel_degree (R-GCN's 1/c_(i,r), "
                        "what the peers' mean per relation computes)")
    if scatter.inputs[0] is not (div.output if div is not None else typed.output) \
            or scatter.attrs.get("reduce") != "sum" or scatter.attrs.get("end") != "dst":
        problems.append(f"layer {n}: the messages are not summed at their destination")
    if lin.inputs[0] is not h:
        problems.append(f"layer {n}: the self-loop product does not read the layer's input")
    params["S"] = _param_name(lin.inputs[1], "self-loop weight", problems, n)
    if {id(v) for v in add.inputs} != {id(scatter.output), id(lin.output)}:
        problems.append(f"layer {n}: the layer does not add the self-loop product to the relation messages")
    if not isinstance(bases, (int, type(None))):
        problems.append(f"layer {n}: the number of bases '{bases}' is not a constant")
    return _Layer(j + 3, "rgcn", "mean", bases=bases, params=params)


def _relational_attention(ops) -> Optional[str]:
    """Typed weights with an edge softmax: the relational attention model's name, or None."""
    kinds = {op.opcode for op in ops}
    if not kinds & {"typed_linear", "typed_param"} or "edge_softmax" not in kinds:
        return None
    return "RGAT" if "leaky_relu" in kinds else "HGT"


_HGT_CONV_PARAMETERS = ("K", "bK", "Q", "bQ", "V", "bV", "A", "bA", "Watt", "Wmsg", "mu", "skip")


def _hgt_model(program, loss_op) -> PeerModel:
    """The peers' HGT (input projection, PyG's HGTConv, classifier) for a program that computes it."""
    shape, why = match_hgt(program)
    problems = [why] if shape is None else []
    if program.self_loops:
        problems.append("an HGT with gnn.addSelfLoops (the peers' graphs have no loop edges)")
    problems += _optimizer_problems(program)
    w = shape.weights if shape else {}
    heads = shape.heads if shape else 1
    hidden = shape.hidden if shape else 0
    names = [{"W": w.get("Win"), "b": w.get("bin")}, {k: w.get(k) for k in _HGT_CONV_PARAMETERS},
             {"W": w.get("Wout"), "b": w.get("bout")}]
    notes = _program_notes(program, [0.0])
    full = shape is not None and shape.full_relations
    if full:
        notes.insert(0, f"HGTConv's relation matrices are block diagonal (one {hidden // heads} x {hidden // heads} "
                        f"block per head); the program's Watt and Wmsg are full {hidden} x {hidden} matrices, {heads}x "
                        f"the relation FLOPs. The parity check starts them block diagonal")
    return PeerModel(
        conv="hgt", aggr="sum", layers=[_width(program.inputs["features"].width), hidden, hidden,
                                        _width(loss_op.inputs[0].width)],
        dropouts=[0.0, 0.0, 0.0], bias=True, optimizer=program.optimizer.kind, lr=float(program.optimizer.lr),
        weight_decay=float(program.optimizer.weight_decay), epochs=int(program.epochs), heads=[1, heads, 1],
        parameter_names=names, self_loops=False, feature_normalization=program.feature_normalization,
        unsupported="; ".join(problems) or None, notes=notes,
        peer_unsupported={"dgl": "DGL's HGTConv applies no gelu before its per-type output projection and its "
                                 "typed linears have no biases; the program is PyG's HGTConv"},
        block_diagonal={w["Watt"]: heads, w["Wmsg"]: heads} if full else {})


def _rgat_model(program, problems: list) -> PeerModel:
    """The peers' R-GAT (a stack of PyG's RGATConv) for a program that computes it; `problems`:
    what already keeps the peers from rebuilding it."""
    shape, why = match_rgat(program)
    problems = _pattern_problems(problems, why, program, "an R-GAT with gnn.addSelfLoops (the peers' graphs have no "
                                                         "loop edges)")
    if shape and len(set(shape.negative_slopes)) > 1:
        problems.append(f"the attention slopes differ between layers ({shape.negative_slopes}); the peers use one")
    layers = [_width(program.inputs["features"].width)] + [_width(w) for w in (shape.widths if shape else [])]
    return _from_program(
        program, problems, conv="rgat", aggr="sum", layers=layers, dropouts=[0.0] * (len(layers) - 1), bias=True,
        activation=shape.activation if shape else "elu", heads=list(shape.heads) if shape else [],
        negative_slope=shape.negative_slopes[0] if shape else 0.2,
        parameter_names=list(shape.weights) if shape else [], self_loops=False, notes=_program_notes(program, [0.0]),
        peer_unsupported={"dgl": "DGL has no relational graph attention convolution (its GATConv has one "
                                 "weight for every edge type)"})


def _propagation_model(program, kind: str, problems: list) -> PeerModel:
    """The peers' APPNP, SGC or GCNII for a program that computes it; `problems`: what already
    keeps the peers from rebuilding it."""
    shape, why = match_propagation(program, kind)
    problems = _pattern_problems(problems, why, program, f"an {kind.upper()} with gnn.addSelfLoops (its A_hat "
                                                         f"already has the node's own row)")
    if shape is not None and _gcn_scales(program).get(shape.norm.id) != "gcn":
        problems.append("the scales around its sums are not GCN's rsqrt(in_degree + 1)")
    shapes = {p.name: p.value.shape for p in program.params}
    weights = shape.weights if shape else []
    dropouts = shape.dropouts if shape else [0.0]
    return _from_program(
        program, problems, conv=kind, aggr="sum",
        layers=[_width(program.inputs["features"].width)] + [_width(shapes[w["W"]][-1]) for w in weights],
        dropouts=dropouts, bias=bool(shape and shape.bias), activation=shape.activation if shape else "relu",
        parameter_names=list(weights), hops=shape.hops if shape else 0, teleport=shape.teleport if shape else 0.0,
        theta=shape.theta if shape else 0.0, self_loops=True, notes=_program_notes(program, dropouts))


def _edgeconv_model(program, problems: list) -> PeerModel:
    """The peers' EdgeConv and linear classifier for a program that computes them; `problems`:
    what already keeps the peers from rebuilding it."""
    shape, why = match_edgeconv(program)
    problems = _pattern_problems(problems, why, program, "an EdgeConv with gnn.addSelfLoops (the peers' graphs have "
                                                         "no loop edges)")
    shapes = {p.name: p.value.shape for p in program.params}
    widths = [shape.width, shapes[shape.weights[1]["W"]][-1]] if shape else []
    dropouts = shape.dropouts if shape else [0.0, 0.0]
    return _from_program(
        program, problems, conv="edgeconv", aggr="max",
        layers=[_width(program.inputs["features"].width)] + [_width(w) for w in widths], dropouts=dropouts,
        bias=bool(shape and shape.bias), parameter_names=shape.weights if shape else [], self_loops=False,
        notes=_program_notes(program, dropouts))


def _pattern_problems(problems: list, why: str, program, with_loops: str) -> list:
    """`problems`, then why the pattern did not match (if it did not), then `with_loops` when
    the program adds self loops, which the peers' form has no room for."""
    return problems + ([why] if why else []) + ([with_loops] if program.self_loops else [])


def _from_program(program, problems: list, **fields) -> PeerModel:
    """A PeerModel with the program's optimizer, epochs and feature normalisation, unsupported
    for `problems` and the optimizer's own, if any; `fields` give the model."""
    opt = program.optimizer
    return PeerModel(optimizer=opt.kind, lr=float(opt.lr), weight_decay=float(opt.weight_decay),
                     epochs=int(program.epochs), feature_normalization=program.feature_normalization,
                     unsupported="; ".join(problems + _optimizer_problems(program)) or None, **fields)


def _optimizer_problems(program) -> list:
    if program.optimizer.kind != "adam":
        return [f"optimizer '{program.optimizer.kind}' (the peers run torch Adam with L2 weight decay)"]
    return []


def _program_notes(program, dropouts: list) -> list:
    """What a reader of the comparison must know about the program's preprocessing and loop."""
    notes = []
    if dropouts and dropouts[0] > 0:
        notes.append(f"the program drops out its input features (p = {dropouts[0]}, as Kipf & Welling); the "
                     "peers do the same (on the stored values of sparse features, as morphgen's sparse path)")
    norm = program.feature_normalization
    if norm is not None:
        notes.append(f"the program normalises its input features ('{norm}'); the peers receive the features "
                     "already normalised by morphgen's own function, outside their timed epochs")
    if program.early_stopping is not None:
        notes.append("the program stops early on validation accuracy; every system is timed per epoch")
    return notes


def _match_layer(ops, i, problems, n, scales: dict) -> Optional[_Layer]:
    """The layer at ops[i]: its first two ops decide."""
    if i < len(ops) and ops[i].opcode == "gather":
        return _rgcn_layer(ops, i, problems, n)
    if i < len(ops) and ops[i].opcode == "aggregate":
        if i + 1 < len(ops) and ops[i + 1].opcode == "add":
            return _gin_layer(ops, i, problems, n)
        return _sage_layer(ops, i, problems, n)
    if i + 1 < len(ops) and ops[i + 1].opcode == "dot":
        return _gat_layer(ops, i, problems, n)
    return _gcn_layer(ops, i, problems, n, scales)


_ACTIVATIONS = ("relu", "elu")


def program_shape(model_path) -> PeerModel:
    """Read the .mp program at `model_path` and describe it for the peers (see the module doc)."""
    from morphgen.frontend import compile_file
    path = Path(model_path)
    if not path.is_file():
        raise BenchError(f"model: {path}: no such file")
    program = compile_file(str(path))
    program = _with_normalisation_folded(program) or program
    if program.task == "link":
        raise BenchError(f"model: {path} predicts links; morphgen bench times node classifiers against "
                         f"the peers (for link prediction: python -m morphgen.bench.link_prediction)")
    ops = list(program.forward)
    layers, dropouts, biases, found, activations = [], [], [], [], []
    problems = []
    i = 0
    features = program.inputs.get("features")
    if features is not None:
        layers.append(_width(features.width))
    attention = _relational_attention(ops)
    scales = _gcn_scales(program)
    loss = [op for op in ops if op.opcode == "cross_entropy"]
    if attention == "HGT" and features is not None and loss:
        return _hgt_model(program, loss[0])
    blocked = [p.name for p in program.params if p.blocks != 1]
    if blocked:            # only HGTConv's relation matrices are block diagonal among the peers' layers
        problems.append(f"block-diagonal typed weights ({', '.join(blocked)}): the peers' layers multiply "
                        f"by full matrices")
    if attention == "RGAT" and features is not None:
        return _rgat_model(program, problems)
    propagating = looks_propagating(program) if features is not None and not attention else None
    if propagating:
        return _propagation_model(program, propagating, problems)
    if features is not None and not attention and looks_like_edgeconv(program):
        return _edgeconv_model(program, problems)
    if attention:
        problems.append(f"relational attention ({attention}: typed weights and an edge softmax) in a program "
                        f"without node features x, which its peers read")
        i = len(ops)                      # no layer matching: its complaints would only blur the reason
    while i < len(ops) and ops[i].opcode != "cross_entropy":
        p = 0.0
        if ops[i].opcode == "dropout":
            p = float(ops[i].attrs.get("p", 0.0))
            i += 1
        layer = _match_layer(ops, i, problems, len(dropouts), scales)
        if layer is None:
            break
        i = layer.end
        found.append(layer)
        layers.append(_width(ops[i - 1].output.width))
        dropouts.append(p)
        has_bias = i < len(ops) and ops[i].opcode == "bias_add"
        biases.append(has_bias)
        if has_bias and layer.params is not None:
            layer.params["b"] = _param_name(ops[i].inputs[1], "bias", problems, len(dropouts) - 1)
        i += has_bias
        n = len(dropouts) - 1
        if i < len(ops) and ops[i].opcode in _ACTIVATIONS:
            if ops[i].opcode == "elu" and float(ops[i].attrs.get("alpha", 1.0)) != 1.0:
                problems.append(f"layer {n}: elu with alpha {ops[i].attrs['alpha']} (the peers use 1)")
            activations.append(ops[i].opcode)
            i += 1
            if i < len(ops) and ops[i].opcode == "cross_entropy":
                problems.append(f"layer {n}: the last layer has an activation; the peers apply none")
        elif i < len(ops) and ops[i].opcode != "cross_entropy":
            problems.append(f"layer {n}: activation '{ops[i].opcode}' (the peers use relu or elu)")
            break
    if not found and not attention:
        problems.append("no GCN, SAGE, GIN, GAT or R-GCN layers found")
    kinds = sorted({(layer.kind, layer.aggr) for layer in found})
    if len(kinds) > 1:
        problems.append(f"the layers differ in kind or reduction ({kinds}); the peers stack one")
    if len(set(activations)) > 1:
        problems.append(f"the activations differ between layers ({activations}); the peers use one")
    if len({layer.edge_weight for layer in found}) > 1:
        problems.append("some layers weigh their edges and some do not; the peers' layers do alike")
    if any(layer.edge_weight for layer in found) and program.self_loops:
        problems.append("a GCN weighing its edges after gnn.addSelfLoops (the peers add the loops themselves)")
    if len({(layer.attention_dropout, layer.negative_slope) for layer in found}) > 1:
        problems.append("the attention dropout or slope differs between layers; the peers use one")
    if dropouts and len(set(biases)) > 1:
        problems.append("some layers have a bias and some do not")
    if len(set(dropouts[1:])) > 1:
        problems.append(f"dropout differs between hidden layers ({dropouts[1:]}); the peers use one rate")
    conv, aggr = (found[0].kind, found[0].aggr) if found else ("gcn", "sum")
    if conv == "gat" and not program.self_loops:
        problems.append("a GAT without gnn.addSelfLoops (the peers' GATConv attends to the node itself)")
    if conv == "rgcn" and program.self_loops:
        problems.append("an R-GCN with gnn.addSelfLoops (a self relation on top of the self-loop weight; "
                        "the peers' graphs have no loop edges)")
    if conv == "rgcn" and len({layer.bases for layer in found}) > 1:
        problems.append(f"the layers differ in their basis decomposition ({[layer.bases for layer in found]}); "
                        "the peers use one")
    # weights the program declares itself (R-GCN, a GCN written out) go to the peers by their names
    named = all(layer.params is not None for layer in found)
    if not named and any(layer.params is not None for layer in found):
        problems.append("some layers are written out and some are layer directives; the peers stack one kind")
    opt = program.optimizer
    problems += _optimizer_problems(program)
    notes = _program_notes(program, dropouts)
    norm = program.feature_normalization
    return PeerModel(
        conv=conv, aggr=aggr, layers=layers, dropouts=dropouts, bias=bool(biases and biases[0]),
        optimizer=opt.kind, lr=float(opt.lr), weight_decay=float(opt.weight_decay), epochs=int(program.epochs),
        activation=activations[0] if activations else "relu", heads=[layer.heads for layer in found],
        norms=[layer.norm for layer in found] if conv == "gin" else [],
        num_bases=found[0].bases if conv == "rgcn" else None,
        parameter_names=[dict(layer.params) for layer in found] if found and named else [],
        attention_dropout=found[0].attention_dropout if found else 0.0,
        negative_slope=found[0].negative_slope if found else 0.2,
        self_loops=conv == "gcn" or (conv == "gat" and program.self_loops),
        edge_weight=bool(found and found[0].edge_weight),
        feature_normalization=norm, unsupported="; ".join(problems) or None, notes=notes)


# `dropout = p` and `attention_dropout = p` arguments (the lookbehind keeps other names out).
_DROPOUT_ARG = re.compile(r"((?<![A-Za-z0-9_])(?:attention_)?dropout\s*=\s*)([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)")


# a call `dropout(` (the lookbehind keeps longer names out)
_DROPOUT_CALL = re.compile(r"(?<![A-Za-z0-9_.])dropout\s*\(")
_NUMBER = re.compile(r"\s*[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?\s*")


def _without_dropout_calls(text: str) -> str:
    """`dropout(expr, p)` with p = 0.0: the rate is the call's last argument at its own depth."""
    out, pos = [], 0
    for m in _DROPOUT_CALL.finditer(text):
        if m.start() < pos:
            continue
        depth, comma, k = 1, None, m.end()
        while k < len(text) and depth:
            ch = text[k]
            depth += (ch == "(") - (ch == ")")
            if ch == "," and depth == 1:
                comma = k
            k += 1
        if comma is None or depth or not _NUMBER.fullmatch(text[comma + 1:k - 1]):
            continue
        out.append(text[pos:comma + 1] + " 0.0)")
        pos = k
    return "".join(out) + text[pos:]


def without_dropout(model_path, out_dir) -> Path:
    """A copy of the program with every dropout rate set to 0, in layer arguments and in
    dropout(expr, p) calls (for the parity check only)."""
    text = Path(model_path).read_text()
    out = Path(out_dir) / (Path(model_path).stem + "_nodropout.mp")
    out.write_text(_without_dropout_calls(_DROPOUT_ARG.sub(lambda m: m.group(1) + "0.0", text)))
    return out
