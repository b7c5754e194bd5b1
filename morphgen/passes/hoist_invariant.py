"""Hoist what never changes out of the training loop (loop-invariant code motion).

``hoist_graph_constants`` moves the values the forward computes from the graph alone (degree
chains, a normalisation written out) into ``program.invariant``; ``hoist_invariant_aggregation``
moves aggregations of the input features there, as follows.

The input features and the graph never change between epochs, so ``A x`` -- a sum or mean
aggregation of the raw features -- is the same number every epoch.  This pass moves it into
``program.invariant``, which backends run once when the data is bound:

* ``aggregate(x)`` with ``x`` the features                 ->  invariant ``P = aggregate(x)``
* ``aggregate(linear(x, W))`` with ``x`` the features      ->  invariant ``P = aggregate(x)``,
  or already invariant                                        forward ``linear(P, W)`` (``A (x W) = (A x) W``,
                                                              as in ``reorder_linear_aggregate``)
* ``aggregate(P)`` with ``P`` already invariant             ->  invariant too (SGC's ``S^K x``)

The first and third forms take a max reduction as well (``max_u x_u`` is as constant as the sum;
no gradient flows into the features, so no argmax is kept); the second needs a sum or mean, which
commutes with the product.

The second form is what a first GCN layer looks like after ``reorder_linear_aggregate`` put the
aggregation on the narrow side.  Hoisted, the layer keeps its linear (same FLOPs) but loses one
aggregation forward and one backward per epoch: the weight gradient becomes ``P^T G`` instead of
``x^T (A^T G)``, and nothing flows into the features.  The price is one aggregation at the
features' width ``F`` instead of the layer's width ``M``, once; it is taken when it is repaid
within the program's epochs (``F <= 2 M epochs``).

Only for dense features: aggregating sparse features would fill them in (a 99%-sparse matrix
times a graph is mostly dense).  Not when the features are featureless (the identity), when a
dropout or any other per-epoch op sits between them and the aggregation (then it is not
invariant), or for edge weights that are values of the program (the graph's own, e.edge_weight,
are as constant as the graph: GCN layers weighing their edges are hoisted like GCN's).
"""
from __future__ import annotations

from ..ir import Program
from ..ir_ops import BINARY, MATH_FUNCTIONS, UNARY, aggregate_scale, aggregate_weights, reads_edge_weights
from .reorder_aggregate import LINEAR_REDUCTIONS
from .rewrite import concrete, forward_uses, new_op, producers, remove_dead_forward, require_forward_only


# Ops that compute the same numbers every epoch from the same inputs: no randomness (dropout),
# no state (batch statistics), no argmax kept for a gradient (max reductions).
_DETERMINISTIC = frozenset(("graph_scalar", "gather", "scale") + UNARY + MATH_FUNCTIONS + BINARY)


def hoist_graph_constants(program: Program) -> int:
    """Move what the forward computes from the graph alone into ``program.invariant``, in
    order; returns the number of ops moved.

    A graph constant is a graph scalar (degrees, edge weights) or what a deterministic op
    computes from graph constants alone: GCN's ``rsqrt(in_degree + 1)`` written out, the
    weighted degrees ``Sum(e in v.incoming_edges(): e.edge_weight)``, a mean's ``1 / degree``.
    Backends already compute graph scalars once at load time; the chains built on them were
    recomputed every epoch (a scatter over every edge for the weighted degrees).  Graph scalars
    move only when a moved op reads them; one read by nothing moved stays where it is.
    """
    require_forward_only(program, "hoist_graph_constants")
    constant = {op.output.id for op in program.invariant}
    chain = []
    for op in program.forward:
        if op.output is None or not _deterministic(op):
            continue
        if op.opcode == "graph_scalar" or (op.inputs and all(v.id in constant for v in op.inputs)):
            constant.add(op.output.id)
            chain.append(op)
    read = {v.id for op in chain if op.opcode != "graph_scalar" for v in op.inputs}
    moved = [op for op in chain if op.opcode != "graph_scalar" or op.output.id in read]
    ids = {id(op) for op in moved}
    program.invariant += moved
    program.forward = [op for op in program.forward if id(op) not in ids]
    return sum(op.opcode != "graph_scalar" for op in moved)


def _deterministic(op) -> bool:
    if op.opcode in ("scatter", "aggregate"):
        return op.attrs.get("reduce") in LINEAR_REDUCTIONS
    return op.opcode in _DETERMINISTIC


def hoist_invariant_aggregation(program: Program) -> int:
    """Rewrite in place; returns the number of aggregations moved out of the epoch."""
    require_forward_only(program, "hoist_invariant_aggregation")
    features = program.inputs.get("features")
    if features is None or program.featureless:
        return 0
    count = 0
    while _hoist_one(program, features):
        count += 1
    remove_dead_forward(program)
    return count


HOISTABLE_REDUCTIONS = LINEAR_REDUCTIONS + ("max",)


def hoisted_aggregations(program: Program) -> int:
    """How many aggregations of the input features (or of such aggregations: SGC's S^K x) run
    once, at load time; the graph constants among the invariant ops are not counted."""
    features = program.inputs.get("features")
    of_features = {features.id} if features is not None else set()
    count = 0
    for op in program.invariant:
        if op.opcode == "aggregate" and op.inputs[0].id in of_features:
            of_features.add(op.output.id)
            count += 1
    return count


def _graph_constant(op, prod, invariant: set) -> bool:
    """A forward aggregation over in-edges with no edge weights or the graph's own (e.edge_weight),
    and a node scale, if any, that is invariant: a function of its input and the graph only."""
    if op.opcode != "aggregate" or op.attrs["reduce"] not in HOISTABLE_REDUCTIONS:
        return False
    weights, scale = aggregate_weights(op), aggregate_scale(op)
    graph_weights = weights is None or weights.id in invariant or reads_edge_weights(prod.get(weights.id))
    return (graph_weights and (scale is None or scale.id in invariant)
            and op.attrs.get("direction", "in") == "in")


def _move_weights_to_invariant(program: Program, op, prod, invariant: set) -> None:
    """The graph's edge weights ``op`` reads, moved to the invariant section when they are not
    there yet (that section runs before the forward defines anything; the forward and the
    backward still read them there, as every invariant value)."""
    weights = aggregate_weights(op)
    if weights is not None and weights.id not in invariant:
        producer = prod[weights.id]
        program.forward.remove(producer)
        program.invariant.append(producer)
        invariant.add(weights.id)


def _repaid(program: Program, rows, layer_width) -> bool:
    """One aggregation at the rows' width F, once, against two at width M (forward + backward)
    per epoch."""
    f, m = concrete(rows.width), concrete(layer_width)
    return f is not None and m is not None and f <= 2 * m * max(1, program.epochs)


def _hoist_one(program: Program, features) -> bool:
    uses, prod = forward_uses(program), producers(program)
    invariant = {op.output.id for op in program.invariant}
    for op in list(program.forward):
        if not _graph_constant(op, prod, invariant):
            continue
        # A x, or A (A x) and so on: SGC's S^K x is K aggregations computed once.
        if op.inputs[0].id == features.id or op.inputs[0].id in invariant:
            _move_weights_to_invariant(program, op, prod, invariant)
            program.forward.remove(op)
            program.invariant.append(op)
            return True
        # A (x W) = (A x) W, also for x itself invariant (SGC's second hop, put after its product
        # by reorder_linear_aggregate when the classes are fewer than the features)
        lin = prod.get(op.inputs[0].id)
        if (op.attrs["reduce"] not in LINEAR_REDUCTIONS or lin is None or lin.opcode != "linear"
                or (lin.inputs[0].id != features.id and lin.inputs[0].id not in invariant)
                or uses.get(lin.output.id, 0) != 1 or not _repaid(program, lin.inputs[0], lin.output.width)):
            continue
        x, w = lin.inputs
        _move_weights_to_invariant(program, op, prod, invariant)
        hoisted = new_op(program, "aggregate", [x] + op.inputs[1:], op.attrs, op.loc, name="aggregated_features")
        linear = new_op(program, "linear", [hoisted.output, w], lin.attrs, lin.loc, output=op.output)
        program.invariant.append(hoisted)
        program.forward[program.forward.index(op)] = linear     # (the weights' move shifted positions)
        program.forward.remove(lin)
        return True
    return False
