"""Recognise an EdgeConv the peers can rebuild (dataflow_pattern.py).

EdgeConv (Wang et al., DGCNN; PyG's and DGL's EdgeConv) max-pools an MLP of each in-edge's
target row and its difference to the source's, then a linear classifier, as
examples/edgeconv.mp writes it:

    x'    = [dropout] x
    h_v   = max over u -> v of relu((x'_u - x'_v) * Wd + x'_v * Wi [+ b])
    out   = [dropout] h * Wout [+ bout]

PyG's EdgeConv applies one Linear to [x_v, x_u - x_v]: its weight is Wi stacked on Wd.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .dataflow_pattern import Input, OneOf, Ref, Weight, match, op


def _edgeconv(bias: bool):
    x = OneOf((Input("features"), op("dropout", Input("features"), name="drop0")))
    diff = op("sub", op("gather", x, end="src"), op("gather", x, end="dst", name="x_dst"))
    message = op("add", op("linear", diff, Weight("Wd")), op("linear", Ref("x_dst"), Weight("Wi")))
    if bias:
        message = op("bias_add", message, Weight("b"))
    h = op("scatter", op("relu", message), end="dst", reduce="max", name="h")
    out = op("linear", OneOf((h, op("dropout", h, name="drop1"))), Weight("Wout"))
    if bias:
        out = op("bias_add", out, Weight("bout"))
    return op("cross_entropy", out, Input("labels"))


@dataclass
class EdgeConvShape:
    weights: list          # per layer: peer name -> the program's name, or its names to stack ("W": (Wi, Wd))
    width: int             # the message MLP's output width
    dropouts: list         # on the input features, before the classifier
    bias: bool


def match_edgeconv(program) -> tuple[Optional[EdgeConvShape], str]:
    """(the EdgeConv the program computes, "") or (None, why it is not the peers' form)."""
    why = ""
    for bias in (True, False):
        m, why_here = match(_edgeconv(bias), program)
        if m is not None:
            w = m.weights
            weights = [{"W": (w["Wi"], w["Wd"]), **({"b": w["b"]} if bias else {})},
                       {"W": w["Wout"], **({"b": w["bout"]} if bias else {})}]
            dropouts = [float(m.ops[f"drop{n}"].attrs.get("p", 0.0)) if f"drop{n}" in m.ops else 0.0
                        for n in range(2)]
            return EdgeConvShape(weights, m.values["h"].width, dropouts, bias), ""
        why = why or why_here
    return None, f"not EdgeConv's form (as examples/edgeconv.mp writes it): {why}"


def looks_like_edgeconv(program) -> bool:
    """A max over the in-edges of rows computed per edge from a difference of gathered rows."""
    return any(o.opcode == "scatter" and o.attrs.get("reduce") == "max" for o in program.forward) and any(
        o.opcode == "sub" for o in program.forward)
