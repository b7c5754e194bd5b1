"""eliminate_common_subexpressions: a value computed twice is computed once, with the loss and
every gradient of the program as written (the interpreter, float64)."""
from pathlib import Path

import pytest

from morphgen.autodiff import differentiate
from morphgen.frontend import compile_file
from morphgen.ir import IRBug
from morphgen.passes import eliminate_common_subexpressions, run_default

from . import models
from .helpers import (assert_same_loss_and_gradients, finite_difference_check, perturbed_params, random_data,
                      random_graph)

F = 6


def _appnp_like(steps=3):
    """h = h0; K times h = 0.9 * mean(h) + 0.1 * h0, each step writing 0.1 * h0 again."""
    m = models.ModelBuilder("appnp_like")
    h0 = m.emit("linear", m.x, m.param("W", ("F", "C")))
    h = h0
    for _ in range(steps):
        h = m.emit("add", m.emit("scale", m.emit("aggregate", h, reduce="mean"), c=0.9), m.emit("scale", h0, c=0.1))
    return m.finish(h).bind({"F": F, "C": 3})


def _opcodes(prog):
    return [op.opcode for op in prog.forward]


def test_a_value_written_in_every_step_is_computed_once_with_the_same_loss_and_gradients():
    before, after = _appnp_like(), _appnp_like()
    assert eliminate_common_subexpressions(after) == 2
    assert _opcodes(after).count("scale") == _opcodes(before).count("scale") - 2
    after.validate()
    differentiate(before)
    differentiate(after)
    params = perturbed_params(before)
    g = random_graph(10, 26, seed=11)
    x, labels, mask = random_data(g, F, 3)
    assert_same_loss_and_gradients(before, after, g, x, labels, mask, params)
    finite_difference_check(after, g, x, labels, mask, params)


def test_operands_of_add_and_mul_in_either_order_are_the_same_value_but_not_of_sub():
    m = models.ModelBuilder("orders")
    a = m.emit("linear", m.x, m.param("Wa", ("F", 4)))
    b = m.emit("linear", m.x, m.param("Wb", ("F", 4)))
    total = m.emit("add", m.emit("mul", a, b), m.emit("mul", b, a))
    total = m.emit("add", total, m.emit("add", m.emit("sub", a, b), m.emit("sub", b, a)))
    total = m.emit("add", total, m.emit("add", a, b))
    total = m.emit("add", total, m.emit("add", b, a))
    prog = m.finish(m.emit("linear", total, m.param("W", (4, "C")))).bind({"F": F, "C": 3})
    assert eliminate_common_subexpressions(prog) == 2
    ops = _opcodes(prog)
    assert ops.count("mul") == 1 and ops.count("sub") == 2


def test_dropouts_batch_norms_and_different_attributes_keep_their_own_ops():
    """Each dropout draws its own mask and each batch norm moves its running statistics: two
    calls on the same value are two values.  A scale by another constant is another value."""
    m = models.ModelBuilder("impure")
    h = m.emit("linear", m.x, m.param("W1", ("F", 4)))
    d1, d2 = m.emit("dropout", h, p=0.5), m.emit("dropout", h, p=0.5)
    mean = m.param("bn.running_mean", (4,), init="zeros", trainable=False)
    var = m.param("bn.running_var", (4,), init="ones", trainable=False)
    n1 = m.emit("batch_standardize", h, mean, var, eps=1e-5, momentum=0.1)
    n2 = m.emit("batch_standardize", h, mean, var, eps=1e-5, momentum=0.1)
    s1, s2, s3 = m.emit("scale", h, c=0.5), m.emit("scale", h, c=0.25), m.emit("scale", h, c=0.5)
    total = h
    for v in (d1, d2, n1, n2, s1, s2, s3):
        total = m.emit("add", total, v)
    prog = m.finish(m.emit("linear", total, m.param("W", (4, "C")))).bind({"F": F, "C": 3})
    assert eliminate_common_subexpressions(prog) == 1
    ops = _opcodes(prog)
    assert ops.count("dropout") == 2 and ops.count("batch_standardize") == 2 and ops.count("scale") == 2


def test_the_logits_and_the_loss_follow_the_value_they_duplicate():
    m = models.ModelBuilder("logits")
    a = m.emit("linear", m.x, m.param("W", ("F", "C")))
    first = m.emit("relu", a)
    m.emit("tanh", first)     # something between the two copies
    prog = m.finish(m.emit("relu", a)).bind({"F": F, "C": 3})
    assert eliminate_common_subexpressions(prog) == 1
    assert prog.logits is first
    assert prog.forward[-1].inputs[0] is first
    prog.validate()


def test_it_is_a_forward_rewrite():
    prog = _appnp_like()
    differentiate(prog)
    with pytest.raises(IRBug):
        eliminate_common_subexpressions(prog)


def test_the_default_pipeline_computes_appnp_s_teleport_term_once():
    """examples/appnp.mp writes 0.1 * h0 in each of its ten steps: one scale remains.  In each
    step the message u.h * u.norm, computed per node (sink_gathers), is the self term v.h * v.norm
    too: 9 + 10 ops fewer, and each step is one aggregation with a self loop."""
    appnp = Path(__file__).resolve().parents[2] / "examples" / "appnp.mp"
    prog = compile_file(str(appnp)).bind({"F": 12, "C": 3})
    report = run_default(prog)
    assert report["common_subexpressions"] == 19
    aggregates = [op for op in prog.forward if op.opcode == "aggregate"]
    assert len(aggregates) == 10 and all(op.attrs["self_loops"] for op in aggregates)
    teleports = [op for op in prog.forward if op.opcode == "scale" and op.attrs["c"] == 0.1]
    assert len(teleports) == 1
