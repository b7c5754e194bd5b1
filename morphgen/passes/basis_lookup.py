"""Typed linear with bases: R-GCN's per-type weights W_t = Σ_b A[t,b] V[b] are not formed when
only rows of them are read.

    typed_linear(x, basis_combine(A, V))  ->  typed_linear_bases(x, A, V)

when ``x`` is the featureless identity or a gather of it. Each lookup then reads row ``row(r)`` of
``W_type(r)``: B multiply-adds per output element, straight from the bases, where forming every
W_t costs T·N·M·B whatever the graph (aifb: 90 types × 8,285 nodes, 13× the flops of its 58,086
lookups; the gradients the same). On dense input the combination stays: forming W_t is T·K·M·B,
small beside the rows' own product. Run only for backends with the kernels
(``Capabilities.bases_per_lookup``); the numbers are the same up to float rounding.
"""
from __future__ import annotations

from ..ir import Program
from .rewrite import gathered_identity, new_op, producers, remove_dead_forward, require_forward_only


def combine_bases_per_lookup(program: Program) -> int:
    """Rewrite in place; returns the number of lookups rewritten."""
    require_forward_only(program, "combine_bases_per_lookup")
    prod = producers(program)
    count = 0
    for pos, op in enumerate(program.forward):
        if op.opcode != "typed_linear" or not gathered_identity(program, op.inputs[0], prod):
            continue
        combine = prod.get(op.inputs[1].id)
        if combine is None or combine.opcode != "basis_combine":
            continue
        a, v = combine.inputs
        program.forward[pos] = new_op(program, "typed_linear_bases", [op.inputs[0], a, v], {}, op.loc,
                                      output=op.output)
        count += 1
    if count:
        remove_dead_forward(program)      # the combination, when nothing else reads it
    return count

