"""Linear operator reordering (Hector): fold a projection into the weight it follows.

    dot(typed_linear(x, W), typed_param(a))  ->  dot(x, typed_param(matvec(W, a)))
    dot(linear(x, W), a)                     ->  dot(x, matvec(W, a))
    linear(linear(x, W), A)                  ->  linear(x, linear(W, A))

i.e. ``(x W_t) · a_t = x · (W_t a_t)``: the product of the weights is computed once per type
(``T K M`` flops) instead of projecting every row to width ``M`` first.  Applied when the
projected value ``x W`` has no other reader (it then disappears entirely), or when its
input is narrower (``K < M``), where the rewritten form is cheaper even though ``x W`` stays.
For ``linear(linear(x, W), A)`` with an otherwise unused ``x W`` it also needs ``J <= M``.
"""
from __future__ import annotations

from ..ir import Program
from ..ir_ops import blocks_of
from .rewrite import (concrete, forward_uses, gathered_identity, new_op, producers, remove_dead_forward,
                      require_forward_only)


def reorder_linear_operators(program: Program) -> int:
    """Rewrite in place; returns the number of rewrites."""
    require_forward_only(program, "reorder_linear_operators")
    count = 0
    while _rewrite_one(program):
        count += 1
    remove_dead_forward(program)
    return count


def _narrower(k, m) -> bool:
    k, m = concrete(k), concrete(m)
    return k is not None and m is not None and k < m


def _rewrite_one(program: Program) -> bool:
    uses, prod = forward_uses(program), producers(program)
    for pos, op in enumerate(program.forward):
        if op.opcode == "dot":
            new = _dot_rewrite(program, op, uses, prod)
        elif op.opcode == "linear" and op.inputs[0].assoc != "param":
            new = _linear_rewrite(program, op, uses, prod)
        else:
            new = None
        if new:
            program.forward[pos:pos + 1] = new
            return True
    return False


def _dot_rewrite(program, op, uses, prod):
    if op.attrs.get("heads", 1) > 1:
        return None      # W·a would be one vector per head (a [K, heads] product): not rewritten yet
    for z, other in (op.inputs, op.inputs[::-1]):
        proj = prod.get(z.id)
        if proj is None or proj.opcode not in ("linear", "typed_linear") or z.assoc == "param":
            continue
        if blocks_of(proj) != 1:    # W·a of a block-diagonal W is not one vector per type
            continue
        x, w = proj.inputs
        if x.assoc == "param" or gathered_identity(program, x, prod):   # a dot cannot take identity rows
            continue
        if not (uses.get(z.id, 0) == 1 or _narrower(x.width, z.width)):
            continue
        if proj.opcode == "typed_linear":
            sel = prod.get(other.id)
            if sel is None or sel.opcode != "typed_param" or sel.inputs[0].domain != w.domain:
                continue
            mv = new_op(program, "matvec", [w, sel.inputs[0]], {}, op.loc, name=f"{w.name}_a")
            tp = new_op(program, "typed_param", [mv.output], {}, op.loc)
            dot = new_op(program, "dot", [x, tp.output], op.attrs, op.loc, output=op.output)
            return [mv, tp, dot]
        if other.assoc == "param" and len(other.shape) == 1:
            mv = new_op(program, "matvec", [w, other], {}, op.loc, name=f"{w.name}_a")
            dot = new_op(program, "dot", [x, mv.output], op.attrs, op.loc, output=op.output)
            return [mv, dot]
    return None


def _linear_rewrite(program, op, uses, prod):
    z, a = op.inputs
    proj = prod.get(z.id)
    if proj is None or proj.opcode != "linear" or proj.inputs[0].assoc == "param":
        return None
    x, w = proj.inputs
    single = uses.get(z.id, 0) == 1
    j, m = concrete(a.shape[1]), concrete(z.width)
    if not ((single and j is not None and m is not None and j <= m) or _narrower(x.width, z.width)):
        return None
    wa = new_op(program, "linear", [w, a], {}, op.loc, name=f"{w.name}_{a.name}")
    lin = new_op(program, "linear", [x, wa.output], op.attrs, op.loc, output=op.output)
    return [wa, lin]
