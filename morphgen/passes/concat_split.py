"""Concatenation split (Graphiler): ``linear(concat(a, b), W) -> linear(a, W_top) + linear(b, W_bottom)``.

The row blocks of ``W`` are ``param_slice`` views (no copy); the concatenated tensor is never
materialised.  Applied when the concat has no other reader.  Autodiff stacks the gradients
of the views back into ``W``'s gradient with ``row_concat``.
"""
from __future__ import annotations

from ..ir import Program, dim_add
from .rewrite import forward_uses, new_op, producers, remove_dead_forward, require_forward_only


def split_concat_linear(program: Program) -> int:
    """Rewrite in place; returns the number of splits."""
    require_forward_only(program, "split_concat_linear")
    count = 0
    while _rewrite_one(program):
        count += 1
    remove_dead_forward(program)
    return count


def _rewrite_one(program: Program) -> bool:
    uses, prod = forward_uses(program), producers(program)
    for pos, op in enumerate(program.forward):
        if op.opcode != "linear" or op.inputs[0].assoc == "param":
            continue
        cat = prod.get(op.inputs[0].id)
        if (cat is None or cat.opcode != "concat" or len(cat.inputs) < 2
                or uses.get(cat.output.id, 0) != 1):
            continue
        w, offset, group, first_part = op.inputs[1], 0, op.output.id, 0
        block = prod.get(w.id)
        if block is not None and block.opcode == "param_slice":
            # a block of a weight split before (a concat inside a concat): its parts slice the
            # weight itself, in the block's group and place, so that the group still tiles its rows
            w, offset, group, first_part = (block.inputs[0], block.attrs["start"], block.attrs["group"],
                                            block.attrs["part"])
            _make_room(program, w, group, first_part, len(cat.inputs) - 1)
        new, partials, start = [], [], 0
        for i, part in enumerate(cat.inputs):
            stop = dim_add(start, part.width)
            view = new_op(program, "param_slice", [w],
                          {"start": dim_add(offset, start), "stop": dim_add(offset, stop), "group": group,
                           "part": first_part + i},
                          op.loc, name=f"{w.name}_rows{first_part + i}")
            lin = new_op(program, "linear", [part, view.output], {}, op.loc)
            new += [view, lin]
            partials.append(lin.output)
            start = stop
        total = partials[0]
        for j, p in enumerate(partials[1:], start=1):
            last = j == len(partials) - 1
            add = new_op(program, "add", [total, p], {}, op.loc, output=op.output if last else None)
            new.append(add)
            total = add.output
        program.forward[pos:pos + 1] = new
        program.forward.remove(cat)
        return True
    return False


def _make_room(program: Program, w, group: int, part: int, more: int) -> None:
    """The views of ``w``'s row group after ``part`` move ``more`` places on (part takes more)."""
    for op in program.forward:
        if (op.opcode == "param_slice" and op.inputs[0].id == w.id and op.attrs.get("group") == group
                and op.attrs["part"] > part):
            op.attrs["part"] += more
