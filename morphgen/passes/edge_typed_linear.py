"""Typed linear of gathered node rows without per-edge copies (Hector's compact materialisation).

    typed_linear(gather(x, end), W)  ->  edge_typed_linear(x, W, end, layout)      W per edge type

The gather writes an E x K copy of x that the product reads once and the weight gradient again
(R-GAT on acm_heco: 34,852 edges x 3,864 features, 540 MB per end). The fused op reads x's rows
where they are, in one of two layouts: ``edge``, one product per edge; ``compact``, one per
distinct (node, edge type) pair at that end, copied to the pair's edges (acm_heco's source ends:
2.3x fewer rows than edges). ``auto`` picks per op with ``prefer_compact``'s cost model from the
graph's pair counts. Featureless rows are left alone: their typed linear is already a lookup of
W's rows. Run only for backends with the kernels (``Capabilities.edge_typed_linear``); the numbers
are the same up to float rounding.
"""
from __future__ import annotations

from typing import Optional

from ..ir import IRError, Program
from ..ir_ops import EDGE_TYPED_LAYOUTS, blocks_of
from .rewrite import concrete, gathered_identity, new_op, producers, remove_dead_forward, require_forward_only

LAYOUT_CHOICES = ("auto",) + EDGE_TYPED_LAYOUTS

# Rates the cost model weighs flops and bytes with: a product of gathered rows and the row
# copies around it, as the OpenMP kernels reach them on a 2-core AVX-512 machine (--profile).
# Only their ratio matters, and the pick only where the two costs are close.
GFLOPS = 100.0
GBYTES = 20.0


def prefer_compact(pairs: int, edges: int, k: int, m: int) -> bool:
    """Whether products of the ``pairs`` distinct (node, type) rows cost less than a product per
    edge. Both layouts run the same kernels: rows gathered from x, one product per row, the
    products copied to the edges and the edges' gradients summed back into rows. Compact saves
    (edges - pairs) rows of 2KM flops and K + M floats; per edge it walks a list of the pair's
    edges where the edge layout has one edge per row, weighed as one more M-wide row moved. The
    weight is set from measurements (docs/benchmarks.md, `morphgen bench-edge-layouts`): HGT's
    64 x 64 products gain from compact rows at 77% distinct pairs and lose about 5% at 92%."""
    per_row = 2.0 * k * m / GFLOPS + 4.0 * (k + m) / GBYTES
    per_edge = 4.0 * m / GBYTES
    return (edges - pairs) * per_row > edges * per_edge


def fuse_gathered_typed_linear(program: Program, layout: str = "auto", pairs: Optional[dict] = None) -> int:
    """Rewrite in place; returns the number of typed linears rewritten.

    ``pairs``: {"src": distinct (source, type) pairs, "dst": the same at destinations, "edges": E}
    of the graph, for ``layout="auto"``; without it (or with symbolic widths) auto is compact,
    whose extra cost over per-edge products is one M-wide row per edge at most."""
    require_forward_only(program, "fuse_gathered_typed_linear")
    if layout not in LAYOUT_CHOICES:
        raise IRError(f"edge typed linear layout must be one of {', '.join(LAYOUT_CHOICES)}, got {layout!r}")
    prod = producers(program)
    count = 0
    for pos, op in enumerate(program.forward):
        rows, w = op.inputs[:2] if op.opcode == "typed_linear" else (None, None)
        gather = prod.get(rows.id) if rows is not None else None
        if (gather is None or gather.opcode != "gather" or w.domain != "etype"
                or gathered_identity(program, rows, prod)):
            continue
        end = gather.attrs["end"]
        blocks = blocks_of(op)
        program.forward[pos] = new_op(program, "edge_typed_linear", [gather.inputs[0], w],
                                      {"end": end, "layout": _resolve(layout, pairs, end, w, blocks),
                                       **({"blocks": blocks} if blocks != 1 else {})}, op.loc,
                                      output=op.output)
        count += 1
    if count:
        remove_dead_forward(program)      # the gathers, when nothing else reads them
    return count


def _resolve(layout: str, pairs: Optional[dict], end: str, w, blocks: int = 1) -> str:
    k, m = concrete(w.shape[1]), concrete(w.shape[2])
    if layout != "auto":
        return layout
    if pairs is None or k is None or m is None:
        return "compact"
    # B diagonal blocks: a row's product is B (K/B x M) blocks, its output B*M wide
    return "compact" if prefer_compact(pairs[end], pairs["edges"], k // blocks, m * blocks) else "edge"
