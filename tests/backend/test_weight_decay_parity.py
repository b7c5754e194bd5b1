"""The generated optimizer step applies each weight's own decay (gnn.weightDecay, decay_biases =
false, gnn.layer weight_decay = number) exactly as the interpreter's optimizer_step does."""
import numpy as np

from morphgen.frontend import compile_source
from morphgen.interp import Interpreter, optimizer_step
from tests.backend.harness import build, session
from tests.ir.helpers import perturbed_params, random_data, random_graph

SOURCE = """
function decays(Graph g, propNode<float[F]> x, propNode<int[C]> y) {
    weight<float[F][6]> W1 = glorot;  weight<float[6]> b1 = zeros;
    weight<float[6][C]> W2 = glorot;  weight<float[C]> b2 = zeros;
    propNode<float[6]> h;  propNode<float[C]> out;
    gnn.optimizer("sgd", lr = 0.5, weight_decay = 0.1, decay_biases = false);
    gnn.weightDecay(W2, 0.3);
    for (int epoch = 0; epoch < 2; epoch++) {
        forall (v in g.nodes()) { v.h = tanh(Sum(u in g.neighbors(v): u.x * W1) + b1); }
        forall (v in g.nodes()) { v.out = v.h * W2 + b2; }
        gnn.loss(out, "cross_entropy");
        gnn.backPropagation();
        gnn.optimizerStep();
    }
}
"""


def test_each_weight_is_decayed_by_its_own_amount():
    graph = random_graph(n=12, e=30, seed=2)
    x, labels, mask = random_data(graph, 5, classes=3)
    program = compile_source(SOURCE)
    lib = build(program, graph, x, 3)
    params = {k: v.astype(np.float32) for k, v in perturbed_params(program).items()}
    sess = session(lib, program, graph, x, labels, mask)
    sess.set_params(params)
    sess.train_epoch()
    got = sess.get_params()
    oracle = Interpreter(program, graph, x, labels, mask, dtype=np.float64)
    ref = {k: v.astype(np.float64) for k, v in params.items()}
    _, grads, _ = oracle.run(ref)
    optimizer_step(program, ref, grads, {})
    assert [p.decay(program.optimizer) for p in program.params] == [0.1, 0.0, 0.3, 0.0]
    for name, value in ref.items():
        np.testing.assert_allclose(got[name], value.reshape(-1), rtol=1e-4, atol=1e-6, err_msg=name)
