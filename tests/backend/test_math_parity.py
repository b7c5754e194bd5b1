"""The elementwise math functions, constant shifts and row softmaxes on the OpenMP backend,
against the interpreter, with the passes off and on, dense and sparse features."""
import pytest

from tests.fuzz.differential import check
from tests.fuzz.generator import FuzzProgram

SOURCE = """
function maths(Graph g, propNode<float[F]> x, propNode<int[C]> y) {
    weight<float[F][6]> W1 = glorot;
    weight<float[6][C]> W2 = glorot;
    weight<float[6]> b1 = glorot;
    propNode<float[6]> h, s;
    propNode<float> norm;
    propNode<float[C]> out;
    gnn.optimizer("sgd", lr = 0.1);
    for (int epoch = 0; epoch < 3; epoch++) {
        forall (v in g.nodes()) {
            v.norm = rsqrt(v.in_degree);
            v.h = gelu(v.x * W1 + b1) + sqrt(softplus(v.x * W1) + 0.5) - log(abs(v.x * W1) + 1.0);
            v.s = pow(sigmoid(v.h) + 0.5, 1.5) * v.norm + pow(tanh(v.h), 2) - 0.25;
            v.s = softmax(v.s) + 2.0 * log_softmax(1.0 - v.s);
            v.out = Sum(e in v.incoming_edges(): e.src.s * W2) + v.s * W2;
        }
        gnn.loss(out, "cross_entropy");
        gnn.backPropagation();
        gnn.optimizerStep();
    }
}
"""


@pytest.mark.parametrize("variant", ["plain", "passes", "sparse"])
def test_math_functions_match_interpreter(variant):
    check(FuzzProgram(seed=3, source=SOURCE, style="explicit", typed=False), variant)
