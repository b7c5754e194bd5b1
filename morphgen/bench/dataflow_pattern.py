"""Match a program's forward IR against a dataflow pattern (for the peers of wide layers).

The layer-by-layer matcher of program_shape reads GCN-like stacks op by op. Relational attention
layers read their values several times (HGT's input projection feeds K, Q, V and the skip gate;
R-GAT's messages feed the scores and the sum), so they are matched as dataflow patterns instead:
starting from the loss, every op's inputs are unified with the pattern's, in any program order,
commutative operands either way round, and a value named twice must be the same value both times.
What the match binds is the program's name for each of the peer's parameters
(attention_shape.py holds the patterns).
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


@dataclass(frozen=True)
class OneOf:
    """The first of `choices` that matches."""
    choices: tuple


_COMMUTATIVE = {"add", "mul"}


def op(opcode, *inputs, name=None, **attrs) -> P:
    """P(opcode, inputs, attrs, name) with the attributes as keywords."""
    return P(opcode, tuple(inputs), tuple(sorted(attrs.items())), name)


@dataclass
class Match:
    """What a match bound: values and ops by pattern name, the program's weight names by role."""
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

    def unify(self, pattern, value, m: Match, depth: int) -> Optional[Match]:
        if isinstance(pattern, Ref):
            bound = m.values.get(pattern.name)
            if bound is None:              # read before the pattern that computes it was reached
                return Match({**m.values, pattern.name: value}, m.weights, m.ops)
            if bound is value:
                return m
            self.fail(depth, f"{value.describe()} is not the '{pattern.name}' value read elsewhere")
            return None
        if isinstance(pattern, Input):
            if self.inputs.get(id(value)) == pattern.kind:
                return m
            self.fail(depth, f"expected the {pattern.kind} input, found {value.describe()}")
            return None
        if isinstance(pattern, OneOf):
            for choice in pattern.choices:
                got = self.unify(choice, value, m, depth)
                if got is not None:
                    return got
            return None
        if isinstance(pattern, Weight):
            param = self.param_of.get(id(value))
            if param is None:
                self.fail(depth, f"expected a trainable weight ({pattern.role}), found {value.describe()}")
                return None
            if m.weights.get(pattern.role, param.name) != param.name:
                self.fail(depth, f"{pattern.role}: two different weights ({m.weights[pattern.role]}, {param.name})")
                return None
            return Match(dict(m.values), {**m.weights, pattern.role: param.name}, dict(m.ops))
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
                    got = Match({**got.values, pattern.name: value}, got.weights, {**got.ops, pattern.name: op})
                return got
        return None


def match(pattern, program) -> tuple[Optional[Match], str]:
    """(the bindings of `pattern` rooted at the program's loss, "") or (None, what failed at the
    deepest point the match reached)."""
    loss = [o for o in program.forward if o.opcode in ("cross_entropy", "link_loss")]
    if len(loss) != 1:
        return None, "no single loss"
    unifier = _Unifier(program)
    m = unifier.unify(pattern, loss[0].output, Match(), 0)
    return (m, "") if m is not None else (None, unifier.farthest[1])
