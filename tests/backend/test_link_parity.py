"""Link prediction (gnn.linkLoss): the generated OpenMP code agrees with the numpy interpreter on
the loss and on every weight gradient, for the triples set before the epoch."""
import numpy as np
import pytest

from morphgen.library import RuntimeFailure
from tests.backend.harness import build, gradients_by_sgd, session, use_sgd
from tests.ir.helpers import perturbed_params, random_graph
from tests.ir.models import ModelBuilder
from morphgen.interp import Interpreter


def link_program(regularization):
    """Featureless: an embedding per node, a per-edge-type layer, DistMult against R."""
    m = ModelBuilder(f"link_{regularization}", featureless=True)
    h = m.emit("linear", m.x, m.param("E", ("N", 6)))
    msg = m.emit("typed_linear", m.emit("gather", h, end="src"), m.param("W", ("etypes", 6, 6), domain="etype"))
    z = m.emit("add", m.emit("scatter", msg, reduce="mean"), h)
    return m.finish_link(z, m.param("R", ("etypes", 6), domain="etype"), regularization)


def triples(graph, count, seed=2):
    rng = np.random.default_rng(seed)
    t = np.stack([rng.integers(0, graph.num_nodes, count), rng.integers(0, graph.num_etypes, count),
                  rng.integers(0, graph.num_nodes, count), rng.integers(0, 2, count)], axis=1)
    t[0, 2] = t[0, 0]                          # a node that is its own tail
    return t


def test_link_loss_and_gradients_match_interpreter():
    """With regularization, so both terms of the loss and of each gradient are compared."""
    graph = random_graph(n=14, e=40, seed=6, etypes=3)
    program = link_program(0.05)
    lib = build(use_sgd(program), graph, None, classes=1)
    params = {k: v.astype(np.float32) for k, v in perturbed_params(program).items()}
    scored = triples(graph, 25)
    ref_loss, ref_grads, _ = Interpreter(program, graph, None, triples=scored).run(
        {k: v.astype(np.float64) for k, v in params.items()})
    sess = session(lib, program, graph, None, None, None)
    sess.set_triples(scored)
    loss, grads = gradients_by_sgd(program, sess, params)
    assert loss == pytest.approx(ref_loss, rel=1e-4)
    for name, g in ref_grads.items():
        np.testing.assert_allclose(grads[name], g.reshape(-1), rtol=2e-3, atol=2e-6, err_msg=name)


def test_many_triples_give_the_same_gradients_at_any_thread_count():
    """Past 4,096 triples the gradients are scattered by several threads, each owning a slice of
    the rows and walking the triples in order: the bits of one thread, and the interpreter's values."""
    graph = random_graph(n=14, e=40, seed=6, etypes=3)
    program = link_program(0.05)
    lib = build(use_sgd(program), graph, None, classes=1)
    params = {k: v.astype(np.float32) for k, v in perturbed_params(program).items()}
    scored = triples(graph, 6000)
    runs = []
    for threads in (1, 2):
        sess = session(lib, program, graph, None, None, None, threads=threads)
        sess.set_triples(scored)
        runs.append(gradients_by_sgd(program, sess, params)[1])
    for name in runs[0]:
        np.testing.assert_array_equal(runs[0][name], runs[1][name], err_msg=name)
    _, ref_grads, _ = Interpreter(program, graph, None, triples=scored).run(
        {k: v.astype(np.float64) for k, v in params.items()})
    for name, g in ref_grads.items():
        np.testing.assert_allclose(runs[1][name], g.reshape(-1), rtol=2e-3, atol=2e-6, err_msg=name)


@pytest.mark.parametrize("row,message", [
    ([99, 0, 1, 1], "triple 0 names a node outside the graph"),
    ([0, 7, 1, 1], "triple 0 names relation 7, outside [0, 3)"),
    ([0, 0, 1, 2], "targets must be 0 or 1"),
])
def test_bad_triples_are_refused_by_the_library(row, message):
    graph = random_graph(n=14, e=40, seed=6, etypes=3)
    program = link_program(0.05)
    lib = build(use_sgd(program), graph, None, classes=1)
    sess = session(lib, program, graph, None, None, None)
    with pytest.raises(RuntimeFailure, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        sess.set_triples(np.array([row]))
