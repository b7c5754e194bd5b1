"""Recognise the relational attention programs the peers can rebuild (dataflow_pattern.py).

HGT, PyG's HGTConv between a typed input projection and a linear classifier, as
examples/hgt.mp writes it:

    h     = relu(x * Win + bin[ntype])
    k,q,v = h * K[ntype] + bK[ntype], ...
    alpha = edge_softmax(dot(k[src] * Watt[etype], q[dst], heads=H) * mu[etype] * 1/sqrt(D))
    agg   = sum over in-edges of (v[src] * Wmsg[etype]) scaled per head by alpha
    g     = sigmoid(skip[ntype])
    out   = (g * (gelu(agg) * A[ntype] + bA[ntype]) + (1 - g) * h) * Wout + bout

R-GAT, a stack of PyG's RGATConv (additive self-attention across relations, dim 1), as
examples/bench/rgat_pyg.mp writes it; layer l with input h:

    m     = h[src] * W[etype]
    alpha = edge_softmax(leaky_relu(h[dst] * W[etype] * Q + m * K, slope))      [E, heads]
    h'    = act(sum over in-edges of m scaled per head by alpha + b)           (no act on the last)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from .dataflow_pattern import Input, OneOf, Ref, Weight, match, op


# ----------------------------------------------------------------------------- HGT
def _typed_affine(x, weight, bias):
    return op("add", op("typed_linear", x, Weight(weight)), op("typed_param", Weight(bias)))


_H = op("relu", op("add", op("linear", Input("features"), Weight("Win")), op("typed_param", Weight("bin"))), name="h")
_GATE = op("sigmoid", op("typed_param", Weight("skip")), name="gate")
_SCORE = op("scale", op("mul", op("dot", op("typed_linear", op("gather", _typed_affine(_H, "K", "bK"), end="src"),
                                             Weight("Watt")),
                                  op("gather", _typed_affine(Ref("h"), "Q", "bQ"), end="dst"), name="dot"),
                        op("typed_param", Weight("mu"))), name="scale")
_AGG = op("scatter", op("head_mul", op("typed_linear", op("gather", _typed_affine(Ref("h"), "V", "bV"), end="src"),
                                       Weight("Wmsg")),
                        op("edge_softmax", _SCORE), name="head_mul"), end="dst", reduce="sum")
_UPDATE = op("add", op("mul", _GATE, _typed_affine(op("gelu", _AGG), "A", "bA")),
             op("mul", op("shift", op("neg", Ref("gate")), c=1.0), Ref("h")))
HGT_PATTERN = op("cross_entropy", op("bias_add", op("linear", _UPDATE, Weight("Wout")), Weight("bout")),
                 Input("labels"))


@dataclass
class HGTShape:
    weights: dict          # role (Win, K, Watt, ...) -> the program's parameter name
    hidden: int            # the width of h, k, q, v
    heads: int
    full_relations: bool = False   # Watt and Wmsg full hidden x hidden matrices, not HGTConv's blocks


def match_hgt(program) -> tuple[Optional[HGTShape], str]:
    """(the HGT the program computes, "") or (None, why it is not PyG's HGTConv form)."""
    m, why = match(HGT_PATTERN, program)
    if m is None:
        return None, f"not HGTConv's form (as examples/hgt.mp writes it): {why}"
    heads = int(m.ops["dot"].attrs.get("heads", 1))
    hidden = m.values["h"].width
    if not isinstance(hidden, int) or hidden % heads:
        return None, f"the hidden width {hidden} is not a constant multiple of the {heads} heads"
    scale = float(m.ops["scale"].attrs["c"])
    if not math.isclose(scale, 1 / math.sqrt(hidden // heads), rel_tol=1e-5):
        return None, (f"the attention scores are scaled by {scale:g}; HGTConv scales them by "
                      f"1/sqrt({hidden // heads}) = {1 / math.sqrt(hidden // heads):.7f}")
    if int(m.ops["head_mul"].attrs.get("heads", 1)) != heads:
        return None, "the messages and the scores have different head counts"
    shapes = {prm.name: prm.value.shape for prm in program.params}
    blocks = {prm.name: prm.blocks for prm in program.params}
    for role in ("K", "Q", "V", "A"):
        name = m.weights[role]
        if tuple(shapes[name][-2:]) != (hidden, hidden) or blocks[name] != 1:
            return None, (f"{name} is not a full {hidden} x {hidden} matrix per type, as HGTConv's are")
    full = []
    for role in ("Watt", "Wmsg"):        # HGTConv's form: one hidden/heads square block per head
        name = m.weights[role]
        per_head = blocks[name] == heads and tuple(shapes[name][-2:]) == (hidden, hidden // heads)
        if not per_head and not (blocks[name] == 1 and tuple(shapes[name][-2:]) == (hidden, hidden)):
            return None, (f"{name} is neither {heads} diagonal blocks of {hidden // heads} x {hidden // heads} "
                          f"per edge type (HGTConv's relation matrices) nor a full {hidden} x {hidden} matrix")
        full.append(not per_head)
    if full[0] != full[1]:
        return None, "one relation weight is block diagonal and the other full"
    return HGTShape(m.weights, hidden, heads, full_relations=full[0]), ""


# ----------------------------------------------------------------------------- R-GAT
MAX_RGAT_LAYERS = 4
RGAT_ACTIVATIONS = ("elu", "relu")


def _rgat_layer(n: int, h_src, h_dst):
    """Layer n of an RGATConv stack, before its activation; its input is read at the edges'
    sources through `h_src` and at their destinations through `h_dst` (the same value)."""
    m = op("typed_linear", op("gather", h_src, end="src"), Weight(f"W{n}"), name=f"m{n}")
    dst = op("typed_linear", op("gather", h_dst, end="dst"), Weight(f"W{n}"))
    score = op("leaky_relu", op("add", op("linear", dst, Weight(f"Q{n}")), op("linear", Ref(f"m{n}"), Weight(f"K{n}"))),
               name=f"score{n}")
    agg = op("scatter", op("head_mul", m, op("edge_softmax", score), name=f"heads{n}"), end="dst", reduce="sum")
    return op("bias_add", agg, Weight(f"b{n}"))


def _rgat_stack(layers: int):
    """The loss of `layers` RGATConv layers with an activation between them."""
    h_src = h_dst = Input("features")
    for n in range(layers):
        out = _rgat_layer(n, h_src, h_dst)
        if n < layers - 1:
            h_src = OneOf(tuple(op(act, out, name=f"in{n + 1}") for act in RGAT_ACTIVATIONS))
            h_dst = Ref(f"in{n + 1}")
    return op("cross_entropy", out, Input("labels"))


@dataclass
class RGATShape:
    weights: list          # per layer: {"W", "Q", "K", "b"} -> the program's parameter name
    widths: list           # every layer's output width (all heads)
    heads: list
    negative_slopes: list
    activation: str


def match_rgat(program) -> tuple[Optional[RGATShape], str]:
    """(the RGATConv stack the program computes, "") or (None, why it is not PyG's RGATConv form)."""
    layers = sum(o.opcode == "edge_softmax" for o in program.forward)     # one softmax per layer
    if not 1 <= layers <= MAX_RGAT_LAYERS:
        return None, f"{layers} attention layers (the peers' stacks have 1 to {MAX_RGAT_LAYERS})"
    m, why = match(_rgat_stack(layers), program)
    if m is None:
        return None, f"not a stack of RGATConv layers (as examples/bench/rgat_pyg.mp writes it): {why}"
    heads = [int(m.ops[f"heads{n}"].attrs.get("heads", 1)) for n in range(layers)]
    widths = [m.values[f"m{n}"].width for n in range(layers)]
    acts = {m.ops[f"in{n}"].opcode for n in range(1, layers)}
    if len(acts) > 1:
        return None, f"the activations differ between layers ({sorted(acts)}); the peers use one"
    if any(m.ops[f"in{n}"].opcode == "elu" and float(m.ops[f"in{n}"].attrs.get("alpha", 1.0)) != 1.0
           for n in range(1, layers)):
        return None, "elu with an alpha other than 1 (the peers use 1)"
    for n in range(layers):
        scores = m.values[f"score{n}"].width
        if scores != heads[n]:
            return None, f"layer {n}: {scores} attention scores per edge for {heads[n]} heads (RGATConv: one per head)"
    weights = [{k: m.weights[f"{k}{n}"] for k in ("W", "Q", "K", "b")} for n in range(layers)]
    slopes = [float(m.ops[f"score{n}"].attrs.get("alpha", 0.01)) for n in range(layers)]
    return RGATShape(weights, widths, heads, slopes, acts.pop() if acts else "elu"), ""
