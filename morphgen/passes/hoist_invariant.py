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
invariant), or for edge weights that are values of the program.
"""
from __future__ import annotations

from ..ir import Program
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


def _graph_constant(op) -> bool:
    """A forward aggregation over in-edges with no edge weights: a function of its input and the
    graph only."""
    return (op.opcode == "aggregate" and len(op.inputs) == 1
            and op.attrs["reduce"] in HOISTABLE_REDUCTIONS and op.attrs.get("direction", "in") == "in")


def _repaid(program: Program, features, layer_width) -> bool:
    """One aggregation at width F, once, against two at width M (forward + backward) per epoch."""
    f, m = concrete(features.width), concrete(layer_width)
    return f is not None and m is not None and f <= 2 * m * max(1, program.epochs)


def _hoist_one(program: Program, features) -> bool:
    uses, prod = forward_uses(program), producers(program)
    invariant = {op.output.id for op in program.invariant}
    for pos, op in enumerate(program.forward):
        if not _graph_constant(op):
            continue
        # A x, or A (A x) and so on: SGC's S^K x is K aggregations computed once.
        if op.inputs[0].id == features.id or op.inputs[0].id in invariant:
            program.forward.pop(pos)
            program.invariant.append(op)
            return True
        lin = prod.get(op.inputs[0].id)
        if (op.attrs["reduce"] not in LINEAR_REDUCTIONS or lin is None or lin.opcode != "linear"
                or lin.inputs[0].id != features.id
                or uses.get(lin.output.id, 0) != 1 or not _repaid(program, features, lin.output.width)):
            continue
        x, w = lin.inputs
        hoisted = new_op(program, "aggregate", [x], op.attrs, op.loc, name="aggregated_features")
        linear = new_op(program, "linear", [hoisted.output, w], lin.attrs, lin.loc, output=op.output)
        program.invariant.append(hoisted)
        program.forward[pos] = linear
        program.forward.remove(lin)
        return True
    return False
