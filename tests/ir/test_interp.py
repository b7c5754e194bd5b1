"""The interpreter's own contracts: optimizers (PyTorch semantics), init, dropout, feature
formats, precision and input errors."""
import numpy as np
import pytest
import scipy.sparse as sp

from morphgen.autodiff import differentiate
from morphgen.interp import (Interpreter, adam_step, adamw_step, init_params, optimizer_step,
                             sgd_step)
from morphgen.ir import IRError, Optimizer

from . import models
from .helpers import perturbed_params, random_data, random_graph


def _setup(factory=models.gcn, **sizes):
    prog = factory()
    prog.bind({s: dict({"F": 6, "C": 3, "N": 10, "etypes": 3}, **sizes)[s] for s in prog.symbols()})
    differentiate(prog)
    g = random_graph(10, 26, seed=2, etypes=3)
    x, labels, mask = random_data(g, None if prog.featureless else 6, 3)
    return prog, g, x, labels, mask


# -- optimizers: written from the torch.optim pseudo-code, two steps by hand --------------
def test_adam_two_steps_by_hand():
    p = np.array([1.0, -2.0])
    g1, g2 = np.array([0.5, 0.1]), np.array([-0.3, 0.2])
    lr, b1, b2, eps, wd = 0.1, 0.9, 0.999, 1e-8, 0.01
    state = {}
    adam_step(p, g1, state, lr, b1, b2, eps, wd)
    adam_step(p, g2, state, lr, b1, b2, eps, wd)
    q = np.array([1.0, -2.0])
    m = v = 0.0
    for t, g in enumerate((g1, g2), start=1):
        g = g + wd * q                       # Adam: L2 decay enters the gradient
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        q = q - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    np.testing.assert_allclose(p, q, rtol=1e-14)
    assert state["step"] == 2


def test_adamw_decays_decoupled():
    p = np.array([1.0, -2.0])
    g = np.array([0.5, 0.1])
    lr, wd = 0.1, 0.5
    adamw_step(p, g, {}, lr, weight_decay=wd)
    q = np.array([1.0, -2.0]) * (1 - lr * wd)
    q = q - lr * g / (np.abs(g) + 1e-8)      # first step: m_hat / sqrt(v_hat) = sign(g)
    np.testing.assert_allclose(p, q, rtol=1e-12)
    r = np.array([1.0, -2.0])
    adam_step(r, g, {}, lr, weight_decay=wd)
    assert not np.allclose(p, r)             # coupled and decoupled decay differ


def test_sgd_momentum_by_hand():
    p = np.array([1.0])
    state = {}
    sgd_step(p, np.array([1.0]), state, lr=0.1, momentum=0.9, weight_decay=0.1)
    sgd_step(p, np.array([1.0]), state, lr=0.1, momentum=0.9, weight_decay=0.1)
    b1 = 1.0 + 0.1 * 1.0                     # buf = g + wd p at step 1
    p1 = 1.0 - 0.1 * b1
    b2 = 0.9 * b1 + (1.0 + 0.1 * p1)
    np.testing.assert_allclose(p, [p1 - 0.1 * b2], rtol=1e-14)


def test_optimizer_step_respects_no_decay_params():
    prog, *_ = _setup()
    prog.optimizer = Optimizer("sgd", lr=1.0, weight_decay=1.0)
    prog.param("layer0.b").weight_decay = False
    params = {k: np.ones_like(v) for k, v in init_params(prog).items()}
    grads = {k: np.zeros_like(v) for k, v in params.items()}
    optimizer_step(prog, params, grads, {})
    assert np.all(params["layer0.b"] == 1.0) and np.all(params["layer0.W"] == 0.0)
    prog.optimizer.kind = "rmsprop"
    with pytest.raises(IRError, match="unknown kind 'rmsprop'"):
        optimizer_step(prog, params, grads, {})


def test_training_reduces_the_loss():
    prog, g, x, labels, mask = _setup(models.sage)
    prog.optimizer = Optimizer("adam", lr=0.05)
    params = init_params(prog, seed=1)
    interp = Interpreter(prog, g, x, labels, mask)
    state, losses = {}, []
    for _ in range(30):
        loss, grads, _ = interp.run(params)
        losses.append(loss)
        optimizer_step(prog, params, grads, state)
    assert losses[-1] < 0.5 * losses[0]


# -- init -------------------------------------------------------------------------------
def test_init_is_seeded_and_glorot_bounded():
    prog, *_ = _setup()
    a, b = init_params(prog, seed=4), init_params(prog, seed=4)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["layer0.W"], init_params(prog, seed=5)["layer0.W"])
    assert np.all(a["layer0.b"] == 0.0)
    bound = np.sqrt(6.0 / (6 + 16))
    assert np.abs(a["layer0.W"]).max() <= bound and np.abs(a["layer0.W"]).max() > 0.5 * bound
    with pytest.raises(IRError, match="unbound"):
        init_params(models.gcn())


def test_uniform_init_is_torch_linear_bound_by_fan_in():
    def max_against_bound(prog, name, fan_in):
        for p in prog.params:
            p.init = "uniform"
        top = np.abs(init_params(prog, seed=1)[name]).max()
        return top / (1.0 / np.sqrt(fan_in))
    sage, *_ = _setup(models.sage)
    # [K, M]: K inputs per output (F = 6, hidden 16); a vector [M]: its own length
    for name, fan_in in (("layer0.Wn", 6), ("layer1.Ws", 16), ("layer0.b", 16)):
        assert 0.5 < max_against_bound(sage, name, fan_in) <= 1.0, name
    # per type [etypes, K, M]: the type dimension is not an input (featureless: K = N = 10)
    rgcn, *_ = _setup(models.rgcn, N=10)
    assert rgcn.param("W1").value.shape == ("etypes", "N", 16) or rgcn.param("W1").value.shape == (3, 10, 16)
    assert 0.5 < max_against_bound(rgcn, "W1", 10) <= 1.0


# -- dropout ----------------------------------------------------------------------------
def test_dropout_training_only_and_reproducible():
    prog, g, x, labels, mask = _setup(models.gcn)
    params = perturbed_params(prog)
    interp = Interpreter(prog, g, x, labels, mask, seed=9)
    drop = prog.forward[0].output
    train = interp.forward(params, training=True)[drop.id]
    again = interp.forward(params, training=True)[drop.id]
    assert np.array_equal(train, again)
    kept = train != 0
    np.testing.assert_allclose(train[kept], x[kept] / 0.5)
    assert 0.2 < kept.mean() < 0.8
    assert np.array_equal(interp.forward(params, training=False)[drop.id], x)
    other = interp.forward(params, training=True, seed=10)[drop.id]
    assert not np.array_equal(train, other)


def test_predict_is_deterministic_and_dropout_free():
    prog, g, x, labels, mask = _setup(models.gcn)
    params = perturbed_params(prog)
    interp = Interpreter(prog, g, x, labels, mask)
    np.testing.assert_array_equal(interp.predict(params), interp.predict(params))
    assert interp.predict(params).shape == (10, 3)


# -- feature formats and precision ------------------------------------------------------
def test_sparse_features_match_dense():
    prog, g, x, labels, mask = _setup(models.sage)
    x = np.where(np.abs(x) > 0.8, x, 0.0)
    params = perturbed_params(prog)
    dense = Interpreter(prog, g, x, labels, mask).run(params)
    sparse = Interpreter(prog, g, sp.csr_matrix(x), labels, mask).run(params)
    assert dense[0] == pytest.approx(sparse[0], rel=1e-12)
    for k in dense[1]:
        np.testing.assert_allclose(sparse[1][k], dense[1][k], rtol=1e-10, atol=1e-14)


def test_float32_close_to_float64():
    prog, g, x, labels, mask = _setup(models.gat)
    params = perturbed_params(prog)
    l64, g64, _ = Interpreter(prog, g, x, labels, mask, dtype=np.float64).run(params)
    l32, g32, _ = Interpreter(prog, g, x, labels, mask, dtype=np.float32).run(params)
    assert l32 == pytest.approx(l64, rel=1e-5)
    for k in g64:
        assert g32[k].dtype == np.float32
        np.testing.assert_allclose(g32[k], g64[k], rtol=1e-3, atol=1e-5)


def test_loss_ignores_unlabelled_and_unmasked_nodes():
    prog, g, x, labels, mask = _setup(models.gcn)
    params = perturbed_params(prog)
    base = Interpreter(prog, g, x, labels, mask).run(params, training=False)
    other = labels.copy()
    other[~mask] = (other[~mask] + 1) % 3         # changing unmasked labels changes nothing
    other[1] = -1
    same = Interpreter(prog, g, x, other, mask).run(params, training=False)
    assert base[0] == same[0]
    grads_zero_rows = base[2][prog.backward[0].output.id]
    assert np.all(grads_zero_rows[~(mask & (labels >= 0))] == 0.0)


def test_input_errors_are_named():
    prog, g, x, labels, mask = _setup(models.gcn)
    params = perturbed_params(prog)
    interp = Interpreter(prog, g, x, labels, mask)
    with pytest.raises(IRError, match="missing value for 'layer1.b'"):
        interp.run({k: v for k, v in params.items() if k != "layer1.b"})
    with pytest.raises(IRError, match=r"params\['layer0.W'\]: shape \(2, 2\)"):
        interp.run(dict(params, **{"layer0.W": np.zeros((2, 2))}))
    with pytest.raises(IRError, match="features: 3 rows"):
        Interpreter(prog, g, x[:3], labels, mask)
    with pytest.raises(IRError, match="not featureless"):
        Interpreter(prog, g, None, labels, mask)
    fresh = models.gcn().bind({"F": 6, "C": 3})
    with pytest.raises(IRError, match="differentiate first"):
        Interpreter(fresh, g, x, labels, mask).run(params)


def test_identity_materialisation_is_refused():
    """An aggregate applied directly to the featureless identity is an error, not N x N."""
    m = models.ModelBuilder("bad", featureless=True)
    a = m.emit("aggregate", m.x, reduce="sum")
    prog = m.finish(m.emit("linear", a, m.param("W", ("N", "C"))))
    prog.bind({"N": 10, "C": 3})
    g = random_graph(10, 26)
    with pytest.raises(IRError, match="materialise"):
        Interpreter(prog, g, None, np.zeros(10, int)).predict(init_params(prog))


def test_per_weight_decay_and_undecayed_biases():
    """gnn.weightDecay gives a weight its own decay; decay_biases = false spares vector weights."""
    prog, *_ = _setup()
    prog.optimizer = Optimizer("sgd", lr=1.0, weight_decay=1.0, decay_vectors=False)
    prog.param("layer1.W").weight_decay = 0.25
    params = {k: np.ones_like(v) for k, v in init_params(prog).items()}
    grads = {k: np.zeros_like(v) for k, v in params.items()}
    optimizer_step(prog, params, grads, {})
    assert np.all(params["layer0.b"] == 1.0) and np.all(params["layer1.b"] == 1.0)
    assert np.all(params["layer0.W"] == 0.0) and np.all(params["layer1.W"] == 0.75)


@pytest.mark.parametrize("direction", ["in", "out"])
@pytest.mark.parametrize("self_loops", [False, True])
def test_node_scale_aggregate_by_hand(direction, self_loops):
    """norm=node_scale: y_v = s_v (sum over v's in-edges u -> v of w_e s_u x_u + s_v x_v), and
    the transpose over out-edges, as loops over the edge list; NaN scales stay NaN."""
    g = random_graph(10, 26, seed=5, weighted=True)
    rng = np.random.default_rng(3)
    x, s = rng.normal(size=(10, 3)), rng.uniform(0.2, 2.0, size=10)
    s[4] = np.nan
    m = models.ModelBuilder("scaled")
    scale = m.program.new_value("node", (1,), name="s")
    m.program.inputs["scale"] = scale
    w = m.emit("graph_scalar", kind="edge_weight")
    out = m.emit("aggregate", m.x, w, scale, reduce="sum", norm="node_scale", direction=direction,
                 self_loops=self_loops)
    prog = m.finish(m.emit("linear", out, m.param("W", ("F", "C"))))
    prog.bind({"F": 3, "C": 2})
    interp = Interpreter(prog, g, x, np.zeros(10, np.int64))
    y = interp._op_aggregate(prog.forward[1], x, g.edge_weight.reshape(-1, 1), s.reshape(-1, 1))
    expect = np.zeros_like(x)
    for u, v, we in zip(g.src, g.dst, g.edge_weight):
        row, col = (v, u) if direction == "in" else (u, v)
        expect[row] += s[row] * we * s[col] * x[col]
    if self_loops:
        expect += (s * s)[:, None] * x
    np.testing.assert_allclose(y, expect, rtol=1e-12, equal_nan=True)
    assert np.isnan(y[4]).all()
