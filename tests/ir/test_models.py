"""Whole models built with the Builder: generated gradients against finite differences, and
forward agreement with the independent references in tests/ir/reference.py."""
import numpy as np
import pytest

from morphgen.autodiff import differentiate
from morphgen.interp import Interpreter

from . import models, reference
from .helpers import finite_difference_check, perturbed_params, random_data, random_graph

SIZES = {"F": 5, "C": 3, "etypes": 3, "ntypes": 2}


def _setup(name, n=10, e=26):
    prog = models.ALL[name]()
    g = random_graph(n, e, seed=7, etypes=3, ntypes=2)
    sizes = dict(SIZES, N=n)
    prog.bind({s: sizes[s] for s in prog.symbols()})
    x, labels, mask = random_data(g, None if prog.featureless else SIZES["F"], SIZES["C"])
    return prog, g, x, labels, mask


@pytest.mark.parametrize("name", sorted(models.ALL))
def test_model_gradients(name):
    prog, g, x, labels, mask = _setup(name)
    differentiate(prog)
    loss, grads = finite_difference_check(prog, g, x, labels, mask, perturbed_params(prog))
    assert np.isfinite(loss) and loss > 0


def _reference_logits(name, prog, g, x, params):
    n, src, dst = g.num_nodes, g.src, g.dst
    if name.startswith("gcn"):
        return reference.gcn(n, src, dst, np.eye(n) if x is None else x, params)
    if name.startswith("sage"):
        return reference.sage(n, src, dst, x, params, reduce=name.split("_")[1])
    if name == "gin":
        return reference.gin(n, src, dst, x, params)
    if name == "gat":
        return reference.gat(n, src, dst, x, params)
    if name == "rgcn":
        return reference.rgcn(n, src, dst, g.etype, g.num_etypes, x, params)
    raise KeyError(name)


@pytest.mark.parametrize("name", ["gcn", "gcn_featureless", "sage_mean", "sage_max", "gin", "gat", "rgcn"])
def test_forward_matches_reference(name):
    prog, g, x, labels, mask = _setup(name)
    params = perturbed_params(prog)       # nonzero biases: a dropped bias would show
    logits = Interpreter(prog, g, x, labels, mask).predict(params)
    want = _reference_logits(name, prog, g, x, params)
    np.testing.assert_allclose(logits, want, rtol=1e-10, atol=1e-12)
    assert np.all(np.isfinite(logits))


def test_rgcn_with_features_matches_reference():
    prog = models.rgcn(featureless=False)
    g = random_graph(10, 26, seed=7, etypes=3)
    prog.bind({"F": 5, "C": 3, "etypes": 3})
    x, labels, mask = random_data(g, 5, 3)
    params = perturbed_params(prog)
    logits = Interpreter(prog, g, x, labels, mask).predict(params)
    want = reference.rgcn(g.num_nodes, g.src, g.dst, g.etype, 3, x, params)
    np.testing.assert_allclose(logits, want, rtol=1e-10, atol=1e-12)


def test_reference_is_direction_sensitive():
    """The references (and so the agreement above) distinguish a graph from its transpose."""
    prog, g, x, labels, mask = _setup("gcn")
    params = perturbed_params(prog)
    fwd = reference.gcn(g.num_nodes, g.src, g.dst, x, params)
    rev = reference.gcn(g.num_nodes, g.dst, g.src, x, params)
    assert not np.allclose(fwd, rev)


def test_featureless_never_materialises_identity():
    """A featureless R-GCN on 200k nodes runs (an N x N float64 identity would need 320 GB)."""
    from morphgen.graph import Graph
    n = 200_000
    rng = np.random.default_rng(0)
    src = rng.integers(0, n, 2000)
    dst = rng.integers(0, n, 2000)
    g = Graph(n, src, dst, etype=rng.integers(0, 2, 2000), num_etypes=2)
    prog = models.rgcn(hidden=4)
    prog.bind({"N": n, "C": 2, "etypes": 2})
    differentiate(prog)
    labels = rng.integers(0, 2, n)
    mask = np.zeros(n, bool)
    mask[:100] = True
    params = {p.name: rng.normal(size=p.value.shape).astype(np.float32) * 0.1 for p in prog.params}
    loss, grads, _ = Interpreter(prog, g, None, labels, mask, dtype=np.float32).run(params)
    assert np.isfinite(loss)
    assert grads["W1"].shape == (2, n, 4) and grads["S1"].shape == (n, 4)


@pytest.mark.parametrize("name", ["gcn", "sage_mean", "gin", "gat", "rgcn"])
def test_bias_is_applied(name):
    """Shifting the last layer's bias shifts every logit by exactly that amount."""
    prog, g, x, labels, mask = _setup(name)
    params = perturbed_params(prog)
    interp = Interpreter(prog, g, x, labels, mask)
    last_bias = [p.name for p in prog.params if p.value.shape == (SIZES["C"],)][-1]
    before = interp.predict(params)
    params[last_bias] = params[last_bias] + np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(interp.predict(params) - before,
                               np.tile([1.0, -2.0, 0.5], (g.num_nodes, 1)), atol=1e-12)
