"""sink_gathers: arithmetic on rows gathered from one end of the edges runs on the node rows, with
the loss and every gradient of the program as written (the interpreter, float64)."""
from pathlib import Path

import numpy as np
import pytest

from morphgen.autodiff import differentiate
from morphgen.frontend import compile_file
from morphgen.interp import Interpreter
from morphgen.ir import IRBug
from morphgen.passes import run_default, sink_gathers

from . import models
from .helpers import finite_difference_check, perturbed_params, random_data, random_graph

F = 6
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _data():
    g = random_graph(10, 26, seed=11)
    return (g, *random_data(g, F, 3))


def _assert_same_loss_and_gradients(before, after):
    g, x, labels, mask = _data()
    params = perturbed_params(before)
    loss0, grads0, _ = Interpreter(before, g, x, labels, mask, dtype=np.float64, seed=3).run(params)
    loss1, grads1, _ = Interpreter(after, g, x, labels, mask, dtype=np.float64, seed=3).run(params)
    assert loss1 == pytest.approx(loss0, rel=1e-12)
    for name in grads0:
        np.testing.assert_allclose(grads1[name], grads0[name], rtol=1e-9, atol=1e-12, err_msg=name)
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
