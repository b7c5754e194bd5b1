"""Middle-end passes over the IR, one module per pass.

Forward rewrites (run before autodiff; each keeps numerics up to float rounding):
``sink_gathers``, ``eliminate_common_subexpressions`` (and again after the others),
``fold_edge_aggregations``, ``fold_edge_normalisation``, ``reorder_linear_aggregate``, ``fold_self_terms``,
``fold_node_scales``,
``split_concat_linear``,
``reorder_linear_operators``,
for backends with their kernels ``combine_bases_per_lookup`` and ``fuse_gathered_typed_linear``,
``hoist_graph_constants`` and, for dense input features, ``hoist_invariant_aggregation``.
Analyses (after autodiff): ``annotate_fusion`` and ``analyse_liveness``; the backends ask
``train_rows.train_row_values`` which gradients are zero outside the training rows.
"""
from __future__ import annotations

from ..autodiff import differentiate
from ..ir import Program
from .basis_lookup import combine_bases_per_lookup
from .common_subexpressions import eliminate_common_subexpressions
from .concat_split import split_concat_linear
from .edge_aggregate import fold_edge_aggregations, fold_edge_normalisation, fold_node_scales, fold_self_terms
from .edge_typed_linear import fuse_gathered_typed_linear
from .fusion import FusionGroup, annotate_fusion
from .hoist_invariant import hoist_graph_constants, hoist_invariant_aggregation
from .linear_reorder import reorder_linear_operators
from .liveness import Liveness, analyse_liveness, lifetimes
from .reorder_aggregate import reorder_linear_aggregate
from .rewrite import remove_dead_forward
from .sink_gathers import sink_gathers

__all__ = ["run_default", "sink_gathers", "eliminate_common_subexpressions", "fold_edge_aggregations", "fold_edge_normalisation", "fold_self_terms", "fold_node_scales", "reorder_linear_aggregate", "split_concat_linear",
           "reorder_linear_operators", "combine_bases_per_lookup", "fuse_gathered_typed_linear",
           "hoist_graph_constants", "hoist_invariant_aggregation", "annotate_fusion",
           "analyse_liveness", "lifetimes", "FusionGroup", "Liveness", "remove_dead_forward"]


def run_default(program: Program, num_nodes: int = None, num_edges: int = None,
                dense_features: bool = False, bases_per_lookup: bool = False,
                edge_typed_layout: str = None, edge_pairs: dict = None, graph_constants: bool = False) -> dict:
    """The default pipeline, in place: rewrites, autodiff, fusion annotation, liveness.

    An existing backward is discarded and regenerated after the rewrites.  The
    width-dependent passes run only when every size is bound; aggregations of the input
    features are hoisted out of the epoch only when the backend will hold them dense
    (``dense_features``); featureless lookups of basis-decomposed weights read the bases
    directly when the backend has those kernels (``bases_per_lookup``); what the forward computes
    from the graph alone is computed once when the backend can (``graph_constants``); typed linears of gathered
    node rows read the rows in place when ``edge_typed_layout`` is set (auto: picked from the
    graph's ``edge_pairs`` counts, passes/edge_typed_linear.py).
    Liveness runs when ``num_nodes`` and ``num_edges`` are given.
    Returns a report of what each pass did.
    """
    program.backward, program.grads = [], {}
    report = {}
    report["sink_gathers"] = sink_gathers(program, num_nodes, num_edges)
    report["common_subexpressions"] = eliminate_common_subexpressions(program)   # a sunk product may be the self term
    report["fold_edge_aggregations"] = fold_edge_aggregations(program)
    report["fold_edge_normalisation"] = fold_edge_normalisation(program)
    if not program.symbols():
        report["reorder_linear_aggregate"] = reorder_linear_aggregate(program)
    report["fold_self_terms"] = fold_self_terms(program)
    report["fold_node_scales"] = fold_node_scales(program)
    if report["fold_node_scales"] and not program.symbols():    # the folded sums may now move past a linear
        report["reorder_linear_aggregate"] += reorder_linear_aggregate(program)
    report["split_concat_linear"] = split_concat_linear(program)
    report["reorder_linear_operators"] = reorder_linear_operators(program)
    if bases_per_lookup:
        report["combine_bases_per_lookup"] = combine_bases_per_lookup(program)
    if edge_typed_layout is not None:
        report["fuse_gathered_typed_linear"] = fuse_gathered_typed_linear(program, edge_typed_layout, edge_pairs)
    report["common_subexpressions"] += eliminate_common_subexpressions(program)
    report["dead_forward_ops"] = remove_dead_forward(program)
    if graph_constants:
        report["hoist_graph_constants"] = hoist_graph_constants(program)
    if dense_features and not program.symbols():
        report["hoist_invariant_aggregation"] = hoist_invariant_aggregation(program)
    differentiate(program)
    report["fusion"] = annotate_fusion(program)
    if num_nodes is not None and num_edges is not None:
        report["liveness"] = analyse_liveness(program, num_nodes, num_edges)
    return report
