"""Small utilities shared by the forward rewriting passes."""
from __future__ import annotations

from ..ir import IRBug, Op, Program, Value
from ..ir_ops import infer_full

#: ops through which a value derived from the featureless identity stays "rows of I_N"
IDENTITY_PRESERVING = ("gather", "dropout")


def require_forward_only(program: Program, pass_name: str) -> None:
    if program.backward:
        raise IRBug(f"{pass_name} rewrites the forward program; run it before autodiff "
                      f"(program '{program.name}' already has a backward)")


def forward_uses(program: Program) -> dict:
    """value id -> number of forward reads, counting the loss and logits as external reads."""
    counts: dict = {}
    for op in program.forward:
        for v in op.inputs:
            counts[v.id] = counts.get(v.id, 0) + 1
    for v in (program.loss, program.logits):
        if v is not None:
            counts[v.id] = counts.get(v.id, 0) + 1
    return counts


def producers(program: Program) -> dict:
    return {op.output.id: op for op in program.forward if op.output is not None}


def concrete(dim):
    """``dim`` as an int, or None when it is still symbolic."""
    return dim if isinstance(dim, int) else None


def identity_derived(program: Program, v: Value, prod: dict) -> bool:
    """Whether ``v`` is the featureless identity or rows of it (gathered / dropped out)."""
    features = program.inputs.get("features")
    while True:
        if program.featureless and features is not None and v.id == features.id:
            return True
        op = prod.get(v.id)
        if op is None or op.opcode not in IDENTITY_PRESERVING:
            return False
        v = op.inputs[0]


def gathered_identity(program: Program, v: Value, prod: dict) -> bool:
    """Whether ``v`` is the featureless identity or a gather of it: rows of I_N that exist only
    as the row index a weight is read at (a dropout in between makes them scaled rows)."""
    if not getattr(program, "featureless", False):
        return False
    while v.id in prod and prod[v.id].opcode == "gather":
        v = prod[v.id].inputs[0]
    return v is program.inputs.get("features")


def depends_on_params(program: Program, v: Value, prod: dict) -> bool:
    """Whether ``v`` is computed from a parameter (so autodiff would want its gradient)."""
    params = {p.value.id for p in program.params}
    stack, seen = [v], set()
    while stack:
        u = stack.pop()
        if u.id in params:
            return True
        if u.id in seen or u.id not in prod:
            continue
        seen.add(u.id)
        stack += prod[u.id].inputs
    return False


def new_op(program: Program, opcode: str, inputs: list, attrs: dict, loc=None,
           output: Value = None, name: str = "") -> Op:
    """An op with inferred result; ``output`` reuses an existing value (so its readers stay)."""
    assoc, shape, dtype, domain = infer_full(opcode, list(inputs), attrs, loc)
    if output is None:
        output = program.new_value(assoc, shape, dtype, name, domain)
    elif output.assoc != assoc or len(output.shape) != len(shape):
        raise IRBug(f"rewrite of {output!r} into {opcode} changes its kind", loc)
    return Op(opcode, list(inputs), output, dict(attrs), loc)


def remove_dead_forward(program: Program) -> int:
    """Drop forward ops whose results nothing reads (forward ops are pure); returns the count."""
    needed = program.needed_value_ids()
    kept = [op for op in program.forward if op.output is not None and op.output.id in needed]
    removed = len(program.forward) - len(kept)
    program.forward = kept
    return removed
