"""Linear-before-aggregate reordering (Graphiler): run the aggregation on the narrower width.

For a sum or mean aggregation ``A`` (any norm, self loops, edge weights: all linear in the
node features) and a weight ``W``, ``A(x W) = (A x) W``.  The aggregation costs ``E`` times
its width, the linear ``N K M`` either way, so the pass picks the order in which the
aggregation sees ``min(K, M)`` columns:

* ``aggregate(linear(x, W))`` with ``K < M``  ->  ``linear(aggregate(x), W)``
* ``linear(aggregate(x), W)`` with ``M < K``  ->  ``aggregate(linear(x, W))``; when several
  linears read the aggregation (and nothing else does), all move if their widths sum below ``K``
* ``linear(x + aggregate(x), W)`` with ``M < K``  ->  ``u + aggregate(u)``, ``u = linear(x, W)``
  (GIN's first layer: one product either way, and the features are then read only through
  it, so sparse features keep their sparse path)

Only when the intermediate has no other reader (above: no reader but such linears), since
otherwise both orders would be computed; only with bound widths, and never so that an aggregation would run on the featureless identity.
"""
from __future__ import annotations

from ..ir import IRBug, Program
from .rewrite import (concrete, forward_uses, identity_derived, new_op, producers,
                      remove_dead_forward, require_forward_only)

LINEAR_REDUCTIONS = ("sum", "mean")


def reorder_linear_aggregate(program: Program) -> int:
    """Rewrite in place; returns the number of reorderings."""
    require_forward_only(program, "reorder_linear_aggregate")
    count = 0
    while _rewrite_one(program):
        count += 1
    remove_dead_forward(program)
    return count


def _widths(x, z):
    k, m = concrete(x.width), concrete(z.width)
    if k is None or m is None:
        raise IRBug(f"reorder_linear_aggregate needs bound sizes (width {x.width} or "
                      f"{z.width} is symbolic); call Program.bind first")
    return k, m


def _rewrite_one(program: Program) -> bool:
    uses, prod = forward_uses(program), producers(program)
    for pos, op in enumerate(program.forward):
        if op.opcode == "aggregate" and op.attrs["reduce"] in LINEAR_REDUCTIONS:
            lin = prod.get(op.inputs[0].id)
            if lin is None or lin.opcode != "linear" or lin.inputs[0].assoc != "node":
                continue
            x, w = lin.inputs
            if uses.get(lin.output.id, 0) != 1:
                continue
            k, m = _widths(x, lin.output)
            if not k < m or identity_derived(program, x, prod):
                continue
            agg = new_op(program, "aggregate", [x] + op.inputs[1:], op.attrs, op.loc)
            linear = new_op(program, "linear", [agg.output, w], lin.attrs, lin.loc, output=op.output)
            program.forward[pos:pos + 1] = [agg, linear]
            program.forward.remove(lin)
            return True
        if op.opcode == "linear" and op.inputs[0].assoc == "node" and _self_plus_aggregate(program, op, uses, prod):
            return True
        if op.opcode == "linear" and op.inputs[0].assoc == "node" and _linears_before_aggregate(program, op, uses, prod):
            return True
    return False


def _linears_before_aggregate(program: Program, op, uses, prod) -> bool:
    """``linear(aggregate(x), W_i)`` for every reader i  ->  ``aggregate(linear(x, W_i))``, when the
    products together are narrower than x (TAGConv's hop read by its own weight and by the next
    hop's: one aggregation of width sum(M_i) instead of one of width K)."""
    agg = prod.get(op.inputs[0].id)
    if agg is None or agg.opcode != "aggregate" or agg.attrs["reduce"] not in LINEAR_REDUCTIONS:
        return False
    readers = [r for r in program.forward if agg.output.id in (v.id for v in r.inputs)]
    if len(readers) != uses.get(agg.output.id, 0):       # the loss or the logits read it too
        return False
    if any(r.opcode != "linear" or r.inputs[0].id != agg.output.id or r.inputs[1].id == agg.output.id
           for r in readers):
        return False
    x = agg.inputs[0]
    k = _widths(x, op.output)[0]
    if not sum(_widths(x, r.output)[1] for r in readers) < k:
        return False
    for reader in readers:
        linear = new_op(program, "linear", [x, reader.inputs[1]], reader.attrs, reader.loc)
        moved = new_op(program, "aggregate", [linear.output] + agg.inputs[1:], agg.attrs,
                       agg.loc, output=reader.output)
        pos = program.forward.index(reader)
        program.forward[pos:pos + 1] = [linear, moved]
    program.forward.remove(agg)
    return True


def _self_plus_aggregate(program: Program, op, uses, prod) -> bool:
    """``linear(x + aggregate(x), W)`` -> ``u + aggregate(u)`` with ``u = linear(x, W)``, when the
    product is narrower than x and the sum and the aggregation have no other reader."""
    total = prod.get(op.inputs[0].id)
    if total is None or total.opcode != "add" or uses.get(total.output.id, 0) != 1:
        return False
    a, b = total.inputs
    agg = next((p for p in (prod.get(b.id), prod.get(a.id)) if p is not None and p.opcode == "aggregate"), None)
    if agg is None or agg.attrs["reduce"] not in LINEAR_REDUCTIONS or uses.get(agg.output.id, 0) != 1:
        return False
    x = agg.inputs[0]
    if {a.id, b.id} != {x.id, agg.output.id} or x.shape != agg.output.shape:
        return False
    k, m = _widths(x, op.output)
    if not m < k or identity_derived(program, x, prod):
        return False
    linear = new_op(program, "linear", [x, op.inputs[1]], op.attrs, op.loc)
    moved = new_op(program, "aggregate", [linear.output] + agg.inputs[1:], agg.attrs, agg.loc)
    pair = [linear.output, moved.output] if a.id == x.id else [moved.output, linear.output]
    added = new_op(program, "add", pair, total.attrs, total.loc, output=op.output)
    pos = program.forward.index(op)
    program.forward[pos:pos + 1] = [linear, moved, added]
    program.forward.remove(total)
    program.forward.remove(agg)
    return True
