"""Compute per node what a message computes from one end's rows alone (``sink_gathers``).

A message written from its source's properties -- ``u.h * u.norm`` inside ``Sum(u in
g.neighbors(v): ...)``, ``relu(e.src.z * W + b)`` -- lowers to gathers of each property to the
edges and the arithmetic on E rows.  Every edge leaving a node computes the same numbers, so the
arithmetic moves to the N node rows and one gather carries the result:

    op(gather(a, end), gather(b, end), [weights])  ->  gather(op(a, b, [weights]), end)

for the ops that compute each row from the same row of their operands (elementwise, ``linear``,
``bias_add``, ``concat``, ``dot``, the head ops, the row softmaxes and layer norm) whose row
operands are all gathered from the same end.  The same numbers; E / N times less arithmetic, and
the result is the form the other passes know: ``scatter(gather(y, src))`` folds into an
aggregation of ``y``, and the node scale of a normalisation written inside the message
(``u.h * u.norm``) is then a row scale that ``fold_self_terms`` and ``fold_node_scales`` fold
like ``gcn_weighted.mp``'s.

A product of a sum or difference of gathered rows distributes over it when that adds no product
per node (EdgeConv's ``(e.src.x - e.dst.x) * W``, the same rows at both ends: one product of the
node rows, two gathers of its narrower result, instead of a product of E wide edge rows):

    linear(sub(gather(x, src), gather(y, dst)), W)  ->  sub(gather(x W, src), gather(y W, dst))

Not for rows of the featureless identity (an N x N product would replace a row lookup), nor on
a graph with fewer edges than nodes (when the sizes are known), where the edge rows are fewer.
"""
from __future__ import annotations

from ..ir import Program
from ..ir_ops import BINARY, MATH_FUNCTIONS, ROW_SOFTMAXES, UNARY
from .rewrite import (concrete, forward_uses, identity_derived, new_op, producers, remove_dead_forward,
                      require_forward_only)

# Ops that compute each output row from the same row of their row operands (and weights): on
# gathered rows they give the gathered result.  Not typed ops (their weight depends on the edge's
# type), nor a dropout (its mask on the edge rows), a batch norm (statistics over the rows) or an
# edge softmax.
_ROW_WISE = frozenset(("scale", "linear", "bias_add", "concat", "dot", "head_mul", "head_mean", "layer_standardize")
                      + UNARY + MATH_FUNCTIONS + BINARY + ROW_SOFTMAXES)


def sink_gathers(program: Program, num_nodes: int = None, num_edges: int = None) -> int:
    """Rewrite the forward in place; returns the number of ops moved to the nodes."""
    require_forward_only(program, "sink_gathers")
    if num_nodes is not None and num_edges is not None and num_edges < num_nodes:
        return 0
    prod, uses = producers(program), forward_uses(program)
    forward, count = [], 0

    def sink(op, operands, end, output=None):
        inner = new_op(program, op.opcode, operands, op.attrs, op.loc)
        gather = new_op(program, "gather", [inner.output], {"end": end}, op.loc, output=output)
        forward.extend((inner, gather))
        prod[inner.output.id], prod[gather.output.id] = inner, gather
        return gather.output

    for op in program.forward:
        sunk = _node_operands(program, op, prod)
        if sunk is not None:
            sink(op, *sunk, output=op.output)
            count += 1
            continue
        parts = _distributable(program, op, prod, uses)
        if parts is None:
            forward.append(op)
            continue
        combine, p, q = parts        # linear(p -/+ q, W) = linear(p, W) -/+ linear(q, W), each sunk
        w = op.inputs[1]
        rows = [sink(op, [prod[v.id].inputs[0], w], prod[v.id].attrs["end"]) for v in (p, q)]
        forward.append(new_op(program, combine.opcode, rows, combine.attrs, combine.loc, output=op.output))
        count += 2
    program.forward = forward
    remove_dead_forward(program)
    return count


def _distributable(program: Program, op, prod: dict, uses: dict):
    """``(combine, p, q)`` when ``op`` is ``linear(add|sub(p, q), W)`` of two gathered node rows
    of one width, the sum or difference read by nothing else, and the product is computed no more
    often per node than before: the same rows at both ends (EdgeConv's ``(e.src.x - e.dst.x) W``:
    one node product) or a product that narrows them (K >= M, each of two node products cheaper
    than the edge product on a graph of average degree 2 or more); else None."""
    if op.opcode != "linear" or op.output.assoc != "edge":
        return None
    combine = prod.get(op.inputs[0].id)
    if combine is None or combine.opcode not in ("add", "sub") or uses.get(combine.output.id, 0) != 1:
        return None
    p, q = combine.inputs
    gathers = [prod.get(v.id) for v in (p, q)]
    if p.shape != q.shape or any(g is None or g.opcode != "gather" for g in gathers):
        return None
    if any(identity_derived(program, g.inputs[0], prod) for g in gathers):
        return None
    k, m = concrete(op.inputs[1].shape[0]), concrete(op.inputs[1].shape[1])
    same_rows = gathers[0].inputs[0] is gathers[1].inputs[0]
    if not same_rows and (k is None or m is None or k < m):
        return None
    return combine, p, q


def _node_operands(program: Program, op, prod: dict):
    """``(node operands, end)`` when every row operand of the row-wise edge op ``op`` is a
    gather of node rows from one end; else None."""
    if op.opcode not in _ROW_WISE or op.output is None or op.output.assoc != "edge":
        return None
    operands, ends = [], set()
    for v in op.inputs:
        if v.assoc in ("param", "scalar"):
            operands.append(v)
            continue
        gather = prod.get(v.id)
        if gather is None or gather.opcode != "gather" or identity_derived(program, gather.inputs[0], prod):
            return None
        operands.append(gather.inputs[0])
        ends.add(gather.attrs["end"])
    if len(ends) != 1:
        return None
    return operands, ends.pop()
