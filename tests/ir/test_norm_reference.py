"""The interpreter's normalisation ops against torch's own (the definition users compare with):
batch norm in training (batch statistics, running statistics updated) and in evaluation, layer
norm; forward and input gradient."""
from types import SimpleNamespace

import numpy as np

from morphgen.graph import Graph
from morphgen.interp import Interpreter
from tests.ir.models import ModelBuilder

import torch      # installed by the project's bench extra, which `make` installs


def _run(opcode, training, x, g, mean=None, var=None):
    m = ModelBuilder(f"norm_{opcode}")
    h = m.emit("linear", m.x, m.param("I", ("F", x.shape[1])))
    extra = []
    if opcode == "batch_standardize":
        extra = [m.param("mean", (x.shape[1],), trainable=False), m.param("var", (x.shape[1],), trainable=False)]
        attrs = dict(eps=1e-5, momentum=0.1)
    else:
        attrs = dict(eps=1e-5)
    out = m.emit(opcode, h, *extra, **attrs)
    prog = m.finish(m.emit("linear", out, m.param("O", (x.shape[1], "C"))))
    prog.bind({"F": x.shape[1], "C": 2})
    graph = Graph(x.shape[0], np.array([0]), np.array([1]))
    interp = Interpreter(prog, graph, x, np.zeros(x.shape[0], np.int64), dtype=np.float64)
    params = {"I": np.eye(x.shape[1]), "O": np.zeros((x.shape[1], 2))}
    if mean is not None:
        params.update(mean=mean.copy(), var=var.copy())
    values = interp.forward(params, training=training)
    y = values[out.id]
    dx = getattr(interp, f"_op_{opcode}_grad")(SimpleNamespace(attrs=attrs), g, x, y)   # the backward op
    return y, dx, interp.state_updates


def test_batch_norm_training_and_evaluation_match_torch():
    rng = np.random.default_rng(0)
    x, g = rng.normal(size=(13, 5)) * 3 + 1, rng.normal(size=(13, 5))
    mean, var = rng.normal(size=5), rng.uniform(0.5, 2, size=5)
    y, dx, updates = _run("batch_standardize", True, x, g, mean, var)
    tx = torch.tensor(x, requires_grad=True)
    rm, rv = torch.tensor(mean), torch.tensor(var)
    ty = torch.nn.functional.batch_norm(tx, rm, rv, training=True, momentum=0.1, eps=1e-5)
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(updates["mean"], rm.numpy(), rtol=1e-12)
    np.testing.assert_allclose(updates["var"], rv.numpy(), rtol=1e-12)
    y_eval, _, _ = _run("batch_standardize", False, x, g, mean, var)
    ref = torch.nn.functional.batch_norm(torch.tensor(x), torch.tensor(mean), torch.tensor(var), training=False,
                                         eps=1e-5)
    np.testing.assert_allclose(y_eval, ref.numpy(), rtol=1e-10, atol=1e-12)


def test_layer_norm_matches_torch():
    rng = np.random.default_rng(1)
    x, g = rng.normal(size=(7, 6)) * 2 - 1, rng.normal(size=(7, 6))
    y, dx, _ = _run("layer_standardize", True, x, g)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.layer_norm(tx, (6,), eps=1e-5)
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-9, atol=1e-12)
