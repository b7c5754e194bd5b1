"""Recognise a heterogeneous graph transformer (HGT) program, for the peers' HGTConv.

The layer-by-layer matcher of program_shape reads GCN-like stacks op by op. HGT is one wide
layer whose values are read several times (the input projection feeds K, Q, V and the skip
gate), so it is matched as a dataflow pattern instead: starting from the loss, every op's inputs
are unified with the pattern's, in any program order, commutative operands either way round, and
a value named twice must be the same value both times. What the match binds is the program's
name for each HGTConv parameter.

The pattern is PyG's HGTConv between a typed input projection and a linear classifier, as
examples/hgt.mp writes it:

    h     = relu(x * Win + bin[ntype])
    k,q,v = h * K[ntype] + bK[ntype], ...
    alpha = edge_softmax(dot(k[src] * Watt[etype], q[dst], heads=H) * mu[etype] * 1/sqrt(D))
    agg   = sum over in-edges of (v[src] * Wmsg[etype]) scaled per head by alpha
    g     = sigmoid(skip[ntype])
    out   = (g * (gelu(agg) * A[ntype] + bA[ntype]) + (1 - g) * h) * Wout + bout
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional


@dataclass(frozen=True)
class P:
    """An op with this opcode whose inputs match `inputs`; `attrs` must hold (a float attr within
    1e-6 relative); `name` binds the op's value (a later Ref(name) must be the same value)."""
    opcode: str
    inputs: tuple
    attrs: tuple = ()
    name: Optional[str] = None


@dataclass(frozen=True)
class Weight:
    """A trainable parameter; binds its program name to `role`."""
    role: str


@dataclass(frozen=True)
class Ref:
    """The same value as every other Ref(name) and the P named `name`, whichever is met first."""
    name: str


@dataclass(frozen=True)
class Input:
    """A program input: "features" or "labels"."""
    kind: str


_COMMUTATIVE = {"add", "mul"}


def _p(opcode, *inputs, name=None, **attrs):
    return P(opcode, tuple(inputs), tuple(sorted(attrs.items())), name)


def _typed_affine(x, weight, bias):
    return _p("add", _p("typed_linear", x, Weight(weight)), _p("typed_param", Weight(bias)))


_H = _p("relu", _p("add", _p("linear", Input("features"), Weight("Win")), _p("typed_param", Weight("bin"))), name="h")
_GATE = _p("sigmoid", _p("typed_param", Weight("skip")), name="gate")
_SCORE = _p("scale", _p("mul", _p("dot", _p("typed_linear", _p("gather", _typed_affine(_H, "K", "bK"), end="src"),
                                             Weight("Watt")),
                                  _p("gather", _typed_affine(Ref("h"), "Q", "bQ"), end="dst"), name="dot"),
                        _p("typed_param", Weight("mu"))), name="scale")
_AGG = _p("scatter", _p("head_mul", _p("typed_linear", _p("gather", _typed_affine(Ref("h"), "V", "bV"), end="src"),
                                       Weight("Wmsg")),
                        _p("edge_softmax", _SCORE), name="head_mul"), end="dst", reduce="sum")
_UPDATE = _p("add", _p("mul", _GATE, _typed_affine(_p("gelu", _AGG), "A", "bA")),
             _p("mul", _p("shift", _p("neg", Ref("gate")), c=1.0), Ref("h")))
HGT_PATTERN = _p("cross_entropy", _p("bias_add", _p("linear", _UPDATE, Weight("Wout")), Weight("bout")),
                 Input("labels"))


@dataclass
class _Match:
    values: dict = field(default_factory=dict)     # pattern name -> IR value
    weights: dict = field(default_factory=dict)    # role -> program parameter name
    ops: dict = field(default_factory=dict)        # pattern name -> IR op


class _Unifier:
    def __init__(self, program):
        self.producer = {id(op.output): op for op in program.forward}
        self.param_of = {id(p.value): p for p in program.params if p.trainable}
        self.inputs = {id(v): kind for kind, v in program.inputs.items()}
        self.farthest = (-1, "")                   # (depth, what failed there): the error to report

    def fail(self, depth: int, why: str) -> None:
        if depth > self.farthest[0]:      # the first failure at the deepest point: the likeliest culprit
            self.farthest = (depth, why)

    def unify(self, pattern, value, m: _Match, depth: int) -> Optional[_Match]:
        if isinstance(pattern, Ref):
            bound = m.values.get(pattern.name)
            if bound is None:              # read before the pattern that computes it was reached
                return _Match({**m.values, pattern.name: value}, m.weights, m.ops)
            if bound is value:
                return m
            self.fail(depth, f"{value.describe()} is not the '{pattern.name}' value read elsewhere")
            return None
        if isinstance(pattern, Input):
            if self.inputs.get(id(value)) == pattern.kind:
                return m
            self.fail(depth, f"expected the {pattern.kind} input, found {value.describe()}")
            return None
        if isinstance(pattern, Weight):
            param = self.param_of.get(id(value))
            if param is None:
                self.fail(depth, f"expected a trainable weight ({pattern.role}), found {value.describe()}")
                return None
            if m.weights.get(pattern.role, param.name) != param.name:
                self.fail(depth, f"{pattern.role}: two different weights ({m.weights[pattern.role]}, {param.name})")
                return None
            return _Match(dict(m.values), {**m.weights, pattern.role: param.name}, dict(m.ops))
        op = self.producer.get(id(value))
        if op is None or op.opcode != pattern.opcode:
            found = op.opcode if op is not None else value.describe()
            self.fail(depth, f"expected {pattern.opcode}, found {found}")
            return None
        for key, want in pattern.attrs:
            have = op.attrs.get(key)
            same = (math.isclose(float(have), want, rel_tol=1e-6) if isinstance(want, float)
                    and isinstance(have, (int, float)) else have == want)
            if not same:
                self.fail(depth, f"{op.opcode}: {key} = {have!r}, expected {want!r}")
                return None
        orders = [pattern.inputs]
        if op.opcode in _COMMUTATIVE:
            orders.append(pattern.inputs[::-1])
        for order in orders:
            if len(order) != len(op.inputs):
                continue
            got = m
            for sub, v in zip(order, op.inputs):
                got = self.unify(sub, v, got, depth + 1)
                if got is None:
                    break
            if got is not None:
                if pattern.name:
                    if got.values.get(pattern.name, value) is not value:
                        self.fail(depth, f"'{pattern.name}' is computed twice")
                        continue
                    got = _Match({**got.values, pattern.name: value}, got.weights, {**got.ops, pattern.name: op})
                return got
        return None


@dataclass
class HGTShape:
    weights: dict          # role (Win, K, Watt, ...) -> the program's parameter name
    hidden: int            # the width of h, k, q, v
    heads: int


def match_hgt(program) -> tuple[Optional[HGTShape], str]:
    """(the HGT the program computes, "") or (None, why it is not PyG's HGTConv form)."""
    loss = [op for op in program.forward if op.opcode == "cross_entropy"]
    if len(loss) != 1:
        return None, "no single cross-entropy loss"
    unifier = _Unifier(program)
    m = unifier.unify(HGT_PATTERN, loss[0].output, _Match(), 0)
    if m is None:
        return None, f"not HGTConv's form (as examples/hgt.mp writes it): {unifier.farthest[1]}"
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
    return HGTShape(m.weights, hidden, heads), ""
