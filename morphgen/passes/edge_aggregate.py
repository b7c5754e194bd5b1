"""Fold a gather-then-scatter over the edges into one aggregation (no edge tensor at all).

    scatter(gather(x, end='src'), end='dst', reduce=r)  ->  aggregate(x, reduce=r)             r: sum, mean, max
    scatter(gather(x, end='dst'), end='src', reduce=sum) ->  aggregate(x, reduce=sum, direction='out')

``Sum(u in g.neighbors(v): u.h)`` and ``Mean(e in v.incoming_edges(): e.src.h)`` lower to the
left-hand side: an E x F copy of the rows, then a segmented reduction.  The right-hand side is the
SpMM the backends run in place (no copy), and the form the other passes reorder and hoist.  Both
sides are the same numbers: the reductions run over the same edges in the same order, a mean
divides by the same degree, a max keeps the same first winning edge.  A mean or max over out-edges
has no aggregate form (an aggregate's mean divides by the in-degree) and is left alone.

A node's own row added to the plain sum of its neighbours' rows (GIN's ``x + Sum(...)``) is the
same sum with a self loop, which the aggregation kernels add in their epilogue:

    add(x, aggregate(x, reduce=sum))  ->  aggregate(x, reduce=sum, self_loops=True)

one pass over the rows instead of two, and its gradient one transposed aggregation instead of
an aggregation and an add (``fold_self_terms``).
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


def _plain_sum_of(op) -> bool:
    """An aggregate that sums the in-neighbours' rows, unweighted and without self loops."""
    a = op.attrs
    return (op.opcode == "aggregate" and len(op.inputs) == 1 and a.get("reduce") == "sum"
            and a.get("norm", "none") == "none" and a.get("direction", "in") == "in" and not a.get("self_loops"))


def fold_self_terms(program: Program) -> int:
    """Rewrite ``add(x, aggregate(x))`` (either order) into one aggregate with self loops, in
    place; returns the number folded.  The aggregate must have no other reader, and x must not
    be rows of the featureless identity (left to the lookups that read it)."""
    require_forward_only(program, "fold_self_terms")
    uses, prod = forward_uses(program), producers(program)
    count = 0
    for pos, op in enumerate(program.forward):
        if op.opcode != "add" or len(op.inputs) != 2:
            continue
        for agg_value, x in (op.inputs, op.inputs[::-1]):
            agg = prod.get(agg_value.id)
            if (agg is None or not _plain_sum_of(agg) or agg.inputs[0] is not x
                    or uses.get(agg_value.id, 0) != 1 or x.shape != agg_value.shape
                    or identity_derived(program, x, prod)):    # the featureless identity is never a row array
                continue
            attrs = dict(agg.attrs, self_loops=True)
            program.forward[pos] = new_op(program, "aggregate", [x], attrs, op.loc, output=op.output)
            count += 1
            break
    remove_dead_forward(program)
    return count
