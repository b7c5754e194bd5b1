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

Messages scaled by the graph's own edge weights (``e.src.z * e.edge_weight``) fold the same way,
into an aggregate that reads the weights (the kernels' weighted sum, no E x F copy).  A sum
between two row scales by the same node value ``s`` that needs no gradient -- a normalisation
the program computes itself, such as GCN's ``rsqrt(deg + 1)`` written out -- is one aggregate
whose kernel applies ``s`` at both ends of every edge (``fold_node_scales``):

    mul(aggregate(mul(y, s), w, self_loops), s)  ->  aggregate(y, w, s, norm=node_scale, self_loops)

The same numbers up to float rounding (``s_v (sum_u w s_u y_u + s_v y_v)`` either way, NaN where
``s`` is NaN), and two row passes forward and two backward fewer per layer.
"""
from __future__ import annotations

from ..ir import Program
from ..ir_ops import aggregate_scale, aggregate_weights, reads_edge_weights
from .rewrite import (depends_on_params, forward_uses, identity_derived, new_op, producers, remove_dead_forward,
                      require_forward_only)


def fold_edge_aggregations(program: Program) -> int:
    """Rewrite in place; returns the number of gather/scatter pairs folded."""
    require_forward_only(program, "fold_edge_aggregations")
    uses, prod = forward_uses(program), producers(program)
    count = 0
    for pos, op in enumerate(program.forward):
        if op.opcode != "scatter":
            continue
        gather, weights = _weighted_messages(program, op.inputs[0], prod, uses)
        if gather is None or gather.opcode != "gather" or uses.get(gather.output.id, 0) != 1:
            continue
        if weights is not None and op.attrs["reduce"] != "sum":
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
        inputs = [x] if weights is None else [x, weights]
        program.forward[pos] = new_op(program, "aggregate", inputs, attrs, op.loc, output=op.output)
        count += 1
    remove_dead_forward(program)
    return count


def _weighted_messages(program: Program, messages, prod: dict, uses: dict) -> tuple:
    """``(gather, weights)`` when the messages are gathered rows times one number per edge that
    needs no gradient -- the graph's own weights, or coefficients the program computes from
    the graph (either order, the product read once) -- else ``(messages' producer, None)``."""
    op = prod.get(messages.id)
    if op is None or op.opcode != "mul" or uses.get(messages.id, 0) != 1:
        return op, None
    for rows, weights in (op.inputs, op.inputs[::-1]):
        gather = prod.get(rows.id)
        constant = reads_edge_weights(prod.get(weights.id)) or (
            weights.assoc == "edge" and weights.width == 1 and not depends_on_params(program, weights, prod))
        if gather is not None and gather.opcode == "gather" and constant and rows.shape == messages.shape:
            return gather, weights
    return op, None


def fold_edge_normalisation(program: Program) -> int:
    """GCN's normalisation as message passing writes it (PyG's gcn_norm): each message weighed by
    ``c = n_src * n_dst`` and the node's own row scaled by ``n`` twice, ``n`` a node [1] value
    that needs no gradient, become one aggregate with norm=node_scale, in place:

        aggregate(z, c), c = mul(gather(n, src), gather(n, dst))  ->  aggregate(z, n, norm=node_scale)
        add(aggregate(z, n, node_scale), mul(mul(z, n), n))        ->  the same with self_loops

    (either operand order in every product and the add).  Runs after fold_edge_aggregations and
    before reorder_linear_aggregate, which may then move the layer's product past the whole sum.
    Returns the number of rewrites."""
    require_forward_only(program, "fold_edge_normalisation")
    count, prod = 0, producers(program)
    for pos, op in enumerate(program.forward):
        scale = _symmetric_coefficients(program, op, prod)
        if scale is not None:
            attrs = dict(op.attrs, norm="node_scale")
            program.forward[pos] = new_op(program, "aggregate", [op.inputs[0], scale], attrs, op.loc,
                                          output=op.output)
            count += 1

    def own_row_scaled_twice(agg, own, prod):
        if (agg.attrs.get("norm") != "node_scale" or agg.attrs.get("self_loops") or own.shape != agg.output.shape
                or not _scaled_twice(own, agg.inputs[0], aggregate_scale(agg), prod)):
            return None
        return list(agg.inputs), dict(agg.attrs, self_loops=True)
    return count + _fold_into_aggregate(program, "add", own_row_scaled_twice)


def _symmetric_coefficients(program: Program, op, prod: dict):
    """``n`` when ``op`` is an unnormalised in-sum weighed by ``gather(n, src) * gather(n, dst)``
    with ``n`` a node [1] value that depends on no parameter; else None."""
    weights = aggregate_weights(op) if op.opcode == "aggregate" else None
    if (weights is None or op.attrs.get("reduce") != "sum" or op.attrs.get("norm", "none") != "none"
            or op.attrs.get("direction", "in") != "in" or op.attrs.get("self_loops")):
        return None
    product = prod.get(weights.id)
    if product is None or product.opcode != "mul" or len(product.inputs) != 2:
        return None
    ends = [prod.get(v.id) for v in product.inputs]
    if any(g is None or g.opcode != "gather" for g in ends):
        return None
    if {g.attrs.get("end") for g in ends} != {"src", "dst"} or ends[0].inputs[0] is not ends[1].inputs[0]:
        return None
    scale = ends[0].inputs[0]
    if scale.assoc != "node" or scale.width != 1 or depends_on_params(program, scale, prod):
        return None
    return scale


def _scaled_twice(value, rows, scale, prod: dict) -> bool:
    """Whether ``value`` is ``rows * scale * scale`` (``mul(mul(rows, s), s)``, any operand order)."""
    outer = prod.get(value.id)
    if outer is None or outer.opcode != "mul" or len(outer.inputs) != 2:
        return False
    for inner_value, other in (outer.inputs, outer.inputs[::-1]):
        if other is scale and _scaled_rows(inner_value, scale, prod) is rows:
            return True
    return False


def _plain_sum_of(op) -> bool:
    """An aggregate that sums the in-neighbours' rows (weighted by the graph's edge weights or
    not), unnormalised and without self loops."""
    a = op.attrs
    return (op.opcode == "aggregate" and len(op.inputs) <= 2 and a.get("reduce") == "sum"
            and a.get("norm", "none") == "none" and a.get("direction", "in") == "in" and not a.get("self_loops"))


def fold_self_terms(program: Program) -> int:
    """Rewrite ``add(x, aggregate(x))`` (either order) into one aggregate with self loops, in
    place; returns the number folded.  The aggregate must have no other reader, and x must not
    be rows of the featureless identity (left to the lookups that read it)."""
    require_forward_only(program, "fold_self_terms")

    def own_row(agg, x, prod):
        if (not _plain_sum_of(agg) or agg.inputs[0] is not x or x.shape != agg.output.shape
                or identity_derived(program, x, prod)):    # the featureless identity is never a row array
            return None
        return list(agg.inputs), dict(agg.attrs, self_loops=True)
    return _fold_into_aggregate(program, "add", own_row)


def _fold_into_aggregate(program: Program, opcode: str, fold) -> int:
    """Replace each forward ``opcode`` op of two operands, one of them an aggregate read only
    there, by the aggregate ``fold(aggregate op, other operand, producers)`` gives as (inputs,
    attrs), trying both operand orders; ``fold`` returns None to leave the op.  Returns the
    number replaced."""
    uses, prod = forward_uses(program), producers(program)
    count = 0
    for pos, op in enumerate(program.forward):
        if op.opcode != opcode or len(op.inputs) != 2:
            continue
        for agg_value, other in (op.inputs, op.inputs[::-1]):
            agg = prod.get(agg_value.id)
            if agg is None or agg.opcode != "aggregate" or uses.get(agg_value.id, 0) != 1:
                continue
            folded = fold(agg, other, prod)
            if folded is not None:
                inputs, attrs = folded
                program.forward[pos] = new_op(program, "aggregate", inputs, attrs, op.loc, output=op.output)
                count += 1
                break
    remove_dead_forward(program)
    return count


def fold_node_scales(program: Program) -> int:
    """Rewrite ``mul(aggregate(mul(y, s)), s)`` (either order in both products) into one aggregate
    with norm=node_scale, in place; returns the number folded.  The sum must be unnormalised over
    in-edges (weighted or not, self loops or not) and read only by the outer product; ``s`` must be
    the same node [1] value at both ends and must not depend on a parameter (the aggregate takes
    no gradient for it).  The inner product may have other readers: it is then still computed
    for them."""
    require_forward_only(program, "fold_node_scales")

    def scaled_both_ends(agg, scale, prod):
        if (agg.attrs.get("reduce") != "sum" or agg.attrs.get("norm", "none") != "none"
                or agg.attrs.get("direction", "in") != "in" or scale.assoc != "node" or scale.width != 1):
            return None
        rows = _scaled_rows(agg.inputs[0], scale, prod)
        if rows is None or depends_on_params(program, scale, prod) or identity_derived(program, rows, prod):
            return None
        return [rows] + agg.inputs[1:] + [scale], dict(agg.attrs, norm="node_scale")
    return _fold_into_aggregate(program, "mul", scaled_both_ends)


def _scaled_rows(z, scale, prod: dict):
    """``y`` when ``z = mul(y, scale)`` (either order) with ``y`` node rows of z's shape, else None."""
    op = prod.get(z.id)
    if op is None or op.opcode != "mul" or len(op.inputs) != 2:
        return None
    for rows, other in (op.inputs, op.inputs[::-1]):
        if other is scale and rows.assoc == "node" and rows.shape == z.shape:
            return rows
    return None
