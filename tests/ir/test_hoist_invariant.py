"""hoist_invariant_aggregation: aggregations of the dense input features leave the epoch;
hoist_graph_constants: so does what the forward computes from the graph alone.

Numerics are the interpreter's (float64): the hoisted program must give the loss and every
gradient of the original, and its gradients must pass the finite-difference check."""
import pytest

from morphgen.autodiff import differentiate
from morphgen.ir import IRBug
from morphgen.passes import hoist_graph_constants, hoist_invariant_aggregation, run_default
from morphgen.passes.hoist_invariant import hoisted_aggregations

from . import models
from .helpers import (assert_same_loss_and_gradients, finite_difference_check, perturbed_params, random_data,
                      random_graph)


def _bound(prog, F=12, C=3):
    return prog.bind({"F": F, "C": C})


def _assert_same_loss_and_gradients(before, after, F, weighted=False):
    g = random_graph(10, 26, seed=11, weighted=weighted)
    assert_same_loss_and_gradients(before, after, g, *random_data(g, F, 3), perturbed_params(before))


def _aggregates(ops):
    return [op for op in ops if op.opcode == "aggregate"]


@pytest.mark.parametrize("norm", ["gcn", "mean"])
def test_first_layer_aggregation_is_computed_once_with_the_same_numerics(norm):
    F = 12
    before = _bound(models.gcn(hidden=4, dropout=0.0, norm=norm), F)
    after = _bound(models.gcn(hidden=4, dropout=0.0, norm=norm), F)
    run_default(before)
    report = run_default(after, dense_features=True)
    assert report["hoist_invariant_aggregation"] == 1
    features = after.inputs["features"]
    (hoisted,) = after.invariant
    assert hoisted.opcode == "aggregate" and hoisted.inputs == [features]
    assert hoisted.output.shape == (F,)
    # the first layer is now linear(P, W): one aggregation less forward and backward per epoch
    assert len(_aggregates(after.forward)) == len(_aggregates(before.forward)) - 1
    assert len(_aggregates(after.backward)) == len(_aggregates(before.backward)) - 1
    assert not any(v.id == features.id for op in after.forward + after.backward for v in op.inputs)
    _assert_same_loss_and_gradients(before, after, F)


def test_hoisted_program_gradients_match_finite_differences():
    prog = _bound(models.gcn(hidden=4, dropout=0.0), 6)
    run_default(prog, dense_features=True)
    assert prog.invariant
    g = random_graph(10, 26, seed=5)
    x, labels, mask = random_data(g, 6, 3)
    finite_difference_check(prog, g, x, labels, mask, perturbed_params(prog))


def test_aggregate_first_layer_is_hoisted_whole():
    """F < hidden: the aggregation already runs on the features; hoisting it is a pure saving."""
    prog = _bound(models.gcn(hidden=16, dropout=0.0), 4)
    run_default(prog, dense_features=True)
    (hoisted,) = prog.invariant
    assert hoisted.inputs == [prog.inputs["features"]]
    assert prog.forward[0].opcode == "linear" and prog.forward[0].inputs[0] is hoisted.output


def test_nothing_is_hoisted_without_dense_features_or_through_a_dropout():
    sparse = _bound(models.gcn(hidden=4, dropout=0.0))
    assert "hoist_invariant_aggregation" not in run_default(sparse)
    assert not sparse.invariant
    dropped = _bound(models.gcn(hidden=4, dropout=0.5))       # dropout on the input: varies per epoch
    assert run_default(dropped, dense_features=True)["hoist_invariant_aggregation"] == 0
    assert not dropped.invariant
    featureless = models.gcn(hidden=4, dropout=0.0, featureless=True).bind({"N": 10, "C": 3})
    assert run_default(featureless, dense_features=True)["hoist_invariant_aggregation"] == 0


def test_not_hoisted_when_the_epochs_do_not_repay_the_wide_aggregation():
    wide = _bound(models.gcn(hidden=4, dropout=0.0), F=200)
    wide.epochs = 10                    # 200 > 2 * 4 * 10: one aggregation at width 200 costs more
    assert run_default(wide, dense_features=True)["hoist_invariant_aggregation"] == 0
    wide = _bound(models.gcn(hidden=4, dropout=0.0), F=200)
    wide.epochs = 25                    # 200 <= 2 * 4 * 25
    assert run_default(wide, dense_features=True)["hoist_invariant_aggregation"] == 1


def test_hoisting_is_a_forward_rewrite():
    prog = _bound(models.gcn(hidden=4, dropout=0.0))
    differentiate(prog)
    with pytest.raises(IRBug, match="before autodiff"):
        hoist_invariant_aggregation(prog)


def test_dump_shows_the_invariant_section():
    prog = _bound(models.gcn(hidden=4, dropout=0.0))
    run_default(prog, dense_features=True)
    text = prog.dump()
    assert "invariant (computed once, when the data is bound):" in text
    assert text.index("invariant") < text.index("forward:")


@pytest.mark.parametrize("reduce", ["mean", "max"])
def test_sage_neighbourhood_of_the_features_is_computed_once(reduce):
    """max_u x_u is as constant as the mean: hoisted too, with the loss and gradients unchanged."""
    F = 7
    before = _bound(models.sage(reduce=reduce, hidden=5), F)
    after = _bound(models.sage(reduce=reduce, hidden=5), F)
    run_default(before)
    report = run_default(after, dense_features=True)
    assert report["hoist_invariant_aggregation"] == 1
    (hoisted,) = after.invariant
    assert hoisted.attrs["reduce"] == reduce and hoisted.inputs == [after.inputs["features"]]
    assert not any(op.opcode == "aggregate_max_grad" and op.output.shape == (F,) for op in after.backward)
    _assert_same_loss_and_gradients(before, after, F)


@pytest.mark.parametrize("reduce,hoisted", [("mean", 1), ("max", 0)])
def test_only_sums_and_means_move_past_a_product(reduce, hoisted):
    """mean_u (x_u W) = (mean_u x_u) W, but max_u (x_u W) is not (max_u x_u) W."""
    m = models.ModelBuilder(f"linear_then_{reduce}")
    w = m.param("W", (7, 4))
    prog = _bound(m.finish(m.emit("aggregate", m.emit("linear", m.x, w), reduce=reduce)), 7, C=4)
    assert hoist_invariant_aggregation(prog) == hoisted


# -- graph constants -----------------------------------------------------------------------
@pytest.mark.parametrize("weighted", [False, True])
def test_a_normalisation_written_out_is_computed_once(weighted):
    """GCN's rsqrt(d + 1) written out (d the in-degree, or the weighted degrees summed by a
    scatter over every edge) moves out of the epoch; the forward keeps only the layers."""
    before = _bound(models.gcn_written_out(hidden=4, weighted=weighted))
    after = _bound(models.gcn_written_out(hidden=4, weighted=weighted))
    run_default(before)
    report = run_default(after, graph_constants=True)
    assert report["hoist_graph_constants"] == (3 if weighted else 2)
    chain = ["graph_scalar", "scatter", "shift", "rsqrt"] if weighted else ["graph_scalar", "shift", "rsqrt"]
    assert [op.opcode for op in after.invariant] == chain
    assert not {"graph_scalar", "scatter", "shift", "rsqrt"} & {op.opcode for op in after.forward}
    assert hoisted_aggregations(after) == 0            # graph constants are not aggregations of the features
    scale = after.invariant[-1].output
    assert all(op.inputs[-1] is scale for op in _aggregates(after.forward))
    _assert_same_loss_and_gradients(before, after, 12, weighted)
    after.validate()


def test_only_deterministic_chains_of_the_graph_alone_move():
    """A dropout of a degree, a degree times a weight or the features, a max over the edges, and a
    graph scalar that nothing moved reads stay in the epoch; 1/sqrt(degree + 1) moves."""
    m = models.ModelBuilder("constants")
    deg = m.emit("graph_scalar", kind="in_degree")
    moved = m.emit("rsqrt", m.emit("shift", deg, c=1.0))
    lone = m.emit("graph_scalar", kind="out_degree")
    weights = m.emit("graph_scalar", kind="gcn_norm", self_loops=False)
    kept = [m.emit("dropout", moved, p=0.5),
            m.emit("linear", moved, m.param("Wd", (1, 1))),
            m.emit("mul", moved, m.emit("linear", m.x, m.param("Wx", ("F", 1)))),
            m.emit("scatter", weights, reduce="max", end="dst"),
            m.emit("linear", lone, m.param("Wl", (1, 1)))]
    total = moved
    for v in kept:
        total = m.emit("add", total, v)
    prog = _bound(m.finish(m.emit("linear", total, m.param("W", (1, "C")))))
    assert hoist_graph_constants(prog) == 2
    assert [op.opcode for op in prog.invariant] == ["graph_scalar", "shift", "rsqrt"]
    forward = [op.opcode for op in prog.forward]
    assert forward.count("graph_scalar") == 2 and "dropout" in forward and "scatter" in forward


def test_a_scaled_aggregation_of_the_features_is_computed_once():
    """s * (A (s * x) + s * x) * W with s = rsqrt(in_degree + 1): the folded aggregation reads an
    invariant scale, so it is hoisted with it (the written-out first GCN layer, no dropout)."""
    def build():
        m = models.ModelBuilder("scaled_features")
        s = m.emit("rsqrt", m.emit("shift", m.emit("graph_scalar", kind="in_degree"), c=1.0))
        z = m.emit("mul", m.x, s)
        a = m.emit("mul", m.emit("add", m.emit("aggregate", z, reduce="sum"), z), s)
        return m.finish(m.emit("linear", a, m.param("W", ("F", "C"))))
    before, after = _bound(build()), _bound(build())
    run_default(before)
    report = run_default(after, dense_features=True, graph_constants=True)
    assert report["fold_node_scales"] == 1 and report["hoist_invariant_aggregation"] == 1
    (hoisted,) = _aggregates(after.invariant)
    assert hoisted.attrs["norm"] == "node_scale" and hoisted.inputs[0] is after.inputs["features"]
    assert hoisted_aggregations(after) == 1
    assert not _aggregates(after.forward + after.backward)
    _assert_same_loss_and_gradients(before, after, 12)


def test_both_propagations_of_sgc_are_computed_once_when_the_classes_are_fewer():
    """SGC's S (S x) W with C < F: reorder_linear_aggregate first puts the second hop after the
    product (S ((S x) W), narrower); with S x invariant, (S (S x)) W is computed once instead, and
    each epoch is the product alone."""
    def sgc():
        m = models.ModelBuilder("sgc")
        twice = m.emit("aggregate", m.emit("aggregate", m.x, reduce="mean"), reduce="mean")
        return m.finish(m.emit("bias_add", m.emit("linear", twice, m.param("W", ("F", "C"))),
                               m.param("b", ("C",), init="zeros")))
    before, after = _bound(sgc()), _bound(sgc())
    run_default(before)
    report = run_default(after, dense_features=True)
    assert report["hoist_invariant_aggregation"] == 2
    assert len(_aggregates(after.invariant)) == 2 and not _aggregates(after.forward + after.backward)
    _assert_same_loss_and_gradients(before, after, 12)


def test_an_aggregation_of_a_graph_constant_is_not_counted_as_one_of_the_features():
    """The mean of the neighbours' degrees is a graph constant computed once; `morphgen train`
    reports only aggregations of the features (and of those, SGC's S^K x) as hoisted."""
    def build():
        m = models.ModelBuilder("degree_mean")
        deg = m.emit("aggregate", m.emit("graph_scalar", kind="in_degree"), reduce="mean")
        h = m.emit("mul", m.emit("aggregate", m.x, reduce="mean"), m.emit("rsqrt", m.emit("shift", deg, c=1.0)))
        return m.finish(m.emit("linear", h, m.param("W", ("F", "C"))))
    before, after = _bound(build()), _bound(build())
    run_default(before)
    run_default(after, dense_features=True, graph_constants=True)
    assert [op.opcode for op in after.invariant] == ["graph_scalar", "aggregate", "shift", "rsqrt", "aggregate"]
    assert hoisted_aggregations(after) == 1
    _assert_same_loss_and_gradients(before, after, 12)
