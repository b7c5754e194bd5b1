"""Hoist aggregations of the input features out of the training loop (loop-invariant code motion).

The input features and the graph never change between epochs, so ``A x`` -- a sum or mean
aggregation of the raw features -- is the same number every epoch.  This pass moves it into
``program.invariant``, which backends run once when the data is bound:

* ``aggregate(x)`` with ``x`` the features                 ->  invariant ``P = aggregate(x)``
* ``aggregate(linear(x, W))`` with ``x`` the features      ->  invariant ``P = aggregate(x)``,
  forward ``linear(P, W)`` (``A (x W) = (A x) W``, as in ``reorder_linear_aggregate``)
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

from ..ir import Op, Program
from ..ir_ops import aggregate_scale, reads_edge_weights
from .reorder_aggregate import LINEAR_REDUCTIONS
from .rewrite import concrete, forward_uses, new_op, producers, remove_dead_forward, require_forward_only


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
    """How many aggregations run once, at load time (the invariant section also reads the edge
    weights those weighted by them need)."""
    return sum(op.opcode == "aggregate" for op in program.invariant)


def _graph_constant(op, prod) -> bool:
    """A forward aggregation over in-edges with no edge weights, or with the graph's own
    (e.edge_weight): a function of its input and the graph only."""
    if op.opcode != "aggregate" or aggregate_scale(op) is not None:
        return False
    graph_weights = len(op.inputs) == 2 and reads_edge_weights(prod.get(op.inputs[1].id))
    return ((len(op.inputs) == 1 or graph_weights)
            and op.attrs["reduce"] in HOISTABLE_REDUCTIONS and op.attrs.get("direction", "in") == "in")


def _invariant_inputs(program: Program, op, prod) -> list:
    """``op``'s inputs as the invariant section reads them: the graph's edge weights read again
    there (an op of its own), since the invariant section runs before the forward defines any."""
    if len(op.inputs) == 1:
        return list(op.inputs)
    weights = prod[op.inputs[1].id]
    again = new_op(program, "graph_scalar", [], weights.attrs, weights.loc, name="edge_weights")
    program.invariant.append(again)
    return [op.inputs[0], again.output]


def _repaid(program: Program, features, layer_width) -> bool:
    """One aggregation at width F, once, against two at width M (forward + backward) per epoch."""
    f, m = concrete(features.width), concrete(layer_width)
    return f is not None and m is not None and f <= 2 * m * max(1, program.epochs)


def _hoist_one(program: Program, features) -> bool:
    uses, prod = forward_uses(program), producers(program)
    invariant = {op.output.id for op in program.invariant}
    for pos, op in enumerate(program.forward):
        if not _graph_constant(op, prod):
            continue
        # A x, or A (A x) and so on: SGC's S^K x is K aggregations computed once.
        if op.inputs[0].id == features.id or op.inputs[0].id in invariant:
            program.forward.pop(pos)
            program.invariant.append(Op(op.opcode, _invariant_inputs(program, op, prod), op.output,
                                        dict(op.attrs), op.loc))
            return True
        lin = prod.get(op.inputs[0].id)
        if (op.attrs["reduce"] not in LINEAR_REDUCTIONS or lin is None or lin.opcode != "linear"
                or lin.inputs[0].id != features.id
                or uses.get(lin.output.id, 0) != 1 or not _repaid(program, features, lin.output.width)):
            continue
        x, w = lin.inputs
        hoisted = new_op(program, "aggregate", [x] + _invariant_inputs(program, op, prod)[1:], op.attrs, op.loc,
                         name="aggregated_features")
        linear = new_op(program, "linear", [hoisted.output, w], lin.attrs, lin.loc, output=op.output)
        program.invariant.append(hoisted)
        program.forward[pos] = linear
        program.forward.remove(lin)
        return True
    return False
