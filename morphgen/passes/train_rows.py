"""Which gradients are zero outside the training rows (an analysis of the backward).

The cross entropy averages over the training rows only, so its gradient is zero on every other
row, and so is whatever a row-wise op makes of it (the backward of a dropout or an activation,
a constant scale, a product with a weight).  A weight gradient ``X^T G`` or a bias gradient
``row_sum(G)`` of such a ``G`` needs the training rows alone: SGC's only product, the last
product of SAGE's self term, of GIN's MLP or of GCNII's classifier.  On the planetoid-style
splits that is a few per cent of the rows (cora 140 of 2,708; the synthetic arxiv shape 800 of
169,343).  An aggregation mixes rows, so what goes through one is never counted.

The result is a hint: a backend that computes all rows gets the same numbers.
"""
from __future__ import annotations

from ..ir import Program

# Ops whose result row r depends only on row r of their first input, and is zero where it is.
_ROW_WISE_OF_FIRST = ("dropout_grad", "act_grad", "scale", "neg")


def train_row_values(program: Program) -> frozenset:
    """Ids of the node values of the backward that are zero on every row outside the training set."""
    zero_elsewhere: set = set()
    for op in program.backward:
        out = op.output
        if out is None or out.assoc != "node":
            continue
        ins = op.inputs
        if op.opcode == "cross_entropy_grad":
            zero_elsewhere.add(out.id)
        elif op.opcode in _ROW_WISE_OF_FIRST and ins[0].id in zero_elsewhere:
            zero_elsewhere.add(out.id)
        elif op.opcode == "matmul_nt" and ins[0].id in zero_elsewhere:    # G W^T: row by row
            zero_elsewhere.add(out.id)
        elif op.opcode in ("add", "sub") and all(v.id in zero_elsewhere for v in ins):
            zero_elsewhere.add(out.id)
    return frozenset(zero_elsewhere)
