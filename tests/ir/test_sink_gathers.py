"""sink_gathers: arithmetic on rows gathered from one end of the edges runs on the node rows, with
the loss and every gradient of the program as written (the interpreter, float64)."""
from pathlib import Path

import pytest

from morphgen.autodiff import differentiate
from morphgen.frontend import compile_file
from morphgen.ir import IRBug
from morphgen.passes import run_default, sink_gathers

from . import models
from .helpers import (assert_same_loss_and_gradients, finite_difference_check, perturbed_params, random_data,
                      random_graph)

F = 6
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _data():
    g = random_graph(10, 26, seed=11)
    return (g, *random_data(g, F, 3))


def _assert_same_loss_and_gradients(before, after):
    g, x, labels, mask = _data()
    params = perturbed_params(before)
    assert_same_loss_and_gradients(before, after, g, x, labels, mask, params)
    finite_difference_check(after, g, x, labels, mask, params)


def _scaled_messages(end="src", with_bias=False):
    """Sum over in-edges of relu(h[end] * n[end] (+ b)), n = rsqrt(in_degree + 1), h = x W."""
    m = models.ModelBuilder("scaled_messages")
    h = m.emit("linear", m.x, m.param("W", ("F", 4)))
    n = m.emit("rsqrt", m.emit("shift", m.emit("graph_scalar", kind="in_degree"), c=1.0))
    msg = m.emit("mul", m.emit("gather", h, end=end), m.emit("gather", n, end=end))
    if with_bias:
        msg = m.emit("add", msg, m.param("b", (4,), init="normal"))
    msg = m.emit("relu", msg)
    total = m.emit("scatter", msg, reduce="sum", end="dst" if end == "src" else "src")
    return m.finish(m.emit("linear", total, m.param("Wo", (4, "C")))).bind({"F": F, "C": 3})


def _opcodes(prog):
    return [op.opcode for op in prog.forward]


@pytest.mark.parametrize("end", ["src", "dst"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_a_message_of_one_end_s_rows_is_computed_per_node(end, with_bias):
    before, after = _scaled_messages(end, with_bias), _scaled_messages(end, with_bias)
    assert sink_gathers(after) == (3 if with_bias else 2)
    ops = _opcodes(after)
    assert ops.count("gather") == 1           # one gather of the finished message
    gathered = next(op for op in after.forward if op.opcode == "gather")
    assert gathered.attrs["end"] == end and gathered.inputs[0].assoc == "node"
    after.validate()
    for prog in (before, after):
        differentiate(prog)
    _assert_same_loss_and_gradients(before, after)


def test_the_default_pipeline_then_folds_the_sum_into_an_aggregation():
    prog = _scaled_messages()
    report = run_default(prog)
    assert report["sink_gathers"] == 2 and report["fold_edge_aggregations"] == 1
    assert "scatter" not in _opcodes(prog) and "gather" not in _opcodes(prog)


def test_rows_of_both_ends_keep_their_edge_arithmetic():
    """GAT's e.src.s + e.dst.d differs on every edge: nothing moves."""
    m = models.ModelBuilder("both_ends")
    s = m.emit("linear", m.x, m.param("Ws", ("F", 1)))
    d = m.emit("linear", m.x, m.param("Wd", ("F", 1)))
    score = m.emit("leaky_relu", m.emit("add", m.emit("gather", s, end="src"), m.emit("gather", d, end="dst")),
                   alpha=0.2)
    total = m.emit("scatter", m.emit("mul", m.emit("gather", m.x, end="src"), m.emit("edge_softmax", score)),
                   reduce="sum", end="dst")
    prog = m.finish(m.emit("linear", total, m.param("W", ("F", "C")))).bind({"F": F, "C": 3})
    assert sink_gathers(prog) == 0


def test_rows_of_the_featureless_identity_and_graphs_with_fewer_edges_than_nodes_stay():
    m = models.ModelBuilder("featureless", featureless=True)
    msg = m.emit("scale", m.emit("gather", m.x, end="src"), c=0.5)
    total = m.emit("scatter", msg, reduce="sum", end="dst")
    prog = m.finish(m.emit("linear", total, m.param("W", ("N", "C")))).bind({"N": 10, "C": 3})
    assert sink_gathers(prog) == 0
    assert sink_gathers(_scaled_messages(), num_nodes=100, num_edges=99) == 0
    assert sink_gathers(_scaled_messages(), num_nodes=100, num_edges=100) == 2


def test_it_is_a_forward_rewrite():
    prog = _scaled_messages()
    differentiate(prog)
    with pytest.raises(IRBug):
        sink_gathers(prog)


def test_gcnii_s_normalisation_written_in_the_message_folds_into_each_aggregation():
    """examples/gcnii.mp writes Sum(u: u.h * u.norm) + v.h * v.norm, all times v.norm: each of its
    four layers is one aggregation with the scale at both ends and a self loop."""
    prog = compile_file(str(EXAMPLES / "gcnii.mp")).bind({"F": 12, "C": 3})
    run_default(prog, graph_constants=True)
    aggregates = [op for op in prog.forward if op.opcode == "aggregate"]
    assert len(aggregates) == 4
    assert all(op.attrs["norm"] == "node_scale" and op.attrs["self_loops"] for op in aggregates)
    assert not {"gather", "scatter"} & set(_opcodes(prog))


def _edge_mlp(right_end="dst", right_rows="x", width=4, read_difference_again=False):
    """Max over in-edges of relu((x[src] - r[end]) Wd + x[dst] Wi + b) (EdgeConv's message)."""
    m = models.ModelBuilder("edge_mlp")
    rows = {"x": m.x, "other": m.emit("tanh", m.x)}[right_rows]
    diff = m.emit("sub", m.emit("gather", m.x, end="src"), m.emit("gather", rows, end=right_end))
    msg = m.emit("add", m.emit("linear", diff, m.param("Wd", ("F", width))),
                 m.emit("linear", m.emit("gather", m.x, end="dst"), m.param("Wi", ("F", width))))
    msg = m.emit("relu", m.emit("bias_add", msg, m.param("b", (width,), init="normal")))
    if read_difference_again:
        msg = m.emit("add", msg, m.emit("linear", diff, m.param("Wa", ("F", width))))
    total = m.emit("scatter", msg, reduce="max", end="dst")
    return m.finish(m.emit("linear", total, m.param("Wo", (width, "C")))).bind({"F": F, "C": 3})


def test_edgeconv_s_product_of_a_difference_runs_once_per_node():
    """(x_src - x_dst) Wd = (x Wd)_src - (x Wd)_dst and x_dst Wi = (x Wi)_dst: no product of edge rows
    remains, one product of the node rows per weight (the two sides share theirs)."""
    after = _edge_mlp()
    report = run_default(after)
    linears = [op for op in after.forward if op.opcode == "linear"]
    assert report["sink_gathers"] == 3
    assert all(op.output.assoc == "node" for op in linears) and len(linears) == 3    # x Wd, x Wi, the output
    plain = _edge_mlp()
    differentiate(plain)
    _assert_same_loss_and_gradients(plain, after)


def test_a_difference_is_distributed_only_when_no_product_is_added_per_node():
    """Different rows at the two ends are two node products: taken when the product narrows the
    rows (K >= M), not when it widens them; never when the difference has another reader."""
    assert sink_gathers(_edge_mlp(right_rows="other", width=4)) == 3          # 6 -> 4: narrows
    assert sink_gathers(_edge_mlp(right_rows="other", width=8)) == 1          # 6 -> 8: only x_dst Wi
    assert sink_gathers(_edge_mlp(read_difference_again=True)) == 1
    wide = _edge_mlp(right_rows="other", width=4)
    sink_gathers(wide)
    wide.validate()


def test_typed_products_and_dropouts_of_gathered_rows_stay_on_the_edges():
    """A typed product's weight and a dropout's mask depend on the edge, not only on the node each
    row came from."""
    m = models.ModelBuilder("edge_only")
    g = m.emit("gather", m.x, end="src")
    typed = m.emit("typed_linear", g, m.param("Wt", ("etypes", "F", 4), domain="etype"))
    dropped = m.emit("linear", m.emit("dropout", g, p=0.5), m.param("Wd", ("F", 4)))
    total = m.emit("scatter", m.emit("add", typed, dropped), reduce="sum", end="dst")
    prog = m.finish(m.emit("linear", total, m.param("Wo", (4, "C")))).bind({"F": F, "C": 3, "etypes": 2})
    assert sink_gathers(prog) == 0
