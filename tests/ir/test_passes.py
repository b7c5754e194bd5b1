"""Each pass keeps numerics (interpreter loss and gradients before == after) and does what
it claims structurally."""
import numpy as np
import pytest

from morphgen.autodiff import differentiate
from morphgen.interp import Interpreter
from morphgen.ir import IRBug, IRError, Param, Program
from morphgen.ir_ops import Builder
from morphgen.passes import (analyse_liveness, annotate_fusion, combine_bases_per_lookup, fuse_gathered_typed_linear,
                             reorder_linear_aggregate, reorder_linear_operators, run_default, split_concat_linear)
from morphgen.passes.edge_typed_linear import prefer_compact

from . import models
from .helpers import perturbed_params, random_data, random_graph


def _bound(factory, **sizes):
    prog = factory()
    table = dict({"F": 5, "C": 3, "etypes": 3, "ntypes": 2, "N": 10}, **sizes)
    return prog.bind({s: table[s] for s in prog.symbols()})


def _evaluate(prog, params, weighted=False):
    g = random_graph(10, 26, seed=11, etypes=3, ntypes=2, weighted=weighted)
    x, labels, mask = random_data(g, None if prog.featureless else prog.inputs["features"].width, 3)
    if not prog.backward:
        differentiate(prog)
    return Interpreter(prog, g, x, labels, mask, seed=3).run(params)


def _assert_same_numerics(factory, transform, sizes=None, weighted=False):
    """Run the program, transform a fresh copy, run again: same loss and gradients."""
    sizes = sizes or {}
    before = _bound(factory, **sizes)
    params = perturbed_params(before)
    loss0, grads0, _ = _evaluate(before, params, weighted)
    after = _bound(factory, **sizes)
    result = transform(after)
    loss1, grads1, _ = _evaluate(after, params, weighted)
    assert loss1 == pytest.approx(loss0, rel=1e-12, abs=1e-12)
    assert grads1.keys() == grads0.keys()
    for k in grads0:
        np.testing.assert_allclose(grads1[k], grads0[k], rtol=1e-9, atol=1e-12, err_msg=k)
    return after, result


def _opcodes(prog):
    return [op.opcode for op in prog.forward]


# -- (a) linear before aggregate ----------------------------------------------------------
def test_gcn_narrow_input_aggregates_first():
    prog, n = _assert_same_numerics(models.gcn, reorder_linear_aggregate, {"F": 5})
    assert n == 1                                   # only layer 0 (5 -> 16) widens
    first = next(op for op in prog.forward if op.opcode == "aggregate")
    assert first.inputs[0].width == 5 and first.attrs["norm"] == "gcn"


def test_gcn_wide_input_keeps_linear_first():
    prog, n = _assert_same_numerics(models.gcn, reorder_linear_aggregate, {"F": 40})
    assert n == 0
    assert all(op.inputs[0].width == 16 or op.inputs[0].width == 3
               for op in prog.forward if op.opcode == "aggregate")


def test_sage_wide_input_moves_linear_before_mean():
    prog, n = _assert_same_numerics(lambda: models.sage("mean"), reorder_linear_aggregate, {"F": 40})
    assert n == 2                                   # 40 -> 16 and 16 -> 3 both narrow
    assert all(op.inputs[0].width < 40 for op in prog.forward if op.opcode == "aggregate")


def test_gin_wide_input_multiplies_before_its_sum():
    prog, n = _assert_same_numerics(models.gin, reorder_linear_aggregate, {"F": 40})
    assert n == 2                                   # 40 -> 16 and 16 -> 3 both narrow
    first = prog.forward[0]
    assert first.opcode == "linear" and first.inputs[0] is prog.inputs["features"]
    # the features are read by the product alone: a sparse feature path stays available
    assert [op.opcode for op in prog.forward if prog.inputs["features"] in op.inputs] == ["linear"]
    agg = next(op for op in prog.forward if op.opcode == "aggregate")
    assert agg.inputs[0] is first.output


def test_gin_narrow_input_keeps_its_sum_first():
    prog, n = _assert_same_numerics(models.gin, reorder_linear_aggregate, {"F": 5})
    assert n == 1                                   # only 16 -> 3 narrows; 5 -> 16 widens
    assert prog.forward[0].opcode == "aggregate" and prog.forward[0].inputs[0] is prog.inputs["features"]


def test_a_hop_read_by_several_products_moves_them_all_when_they_are_narrower():
    # TAGConv: hop 1 feeds W1 and hop 2; 8 + 8 < 40 columns, so both products run first and
    # every aggregation is 8 wide; the features are read by products alone
    prog, n = _assert_same_numerics(lambda: models.tag(hidden=8), reorder_linear_aggregate, {"F": 40})
    assert n == 2
    assert [op.inputs[0].width for op in prog.forward if op.opcode == "aggregate"] == [8, 8, 8]
    assert {op.opcode for op in prog.forward if prog.inputs["features"] in op.inputs} == {"linear"}


def test_a_hop_stays_first_when_its_products_together_are_wider():
    # 24 + 24 columns > 40: one aggregation of 40 costs less than two of 24
    prog, n = _assert_same_numerics(lambda: models.tag(hidden=24), reorder_linear_aggregate, {"F": 40})
    assert n == 1                                   # the second hop (one reader, 24 < 40) moves
    assert sorted(op.inputs[0].width for op in prog.forward if op.opcode == "aggregate") == [24, 40]


def test_a_hop_with_a_reader_other_than_a_product_stays():
    prog, _ = _assert_same_numerics(lambda: models.tag(hidden=8, extra_reader=True),
                                    reorder_linear_aggregate, {"F": 40})
    assert 40 in [op.inputs[0].width for op in prog.forward if op.opcode == "aggregate"]


def test_sage_max_is_never_reordered():
    _, n = _assert_same_numerics(lambda: models.sage("max"), reorder_linear_aggregate, {"F": 40})
    assert n == 0


def test_featureless_identity_is_never_aggregated():
    prog, n = _assert_same_numerics(lambda: models.gcn(featureless=True, dropout=0.0),
                                    reorder_linear_aggregate, {"N": 10})
    assert n == 0
    assert prog.forward[0].opcode == "linear"


# -- featureless lookups of basis-decomposed weights ----------------------------------------
def test_featureless_lookups_read_the_bases():
    """Both R-GCN layers' lookups: the first (featureless rows) reads the bases directly and its
    W_r is never formed; the second (stored rows) keeps the combination. Same loss, same gradients."""
    prog, n = _assert_same_numerics(lambda: models.rgcn(bases=2), combine_bases_per_lookup)
    assert n == 1
    assert _opcodes(prog).count("basis_combine") == 1 and _opcodes(prog).count("typed_linear_bases") == 1
    differentiate(prog)
    backward = [op.opcode for op in prog.backward]
    assert {"typed_linear_bases_coef_grad", "typed_linear_bases_grad"} <= set(backward)
    assert backward.count("basis_coef_grad") == 1      # the second layer's only


def test_bases_are_combined_when_the_input_has_features():
    prog, n = _assert_same_numerics(lambda: models.rgcn(bases=2, featureless=False), combine_bases_per_lookup)
    assert n == 0 and "typed_linear_bases" not in _opcodes(prog)


def test_only_backends_with_the_kernels_get_the_rewrite():
    without = _bound(lambda: models.rgcn(bases=2))
    assert "combine_bases_per_lookup" not in run_default(without)
    assert "typed_linear_bases" not in _opcodes(without)
    with_kernels = _bound(lambda: models.rgcn(bases=2))
    assert run_default(with_kernels, bases_per_lookup=True)["combine_bases_per_lookup"] == 1


@pytest.mark.parametrize("layout", ["compact", "edge"])
@pytest.mark.parametrize("model", ["rgat", "hgt"])
def test_gathered_typed_linear_reads_node_rows_in_place(model, layout):
    """R-GAT's two projections (source and destination rows) and HGT's key and message
    transforms: no gather is left before a typed linear, loss and gradients unchanged."""
    prog, n = _assert_same_numerics(models.ALL[model],
                                    lambda p: fuse_gathered_typed_linear(p, layout))
    assert n == 2
    fused = [op for op in prog.forward if op.opcode == "edge_typed_linear"]
    assert {op.attrs["layout"] for op in fused} == {layout}
    producer = {op.output.id: op.opcode for op in prog.forward}
    assert all(producer.get(op.inputs[0].id) != "gather" for op in prog.forward if op.opcode == "typed_linear")
    differentiate(prog)
    backward = {op.opcode for op in prog.backward}
    # R-GAT's rows are the input features (no gradient); HGT's are its keys and values
    expected = {"edge_typed_linear_weight_grad"} | ({"edge_typed_linear_input_grad"} if model == "hgt" else set())
    assert expected <= backward


def test_gathered_typed_linear_of_features_needs_no_input_gradient():
    prog = _bound(models.rgat)
    run_default(prog, edge_typed_layout="auto")
    backward = {op.opcode for op in prog.backward}
    assert "edge_typed_linear_weight_grad" in backward and "edge_typed_linear_input_grad" not in backward


def test_featureless_lookups_are_not_fused():
    prog, n = _assert_same_numerics(models.rgcn, fuse_gathered_typed_linear)
    assert n == 1           # the second layer's hidden rows; the first reads rows of W_r already
    assert _opcodes(prog).count("typed_linear") == 1


def test_gathered_typed_linear_only_for_backends_with_the_kernels():
    without = _bound(models.rgat)
    assert "fuse_gathered_typed_linear" not in run_default(without)
    assert "edge_typed_linear" not in _opcodes(without)


def test_auto_layout_follows_the_pair_counts():
    """Compact where few edges share no (node, type) pair with another, per edge where every
    edge is its own pair (then compact only adds the copies); each end decides for itself."""
    prog = _bound(models.rgat, F=64)
    fuse_gathered_typed_linear(prog, "auto", {"src": 30, "dst": 100, "edges": 100})
    layouts = {op.attrs["end"]: op.attrs["layout"] for op in prog.forward if op.opcode == "edge_typed_linear"}
    assert layouts == {"src": "compact", "dst": "edge"}


def test_prefer_compact_weighs_the_copies_against_the_rows_saved():
    assert prefer_compact(50, 100, 64, 64) and not prefer_compact(100, 100, 64, 64)
    assert not prefer_compact(95, 100, 4, 4)      # narrow rows: the saving is smaller than the copies
    assert prefer_compact(95, 100, 3864, 16)      # wide input rows: 5% fewer products pay for them


def test_gathered_typed_linear_rejects_an_unknown_layout():
    with pytest.raises(IRError, match="layout must be one of"):
        fuse_gathered_typed_linear(_bound(models.rgat), "rows")


def test_reorder_needs_bound_sizes():
    with pytest.raises(IRBug, match="bound sizes"):
        reorder_linear_aggregate(models.gcn())


def test_rewrites_refuse_a_differentiated_program():
    prog = _bound(models.gcn)
    differentiate(prog)
    with pytest.raises(IRBug, match="before autodiff"):
        reorder_linear_aggregate(prog)


# -- (b) concat split -----------------------------------------------------------------------
def test_concat_split_uses_weight_views():
    prog, n = _assert_same_numerics(models.rgat, split_concat_linear)
    assert n == 1
    assert "concat" not in _opcodes(prog)
    views = [op for op in prog.forward if op.opcode == "param_slice"]
    assert [(v.attrs["start"], v.attrs["stop"]) for v in views] == [(0, 8), (8, 13)]
    assert all(v.inputs[0] is prog.param("O_cat").value for v in views)
    assert any(op.opcode == "row_concat" for op in prog.backward)


def test_concat_split_keeps_numerics_when_unbound():
    """Slices with symbolic bounds bind later and still agree."""
    prog = models.rgat()
    split_concat_linear(prog)
    starts = [op.attrs["start"] for op in prog.forward if op.opcode == "param_slice"]
    assert starts == [0, 8]
    prog.bind({"F": 5, "C": 3, "etypes": 3})
    ref = _bound(models.rgat)
    params = perturbed_params(ref)
    np.testing.assert_allclose(_evaluate(prog, params)[0], _evaluate(ref, params)[0], rtol=1e-12)


# -- (c) Hector linear operator reordering --------------------------------------------------
def test_typed_attention_folds_into_weights():
    prog, n = _assert_same_numerics(models.rgat, reorder_linear_operators)
    # zd (only read by its dot) disappears; z stays for the messages but K=5 < M=8 folds too
    assert n == 2
    typed = [op for op in prog.forward if op.opcode == "typed_linear"]
    assert len(typed) == 1 and typed[0].inputs[1] is prog.param("W").value
    assert sum(op.opcode == "matvec" for op in prog.forward) == 2
    dots = [op for op in prog.forward if op.opcode == "dot"]
    assert all(op.inputs[0].width == 5 for op in dots)


def test_typed_attention_wide_input_folds_only_dead_projection():
    prog, n = _assert_same_numerics(models.rgat, reorder_linear_operators, {"F": 20})
    assert n == 1
    assert sum(op.opcode == "typed_linear" for op in prog.forward) == 1


def test_gat_attention_vectors_fold_when_input_is_narrow():
    prog, n = _assert_same_numerics(models.gat, reorder_linear_operators, {"F": 5})
    assert n == 2                         # layer 0 (5 -> 8): both attention projections
    assert sum(op.opcode == "linear" and op.inputs[0].assoc == "param" for op in prog.forward) == 2


def test_gat_wide_input_is_left_alone():
    _, n = _assert_same_numerics(models.gat, reorder_linear_operators, {"F": 40, "C": 3})
    assert n == 0


def test_untyped_dot_with_param_vector():
    def factory():
        m = models.ModelBuilder("dotvec")
        z = m.emit("linear", m.x, m.param("W", ("F", 6)))
        s = m.emit("dot", z, m.param("a", (6,)))
        out = m.emit("aggregate", m.emit("mul", m.x, s), reduce="sum")
        return m.finish(m.emit("linear", out, m.param("O", ("F", "C"))))
    prog, n = _assert_same_numerics(factory, reorder_linear_operators)
    assert n == 1 and "matvec" in _opcodes(prog)


# -- (d) fusion candidates ---------------------------------------------------------------
def test_gcn_epilogue_groups():
    prog = _bound(models.gcn)
    differentiate(prog)
    groups = annotate_fusion(prog)
    chains = [[op.opcode for op in g.ops] for g in groups if g.kind == "aggregate_epilogue"]
    assert chains == [["aggregate", "bias_add", "relu"], ["aggregate", "bias_add"]]
    relu_group = next(g for g in groups if len(g.ops) == 3)
    # relu's backward reads its output, not the aggregate's: nothing else must be kept
    assert relu_group.keep == []


def test_hoisted_first_layer_ends_in_a_linear_epilogue():
    prog = _bound(lambda: models.gcn(dropout=0.0), F=40)
    run_default(prog, dense_features=True)
    chains = [[op.opcode for op in g.ops] for g in prog.fusion if g.kind == "linear_epilogue"]
    assert chains == [["linear", "bias_add", "relu"]]
    group = next(g for g in prog.fusion if g.kind == "linear_epilogue")
    assert group.ops[0].inputs[0] is prog.invariant[0].output and group.keep == []


def test_sage_sum_of_products_ends_in_a_binary_epilogue():
    prog = _bound(models.sage)
    differentiate(prog)
    groups = annotate_fusion(prog)
    chains = [[op.opcode for op in g.ops] for g in groups if g.kind == "binary_epilogue"]
    assert chains == [["add", "bias_add", "relu"], ["add", "bias_add"]]
    # the backward of add reads nothing and relu's reads its own output: nothing kept
    assert all(g.keep == [] for g in groups if g.kind == "binary_epilogue")


def test_binary_epilogue_needs_a_node_value_read_only_by_its_tail():
    m = models.ModelBuilder("edge_add")
    z = m.emit("linear", m.x, m.param("W", ("F", 4)))
    e = m.emit("add", m.emit("gather", z, end="src"), m.emit("gather", z, end="dst"))
    msg = m.emit("relu", e)                               # edge-wise: the edge chain's business
    h = m.emit("scatter", msg, reduce="sum", end="dst")
    s = m.emit("add", h, z)
    t = m.emit("relu", s)
    out = m.emit("add", t, s)                             # s has a second reader: no fusion
    prog = _bound(lambda: m.finish(m.emit("linear", out, m.param("O", (4, "C")))))
    differentiate(prog)
    assert not [g for g in annotate_fusion(prog) if g.kind == "binary_epilogue"]


def test_gat_edge_chain_feeds_scatter():
    prog = _bound(models.gat)
    differentiate(prog)
    groups = annotate_fusion(prog)
    chains = [g for g in groups if g.kind == "edge_chain"]
    assert len(chains) == 2
    ops = [op.opcode for op in chains[0].ops]
    assert ops[-1] == "scatter" and "mul" in ops and "gather" in ops
    assert "edge_softmax" not in ops              # a segment reduction of its own
    # the backward of mul reads the gathered z and alpha: the chain must keep them
    assert chains[0].keep


def test_fusion_respects_other_readers():
    prog = _bound(models.gin)
    differentiate(prog)
    groups = annotate_fusion(prog)
    # aggregate(h) feeds add(h, .) which is not an epilogue op: no group starts there
    assert not any(g.ops[0].opcode == "aggregate" for g in groups)


# -- (e) liveness -------------------------------------------------------------------------
def _tiny_program():
    prog = Program("tiny")
    x = prog.new_value("node", (4,), name="x")
    y = prog.new_value("node", (1,), "i64", name="y")
    prog.inputs = {"features": x, "labels": y}
    w = prog.new_value("param", (4, 2), name="W")
    prog.params.append(Param("W", w))
    b = Builder(prog)
    z = b.emit("linear", x, w)
    prog.logits, prog.loss = z, b.emit("cross_entropy", z, y)
    differentiate(prog)
    return prog


def test_liveness_hand_computed():
    prog = _tiny_program()
    live = analyse_liveness(prog, num_nodes=10, num_edges=0)
    # steps: 0 z=linear, 1 loss, 2 d=ce_grad(z), 3 dW=matmul_tn(x, d); end = 4
    z, loss = prog.logits, prog.loss
    d = prog.backward[0].output
    dw = prog.grads["W"]
    assert live.intervals[z.id] == (0, 4) and live.intervals[d.id] == (2, 3)
    assert live.intervals[dw.id] == (3, 4) and live.intervals[loss.id] == (1, 4)
    assert live.peak_bytes == 160 + 80 + 80 + 4 + 80 + 32 and live.peak_step == 3
    assert live.param_bytes == 32 and live.optimizer_bytes == 64


def test_saved_for_backward_stays_live():
    prog = _bound(models.gcn)
    differentiate(prog)
    live = analyse_liveness(prog, 100, 500)
    dropped = prog.forward[0].output                # read by layer 0's weight gradient
    assert live.intervals[dropped.id][1] >= len(prog.forward) + len(prog.backward) - 1
    assert live.peak_step >= len(prog.forward)      # the peak is in the backward
    bigger = analyse_liveness(prog, 200, 1000)
    assert bigger.peak_bytes > live.peak_bytes


def test_liveness_counts_argmax_and_not_identity():
    prog = _bound(lambda: models.sage("max"))
    differentiate(prog)
    live = analyse_liveness(prog, 10, 20)
    keys = [k for k in live.intervals if str(k).startswith("argmax:")]
    assert keys
    for key in keys:           # the backends' index buffers hold one int64 per element
        value = next(v for v in prog.all_values() if v.id == int(key.split(":")[1]))
        assert live.sizes[key] == 8 * 10 * value.width
    fl = _bound(models.rgcn)
    differentiate(fl)
    assert fl.inputs["features"].id not in analyse_liveness(fl, 10, 20).sizes


# -- default pipeline ---------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(models.ALL))
def test_run_default_keeps_numerics(name):
    prog, report = _assert_same_numerics(models.ALL[name], lambda p: run_default(p, 10, 26))
    assert report["liveness"].peak_bytes > 0
    prog.validate()


# -- gather -> scatter folded into one aggregation ------------------------------------------
EDGE_REDUCTIONS = """
function m(Graph g, propNode<float[F]> x, propNode<int[C]> y) {
    weight<float[F][C]> W = glorot;
    propNode<float[F]> a, b, c, d, q;
    propNode<float[C]> out;
    gnn.optimizer("sgd", lr = 0.1);
    for (int epoch = 0; epoch < 2; epoch++) {
        forall (v in g.nodes()) {
            v.a = Sum(u in g.neighbors(v): u.x);
            v.b = Mean(e in v.incoming_edges(): e.src.a);
            v.c = Max(u in g.neighbors(v): u.b);
            v.d = Sum(e in v.outgoing_edges(): e.dst.c);
            v.q = Mean(e in v.outgoing_edges(): e.dst.d);
            v.out = (v.q + v.a) * W;
        }
        gnn.loss(out, "cross_entropy");
        gnn.backPropagation();
        gnn.optimizerStep();
    }
}
"""


def test_gather_then_scatter_becomes_one_aggregation():
    from morphgen.frontend import compile_source
    from morphgen.passes import fold_edge_aggregations
    prog, n = _assert_same_numerics(lambda: compile_source(EDGE_REDUCTIONS, "edges.mp"), fold_edge_aggregations)
    # sum, mean and max over in-edges and a sum over out-edges fold; a mean over out-edges has no
    # aggregate form (an aggregate's mean divides by the in-degree) and keeps its edge tensor
    assert n == 4
    aggregates = [(op.attrs["reduce"], op.attrs["direction"]) for op in prog.forward if op.opcode == "aggregate"]
    assert aggregates == [("sum", "in"), ("mean", "in"), ("max", "in"), ("sum", "out")]
    assert _opcodes(prog).count("gather") == 1 and _opcodes(prog).count("scatter") == 1


def test_own_row_plus_neighbour_sum_becomes_one_aggregation_with_self_loops():
    """GIN's x + Sum(neighbours) is one aggregate with self loops: same loss and gradients."""
    from morphgen.passes import fold_self_terms
    prog, n = _assert_same_numerics(models.gin, fold_self_terms, {"F": 5})
    assert n == 2                                        # one per layer
    aggregates = [op for op in prog.forward if op.opcode == "aggregate"]
    assert len(aggregates) == 2 and all(op.attrs["self_loops"] for op in aggregates)
    assert "add" not in _opcodes(prog)


def test_self_term_folds_only_a_plain_sum_of_the_same_rows_read_once():
    """A mean, a GCN-normalised sum, a sum of other rows, or an aggregate read elsewhere too are
    not the same as a self loop and stay as they are."""
    from morphgen.passes import fold_self_terms
    m = models.ModelBuilder("not_gin")
    w = m.param("W", ("F", "C"))
    other = m.emit("relu", m.x)
    parts = [m.emit("add", m.x, m.emit("aggregate", m.x, reduce="mean")),
             m.emit("add", m.x, m.emit("aggregate", m.x, reduce="sum", norm="gcn")),
             m.emit("add", other, m.emit("aggregate", m.x, reduce="sum"))]
    shared = m.emit("aggregate", m.x, reduce="sum")
    parts += [m.emit("add", m.x, shared), shared]
    total = parts[0]
    for p in parts[1:]:
        total = m.emit("add", total, p)
    prog = _bound(lambda: m.finish(m.emit("linear", total, w)), F=4)
    assert fold_self_terms(prog) == 0


# -- a normalisation written out folded into the aggregation ---------------------------------
def _fold_all(prog):
    from morphgen.passes import fold_edge_aggregations, fold_node_scales, fold_self_terms
    return fold_edge_aggregations(prog), fold_self_terms(prog), fold_node_scales(prog)


@pytest.mark.parametrize("weighted", [False, True])
def test_written_out_gcn_becomes_one_scaled_aggregation_per_layer(weighted):
    """s * (Sum(e: e.src.z * s [* w]) + z * s): the weighted messages fold into an aggregate that
    reads the weights, the own row into its self loop, the two row scales into norm=node_scale."""
    prog, counts = _assert_same_numerics(lambda: models.gcn_written_out(weighted=weighted), _fold_all,
                                         weighted=weighted)
    assert counts == (2, 2, 2)
    aggregates = [op for op in prog.forward if op.opcode == "aggregate"]
    assert len(aggregates) == 2
    for op in aggregates:
        assert op.attrs["norm"] == "node_scale" and op.attrs["self_loops"]
        assert op.inputs[-1].id == aggregates[0].inputs[-1].id            # the one scale s
        assert len(op.inputs) == (3 if weighted else 2)
    assert not {"gather", "add"} & set(_opcodes(prog))
    # what remains of the products: none around the aggregations (the scale's own ops stay)
    assert _opcodes(prog).count("mul") == 0


def test_run_default_folds_the_written_out_weighted_gcn():
    prog, report = _assert_same_numerics(lambda: models.gcn_written_out(weighted=True),
                                         lambda p: run_default(p, 10, 26), weighted=True)
    assert report["fold_node_scales"] == 2
    prog.validate()


def _scaled_sum(m, rows, outer, inner=None, reduce="sum"):
    inner = outer if inner is None else inner
    return m.emit("mul", m.emit("aggregate", m.emit("mul", rows, inner), reduce=reduce), outer)


def test_node_scales_fold_only_the_same_constant_scale_around_a_plain_sum():
    """Different scales at the two ends, a scale computed from a weight (it would need a
    gradient), a mean, or a sum read elsewhere too are left as they are."""
    from morphgen.passes import fold_node_scales
    m = models.ModelBuilder("not_scaled")
    w = m.param("W", ("F", "C"))
    s = m.emit("rsqrt", m.emit("shift", m.emit("graph_scalar", kind="in_degree"), c=1.0))
    t = m.emit("rsqrt", m.emit("shift", m.emit("graph_scalar", kind="out_degree"), c=1.0))
    learned = m.emit("sigmoid", m.emit("linear", m.x, m.param("Ws", ("F", 1))))
    parts = [_scaled_sum(m, m.x, s, t), _scaled_sum(m, m.x, learned), _scaled_sum(m, m.x, s, reduce="mean")]
    shared = m.emit("aggregate", m.emit("mul", m.x, s), reduce="sum")
    parts += [m.emit("mul", shared, s), shared]
    total = parts[0]
    for p in parts[1:]:
        total = m.emit("add", total, p)
    prog = _bound(lambda: m.finish(m.emit("linear", total, w)), F=4)
    assert fold_node_scales(prog) == 0


def test_a_scale_with_other_readers_still_folds():
    """z = y * s read by the sum and by something else: the sum reads y and s; z stays for the other."""
    from morphgen.passes import fold_node_scales

    def build():
        m = models.ModelBuilder("shared_rows")
        s = m.emit("rsqrt", m.emit("graph_scalar", kind="in_degree"))     # rsqrt(0) = 0: zero scales too
        z = m.emit("mul", m.x, s)
        out = m.emit("add", m.emit("mul", m.emit("aggregate", z, reduce="sum", self_loops=True), s), z)
        return m.finish(m.emit("linear", out, m.param("W", ("F", "C"))))
    prog, n = _assert_same_numerics(build, fold_node_scales, {"F": 4})
    assert n == 1
    assert [op.attrs["norm"] for op in prog.forward if op.opcode == "aggregate"] == ["node_scale"]


def test_message_passing_gcn_becomes_one_scaled_aggregation_per_layer():
    """Messages weighed by n_src * n_dst and the own row scaled by n twice (PyG's gcn_norm as a
    program writes it): one aggregate with norm=node_scale and self loops per layer."""
    def fold(prog):
        from morphgen.passes import fold_edge_aggregations, fold_edge_normalisation
        return fold_edge_aggregations(prog), fold_edge_normalisation(prog)
    prog, counts = _assert_same_numerics(models.gcn_message_passing, fold)
    assert counts == (2, 4)
    aggregates = [op for op in prog.forward if op.opcode == "aggregate"]
    assert len(aggregates) == 2
    assert all(op.attrs["norm"] == "node_scale" and op.attrs["self_loops"] and len(op.inputs) == 2
               for op in aggregates)
    assert not {"gather", "add", "mul", "scatter"} & set(_opcodes(prog))


def test_edge_normalisation_folds_only_one_scale_at_both_ends():
    """Coefficients from two scales, a learned scale, or an own row scaled once keep their form
    (the weighted sums still become aggregates: their weights need no gradient)."""
    from morphgen.passes import fold_edge_aggregations, fold_edge_normalisation

    def build():
        m = models.ModelBuilder("not_symmetric")
        s = m.emit("rsqrt", m.emit("shift", m.emit("graph_scalar", kind="in_degree"), c=1.0))
        t = m.emit("rsqrt", m.emit("shift", m.emit("graph_scalar", kind="out_degree"), c=1.0))
        learned = m.emit("sigmoid", m.emit("linear", m.x, m.param("Ws", ("F", 1))))
        parts = []
        for a, b in ((s, t), (learned, learned)):
            c = m.emit("mul", m.emit("gather", a, end="src"), m.emit("gather", b, end="dst"))
            parts.append(m.emit("scatter", m.emit("mul", m.emit("gather", m.x, end="src"), c), reduce="sum", end="dst"))
        c = m.emit("mul", m.emit("gather", s, end="src"), m.emit("gather", s, end="dst"))
        once = m.emit("add", m.emit("scatter", m.emit("mul", m.emit("gather", m.x, end="src"), c), reduce="sum",
                                    end="dst"), m.emit("mul", m.x, s))
        total = m.emit("add", m.emit("add", parts[0], parts[1]), once)
        return m.finish(m.emit("linear", total, m.param("W", ("F", "C"))))
    prog, (edges, folded) = _assert_same_numerics(build, lambda p: (fold_edge_aggregations(p),
                                                                   fold_edge_normalisation(p)), {"F": 4})
    assert edges == 2 and folded == 1          # the learned weights keep their scatter; s at both ends folds
    aggregates = [op for op in prog.forward if op.opcode == "aggregate"]
    assert sorted(op.attrs["norm"] for op in aggregates) == ["node_scale", "none"]
    assert not any(op.attrs["self_loops"] for op in aggregates)
