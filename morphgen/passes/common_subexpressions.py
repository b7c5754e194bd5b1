"""Compute each value once: common subexpression elimination over the forward.

Programs written out in the language repeat themselves: APPNP's ``v.h0 * 0.1`` is written in
each of its ten propagation steps, GCNII's ``v.h * v.norm`` in every layer, a helper function
called twice on the same property computes the same products twice.  Each copy cost a kernel
forward and another in the backward (and an accumulation of their gradients).  An op that
computes what an earlier op already computed -- same opcode, same inputs, same attributes --
is dropped and its readers read the earlier value.

Only ops whose result is a function of their inputs alone take part: never a dropout (each
call draws its own mask), a batch normalisation (it moves its running statistics) or a loss.
The inputs of ``add`` and ``mul`` are compared as a set (``a * b`` is ``b * a``).
"""
from __future__ import annotations

from ..ir import Program
from ..ir_ops import BINARY, MATH_FUNCTIONS, ROW_SOFTMAXES, UNARY
from .rewrite import require_forward_only

# Ops whose result depends on nothing but their inputs and attributes.
_PURE = frozenset(("linear", "typed_linear", "typed_param", "gather", "scatter", "aggregate", "graph_scalar",
                   "bias_add", "scale", "dot", "head_mul", "head_mean", "basis_combine", "layer_standardize",
                   "edge_softmax", "concat") + UNARY + MATH_FUNCTIONS + BINARY + ROW_SOFTMAXES)
_COMMUTATIVE = frozenset(("add", "mul"))


def eliminate_common_subexpressions(program: Program) -> int:
    """Rewrite the forward in place; returns the number of ops removed."""
    require_forward_only(program, "eliminate_common_subexpressions")
    first: dict = {}        # key -> the value that op computed first
    same_as: dict = {}      # value id -> the earlier value it duplicates
    kept = []
    for op in program.forward:
        op.inputs = [same_as.get(v.id, v) for v in op.inputs]
        key = _key(op)
        if key is not None and key in first:
            same_as[op.output.id] = first[key]
            continue
        if key is not None:
            first[key] = op.output
        kept.append(op)
    removed = len(program.forward) - len(kept)
    program.forward = kept
    program.loss = same_as.get(program.loss.id, program.loss) if program.loss is not None else None
    program.logits = same_as.get(program.logits.id, program.logits) if program.logits is not None else None
    return removed


def _key(op):
    """What identifies the op's result, or None when the op must keep its own."""
    if op.output is None or op.opcode not in _PURE:
        return None
    ids = [v.id for v in op.inputs]
    if op.opcode in _COMMUTATIVE:
        ids.sort()
    try:
        attrs = tuple(sorted((k, _hashable(v)) for k, v in op.attrs.items()))
        hash(attrs)
    except TypeError:
        return None
    # The result's kind is part of the key: two ops over the same inputs never differ in it
    # today, and a rewrite that made them differ must not merge them.
    out = op.output
    return op.opcode, tuple(ids), attrs, out.assoc, tuple(out.shape), out.dtype


def _hashable(v):
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    if isinstance(v, float):
        return ("float", v.hex())       # 0.0 and -0.0 differ; NaN equals itself
    return v
