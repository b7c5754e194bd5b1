"""Compute per node what a message computes from one end's rows alone (``sink_gathers``).

A message written from its source's properties -- ``u.h * u.norm`` inside ``Sum(u in
g.neighbors(v): ...)``, ``relu(e.src.z + b)`` -- lowers to gathers of each property to the edges
and the arithmetic on E rows.  Every edge leaving a node computes the same numbers, so the
arithmetic moves to the N node rows and one gather carries the result:

    op(gather(a, end), gather(b, end), [weights])  ->  gather(op(a, b, [weights]), end)

for the elementwise ops (unary, math, ``scale``, ``add|sub|mul|div``) whose operands are all
gathered from the same end (a weight or a scalar operand broadcasts alike on either side).  The
same numbers, bit for bit; E / N times less arithmetic, and the result is the form the other
passes know: ``scatter(gather(y, src))`` folds into an aggregation of ``y``, and the node scale
of a normalisation written inside the message (``u.h * u.norm``) is then a row scale that
``fold_self_terms`` and ``fold_node_scales`` fold like ``gcn_weighted.mp``'s.

Not for rows of the featureless identity (an N x N product would replace a row lookup), nor on
a graph with fewer edges than nodes (when the sizes are known), where the edge rows are fewer.
"""
from __future__ import annotations

from ..ir import Program
from ..ir_ops import BINARY, MATH_FUNCTIONS, UNARY
from .rewrite import identity_derived, new_op, producers, remove_dead_forward, require_forward_only

_ELEMENTWISE = frozenset(("scale",) + UNARY + MATH_FUNCTIONS + BINARY)


def sink_gathers(program: Program, num_nodes: int = None, num_edges: int = None) -> int:
    """Rewrite the forward in place; returns the number of ops moved to the nodes."""
    require_forward_only(program, "sink_gathers")
    if num_nodes is not None and num_edges is not None and num_edges < num_nodes:
        return 0
    prod = producers(program)
    forward, count = [], 0
    for op in program.forward:
        sunk = _node_operands(program, op, prod)
        if sunk is None:
            forward.append(op)
            continue
        operands, end = sunk
        inner = new_op(program, op.opcode, operands, op.attrs, op.loc)
        gather = new_op(program, "gather", [inner.output], {"end": end}, op.loc, output=op.output)
        forward += [inner, gather]
        prod[inner.output.id], prod[op.output.id] = inner, gather
        count += 1
    program.forward = forward
    remove_dead_forward(program)
    return count


def _node_operands(program: Program, op, prod: dict):
    """``(node operands, end)`` when every row operand of the elementwise edge op ``op`` is a
    gather of node rows from one end; else None."""
    if op.opcode not in _ELEMENTWISE or op.output is None or op.output.assoc != "edge":
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
