"""Fold a gather-then-scatter over the edges into one aggregation (no edge tensor at all).

    scatter(gather(x, end='src'), end='dst', reduce=r)  ->  aggregate(x, reduce=r)             r: sum, mean, max
    scatter(gather(x, end='dst'), end='src', reduce=sum) ->  aggregate(x, reduce=sum, direction='out')

``Sum(u in g.neighbors(v): u.h)`` and ``Mean(e in v.incoming_edges(): e.src.h)`` lower to the
left-hand side: an E x F copy of the rows, then a segmented reduction.  The right-hand side is the
SpMM the backends run in place (no copy), and the form the other passes reorder and hoist.  Both
sides are the same numbers: the reductions run over the same edges in the same order, a mean
divides by the same degree, a max keeps the same first winning edge.  A mean or max over out-edges
has no aggregate form (an aggregate's mean divides by the in-degree) and is left alone.
"""
from __future__ import annotations

from ..ir import Program
from .rewrite import forward_uses, identity_derived, new_op, producers, remove_dead_forward, require_forward_only


def fold_edge_aggregations(program: Program) -> int:
    """Rewrite in place; returns the number of gather/scatter pairs folded."""
    require_forward_only(program, "fold_edge_aggregations")
    uses, prod = forward_uses(program), producers(program)
    count = 0
    for pos, op in enumerate(program.forward):
        gather = prod.get(op.inputs[0].id) if op.opcode == "scatter" else None
        if gather is None or gather.opcode != "gather" or uses.get(gather.output.id, 0) != 1:
            continue
        x = gather.inputs[0]
        if x.assoc != "node" or identity_derived(program, x, prod):
            continue
        ends, reduce = (gather.attrs.get("end"), op.attrs.get("end", "dst")), op.attrs["reduce"]
        if ends == ("src", "dst"):
            direction = "in"
        elif ends == ("dst", "src") and reduce == "sum":
            direction = "out"
        else:
            continue
        attrs = {"reduce": reduce, "norm": "none", "direction": direction, "self_loops": False}
        program.forward[pos] = new_op(program, "aggregate", [x], attrs, op.loc, output=op.output)
        count += 1
    remove_dead_forward(program)
    return count
