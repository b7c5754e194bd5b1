"""Recognise the propagating programs the peers can rebuild (dataflow_pattern.py).

All three propagate with GCN's normalisation written out, A_hat = D^-1/2 (A + I) D^-1/2, which the
compiler's passes fold into one aggregation per step (aggregate with norm node_scale, the scale
rsqrt(in_degree + 1), and the node's own row):

APPNP (PyG's APPNP, DGL's APPNPConv), as examples/appnp.mp writes it: an MLP, then K steps

    h0    = MLP(x)          linear layers, [dropout] before each, [bias], relu | elu between
    h     = h0
    K x:  h = A_hat h * (1 - alpha) + h0 * alpha

SGC (SGConv in both), as examples/sgc.mp writes it: K propagations of the features, one linear

    out   = (A_hat^K x) * W [+ b]

GCNII (GCN2Conv in both, PyG's GCNII example), as examples/gcnii.mp writes it: L layers between
a linear layer and a linear classifier, layer l with beta_l = log(theta / l + 1)

    h0    = act([dropout] x * W0 [+ b0]);  h = h0
    L x:  p = A_hat [dropout] h * (1 - alpha) + h0 * alpha
          h = act(p * (1 - beta_l) + p * W_l * beta_l)
    out   = [dropout] h * W [+ b]
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from .dataflow_pattern import Input, OneOf, Ref, Weight, match, op

MAX_MLP_LAYERS = 3
MLP_ACTIVATIONS = ("relu", "elu")
# The patterns nest one level per op; more steps than this would run into Python's recursion limit.
MAX_STEPS = 64


def _propagate(h, k: int):
    """One aggregation of `h` with A_hat: the scale (bound as "norm") at both ends, a self loop."""
    return op("aggregate", h, Ref("norm"), direction="in", norm="node_scale", reduce="sum", self_loops=True,
              name=f"agg{k}")


def _mlp(layers: int, bias: bool):
    """The MLP's output, named "h0": linear layers with an optional dropout before each."""
    h = Input("features")
    for n in range(layers):
        last = n == layers - 1
        inp = OneOf((h, op("dropout", h, name=f"drop{n}")))   # without first: its failure is the one to report
        out = op("linear", inp, Weight(f"W{n}"), name="h0" if last and not bias else None)
        if bias:
            out = op("bias_add", out, Weight(f"b{n}"), name="h0" if last else None)
        if not last:
            h = _acts(out, f"act{n}")
    return out


def _acts(x, name: str):
    """`x` through one of MLP_ACTIVATIONS, the op bound as `name`."""
    return OneOf(tuple(op(act, x, name=name) for act in MLP_ACTIVATIONS))


def _appnp(layers: int, bias: bool, hops: int):
    h = _mlp(layers, bias)
    for k in range(hops):
        h = op("add", op("scale", _propagate(h, k), name=f"keep{k}"), op("scale", Ref("h0"), name=f"teleport{k}"))
    return op("cross_entropy", h, Input("labels"))


def _gcnii(bias: bool, layers: int):
    """The linear layers are W0/b0 and W{layers + 1}/b{layers + 1}, the GCN2Conv layers W1..W{layers}."""
    def affine(x, n):
        out = op("linear", OneOf((x, op("dropout", x, name=f"drop{n}"))), Weight(f"W{n}"))
        return op("bias_add", out, Weight(f"b{n}")) if bias else out
    h = _acts(affine(Input("features"), 0), "h0")
    for n in range(1, layers + 1):
        inp = OneOf((h, op("dropout", h, name=f"drop{n}")))
        p = op("add", op("scale", _propagate(inp, n - 1), name=f"keep{n - 1}"),
               op("scale", Ref("h0"), name=f"teleport{n - 1}"), name=f"p{n}")
        mix = op("add", op("scale", p, name=f"identity{n}"),
                 op("scale", op("linear", Ref(f"p{n}"), Weight(f"W{n}")), name=f"beta{n}"))
        h = _acts(mix, f"act{n}")
    return op("cross_entropy", affine(h, layers + 1), Input("labels"))


def _sgc(bias: bool, hops: int):
    h = Input("features")
    for k in range(hops):
        h = _propagate(h, k)
    out = op("linear", OneOf((h, op("dropout", h, name="drop0"))), Weight("W0"))   # a dropout is refused later
    return op("cross_entropy", op("bias_add", out, Weight("b0")) if bias else out, Input("labels"))


@dataclass
class PropagationShape:
    kind: str              # "appnp" | "sgc" | "gcnii"
    hops: int
    weights: list          # per linear layer: {"W", ["b"]} -> the program's parameter name
    dropouts: list         # the dropout before each linear layer
    bias: bool
    activation: str = "relu"
    teleport: float = 0.0  # appnp, gcnii: alpha
    theta: float = 0.0     # gcnii: beta_l = log(theta / l + 1)
    norm: object = None    # the value scaling both ends of every step (GCN's rsqrt(d + 1) if an APPNP/SGC)


def looks_propagating(program) -> Optional[str]:
    """"appnp", "gcnii" or "sgc" when the program is shaped like one (then a failed match is the
    reason to report), None otherwise. APPNP ends in a sum with a scaled term, GCNII multiplies
    such sums by its layers' weights, SGC aggregates its raw input."""
    ops = program.forward
    producer = {id(o.output): o for o in ops}

    def scaled_sum(value) -> bool:
        made = producer.get(id(value))
        return made is not None and made.opcode == "add" and any(
            getattr(producer.get(id(v)), "opcode", None) == "scale" for v in made.inputs)
    loss = [o for o in ops if o.opcode == "cross_entropy"]
    if len(loss) == 1 and scaled_sum(loss[0].inputs[0]):
        return "appnp"
    if any(o.opcode == "aggregate" for o in ops) and any(o.opcode == "linear" and scaled_sum(o.inputs[0]) for o in ops):
        return "gcnii"
    features = program.inputs.get("features")
    if features is not None and any(o.opcode == "aggregate" and o.inputs[0] is features for o in ops) and (
            sum(o.opcode == "linear" for o in ops) == 1):
        return "sgc"
    return None


def match_propagation(program, kind: str) -> tuple[Optional[PropagationShape], str]:
    """(the APPNP, SGC or GCNII the program computes, "") or (None, why it is not the peers' form)."""
    hops = sum(o.opcode == "aggregate" for o in program.forward)        # one aggregation per step
    if hops == 0:
        return None, f"no propagation steps (an {kind.upper()} aggregates with D^-1/2 (A + I) D^-1/2)"
    if hops > MAX_STEPS:
        return None, f"{hops} propagation steps (the peers' forms are matched up to {MAX_STEPS})"
    if kind == "appnp":
        patterns = [(_appnp(n, bias, hops), n, bias) for n in range(1, MAX_MLP_LAYERS + 1) for bias in (True, False)]
    elif kind == "gcnii":
        patterns = [(_gcnii(bias, hops), hops + 2, bias) for bias in (True, False)]
    else:
        patterns = [(_sgc(bias, hops), 1, bias) for bias in (True, False)]
    why = ""
    for pattern, layers, bias in patterns:
        m, why_here = match(pattern, program)
        if m is not None:
            return _gcnii_shape(m, bias, hops) if kind == "gcnii" else _shape(kind, m, layers, bias, hops)
        why = why or why_here
    return None, f"not {kind.upper()}'s form (as examples/{kind}.mp writes it): {why}"


def _layers(m, count: int) -> tuple[list, list]:
    """Per linear layer n < count: its weights {"W", ["b"]} by program name, and the dropout
    rate before it (0 without)."""
    weights = [{k: m.weights[f"{k}{n}"] for k in ("W", "b") if f"{k}{n}" in m.weights} for n in range(count)]
    dropouts = [float(m.ops[f"drop{n}"].attrs.get("p", 0.0)) if f"drop{n}" in m.ops else 0.0 for n in range(count)]
    return weights, dropouts


def _activation(m, names: list) -> tuple[Optional[str], str]:
    """(the one activation the ops bound as `names` apply, "") or (None, why the peers cannot)."""
    acts = [m.ops[name] for name in names]
    if len({a.opcode for a in acts}) > 1:
        return None, f"the activations differ between layers ({sorted({a.opcode for a in acts})}); the peers use one"
    if any(a.opcode == "elu" and float(a.attrs.get("alpha", 1.0)) != 1.0 for a in acts):
        return None, "elu with an alpha other than 1 (the peers use 1)"
    return (acts[0].opcode if acts else "relu"), ""


def _shape(kind: str, m, layers: int, bias: bool, hops: int) -> tuple[Optional[PropagationShape], str]:
    weights, dropouts = _layers(m, layers)
    activation, why = _activation(m, [f"act{n}" for n in range(layers - 1)])
    if why:
        return None, why
    if len(set(dropouts[1:])) > 1:
        return None, f"dropout differs between the MLP's hidden layers ({dropouts[1:]}); the peers use one rate"
    if kind == "sgc" and dropouts[0] > 0:
        return None, "an SGC with dropout on its propagated features (SGConv has none)"
    teleport = 0.0
    if kind == "appnp":
        teleport, why = _teleport(m, hops)
        if why:
            return None, why
    return PropagationShape(kind, hops, weights, dropouts, bias, activation, teleport, norm=m.values["norm"]), ""


def _teleport(m, hops: int) -> tuple[float, str]:
    """(alpha, "") when every step keeps 1 - alpha of the propagated rows and mixes in alpha of
    h0, or (0, why not)."""
    keep = {float(m.ops[f"keep{k}"].attrs["c"]) for k in range(hops)}
    tele = {float(m.ops[f"teleport{k}"].attrs["c"]) for k in range(hops)}
    if len(keep) > 1 or len(tele) > 1:
        return 0.0, f"the steps mix in different shares (propagated {sorted(keep)}, teleport {sorted(tele)})"
    teleport = tele.pop()
    if not 0.0 < teleport < 1.0 or not math.isclose(keep.pop(), 1.0 - teleport, rel_tol=1e-6, abs_tol=1e-7):
        return 0.0, f"the propagated share is not 1 - alpha for the teleport alpha {teleport}"
    return teleport, ""


def _gcnii_shape(m, bias: bool, layers: int) -> tuple[Optional[PropagationShape], str]:
    weights, dropouts = _layers(m, layers + 2)
    activation, why = _activation(m, ["h0"] + [f"act{n}" for n in range(1, layers + 1)])
    if why:
        return None, why
    if len(set(dropouts[1:])) > 1:
        return None, (f"the dropouts before the GCN2Conv layers and the classifier differ ({dropouts[1:]}); "
                      "the peers use one rate")
    teleport, why = _teleport(m, layers)
    if why:
        return None, why
    betas = [float(m.ops[f"beta{n}"].attrs["c"]) for n in range(1, layers + 1)]
    for n, beta in enumerate(betas, start=1):
        if not math.isclose(float(m.ops[f"identity{n}"].attrs["c"]), 1.0 - beta, rel_tol=1e-6, abs_tol=1e-7):
            return None, f"layer {n}: the identity's share is not 1 - beta for beta {beta}"
    thetas = [n * math.expm1(beta) for n, beta in enumerate(betas, start=1)]
    if not all(math.isclose(t, thetas[0], rel_tol=1e-4) for t in thetas):
        return None, (f"the betas {betas} are not log(theta / l + 1) for one theta (GCN2Conv's): "
                      f"theta per layer {[round(t, 6) for t in thetas]}")
    return PropagationShape("gcnii", layers, weights, dropouts, bias, activation, teleport,
                            theta=round(thetas[0], 6), norm=m.values["norm"]), ""
