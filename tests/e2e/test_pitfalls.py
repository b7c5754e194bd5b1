"""GNNBench's pitfalls (GUIDE §5), checked through the generated C++ of the OpenMP backend.

Gradients are read back with one SGD step of learning rate 1 (tests/backend/harness.py): the
weights move by exactly minus their gradient.  The graphs are directed and asymmetric, with a
zero in-degree node and two isolated nodes (tests/ir/helpers.random_graph).
"""
import functools

import numpy as np
import pytest

from tests.backend.harness import build, gradients_by_sgd, session, use_sgd
from tests.e2e.dense_reference import gcn_forward_backward, gcn_matrix
from tests.ir import models
from tests.ir.helpers import perturbed_params, random_data, random_graph

WIDTHS = (1, 3, 7, 31, 33, 47)
CLASSES = 3


@functools.lru_cache(maxsize=None)
def _gcn_case(width):
    """A two-layer GCN (feature and hidden width ``width``) built for a directed graph."""
    graph = random_graph(n=14, e=40, seed=20 + width)
    x, labels, mask = random_data(graph, width, classes=CLASSES, seed=width)
    x = x.astype(np.float32)
    program = use_sgd(models.gcn(hidden=width, dropout=0.0))
    lib = build(program, graph, x, CLASSES)
    return program, lib, graph, x, labels, mask


def _random_params(program, seed=3):
    return {k: v.astype(np.float32) for k, v in perturbed_params(program, seed=seed).items()}


def _run(case, params, features="dense", threads=2, x=None):
    program, lib, graph, x0, labels, mask = case
    sess = session(lib, program, graph, x0 if x is None else x, labels, mask, features=features, threads=threads)
    sess.set_params(params)
    logits = sess.predict(graph.num_nodes, CLASSES)
    loss, grads = gradients_by_sgd(program, sess, params)
    sess.close()
    return loss, logits, grads


def _assert_matches_reference(case, params, **kw):
    program, lib, graph, x, labels, mask = case
    ref_loss, ref_logits, ref_grads = gcn_forward_backward(graph, x, labels, mask, params)
    loss, logits, grads = _run(case, params, **kw)
    assert np.all(np.isfinite(logits)) and np.isfinite(loss)
    np.testing.assert_allclose(logits, ref_logits, rtol=1e-4, atol=1e-5, err_msg="logits")
    assert loss == pytest.approx(ref_loss, rel=1e-4, abs=1e-6)
    for name, g in ref_grads.items():
        np.testing.assert_allclose(grads[name], g.reshape(-1), rtol=1e-3, atol=1e-5, err_msg=name)


def test_the_graphs_are_directed_enough_to_catch_a_missing_transpose():
    """Premise of the normalisation checks: P differs from its transpose on these graphs."""
    for width in WIDTHS:
        graph = random_graph(n=14, e=40, seed=20 + width)
        p = gcn_matrix(graph)
        assert np.abs(p - p.T).max() > 0.2
        assert graph.in_degree[0] == 0 and graph.in_degree[-1] == 0 and graph.out_degree[-1] == 0


@pytest.mark.parametrize("width", WIDTHS)
def test_gcn_normalisation_forward_and_backward_match_dense_matrices(width):
    case = _gcn_case(width)
    _assert_matches_reference(case, _random_params(case[0]))


def test_bias_is_present():
    """With every weight zero, the logits are exactly the output bias, on every node."""
    case = _gcn_case(7)
    program, lib, graph = case[:3]
    params = {k: np.zeros_like(v) for k, v in _random_params(program).items()}
    params["layer0.b"] = np.linspace(-0.5, 0.7, params["layer0.b"].size).astype(np.float32)
    params["layer1.b"] = np.array([0.3, -0.2, 0.5], np.float32)
    loss, logits, grads = _run(case, params)
    np.testing.assert_array_equal(logits, np.broadcast_to(params["layer1.b"], logits.shape))
    assert np.abs(grads["layer1.b"]).max() > 1e-3, "the output bias gets no gradient"
    _assert_matches_reference(case, params)


def test_zero_in_degree_and_isolated_nodes_stay_finite():
    """Large weights, and the rows of nodes without in-edges are still finite and exact."""
    case = _gcn_case(7)
    program, lib, graph = case[:3]
    params = {k: 20.0 * v for k, v in _random_params(program, seed=9).items()}
    loss, logits, grads = _run(case, params)
    assert np.isfinite(loss) and np.all(np.isfinite(logits))
    assert all(np.all(np.isfinite(g)) for g in grads.values())
    _, ref_logits, _ = gcn_forward_backward(graph, case[3], case[4], case[5], params)
    lonely = np.flatnonzero(graph.in_degree == 0)
    assert lonely.size >= 3
    np.testing.assert_allclose(logits[lonely], ref_logits[lonely], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["sage_mean", "sage_max", "gat"])
def test_other_aggregations_stay_finite_without_in_edges(name):
    """Mean over no neighbours, max over no neighbours and softmax over no edges give finite
    numbers (the same programs and graph as tests/backend, so the builds are shared)."""
    program = {"sage_mean": lambda: models.sage("mean"), "sage_max": lambda: models.sage("max"),
               "gat": models.gat}[name]()
    graph = random_graph(n=12, e=30, seed=3)
    x, labels, mask = random_data(graph, 3, classes=4)
    lib = build(use_sgd(program), graph, x, 4)
    params = {k: v.astype(np.float32) for k, v in perturbed_params(program).items()}
    sess = session(lib, program, graph, x, labels, mask)
    sess.set_params(params)
    logits = sess.predict(graph.num_nodes, 4)
    loss, grads = gradients_by_sgd(program, sess, params)
    assert np.all(np.isfinite(logits)) and np.isfinite(loss)
    for key, g in grads.items():
        assert np.all(np.isfinite(g)), key


def test_dense_and_sparse_feature_paths_agree():
    program, lib, graph, x, labels, mask = case = _gcn_case(47)
    sparse_x = x.copy()
    sparse_x[np.random.default_rng(0).random(x.shape) < 0.85] = 0.0
    sparse_x[3] = 0.0                                   # an all-zero feature row
    params = _random_params(program)
    dense = _run(case, params, features="dense", x=sparse_x)
    csr = _run(case, params, features="csr", x=sparse_x)
    assert csr[0] == pytest.approx(dense[0], rel=1e-5)
    np.testing.assert_allclose(csr[1], dense[1], rtol=1e-5, atol=1e-6)
    for name in dense[2]:
        np.testing.assert_allclose(csr[2][name], dense[2][name], rtol=1e-5, atol=1e-7, err_msg=name)
    ref_loss, _, _ = gcn_forward_backward(graph, sparse_x, labels, mask, params)
    assert csr[0] == pytest.approx(ref_loss, rel=1e-4)


@pytest.mark.parametrize("width", [7, 47])
def test_results_do_not_depend_on_the_thread_count(width):
    case = _gcn_case(width)
    params = _random_params(case[0])
    one = _run(case, params, threads=1)
    two = _run(case, params, threads=2)
    assert two[0] == pytest.approx(one[0], rel=1e-5)
    np.testing.assert_allclose(two[1], one[1], rtol=1e-5, atol=1e-6)
    for name in one[2]:
        np.testing.assert_allclose(two[2][name], one[2][name], rtol=1e-5, atol=1e-7, err_msg=name)


def test_gradients_match_finite_differences_of_the_generated_loss():
    """Central differences of the library's own (float32) loss agree with its gradients."""
    program, lib, graph, x, labels, mask = case = _gcn_case(3)
    params = _random_params(program)
    _, _, grads = _run(case, params)
    sess = session(lib, program, graph, x, labels, mask)
    rng = np.random.default_rng(1)
    eps = 1e-2
    checked = 0
    for name, value in params.items():
        for i in rng.choice(value.size, min(4, value.size), replace=False):
            up, down = value.copy().reshape(-1), value.copy().reshape(-1)
            up[i] += eps
            down[i] -= eps
            sess.set_params({**params, name: up})
            loss_up = sess.evaluate()["loss"]
            sess.set_params({**params, name: down})
            loss_down = sess.evaluate()["loss"]
            numeric = (loss_up - loss_down) / (2 * eps)
            assert numeric == pytest.approx(grads[name][i], rel=3e-2, abs=5e-4), (name, i)
            checked += 1
    sess.close()
    assert checked >= 12
