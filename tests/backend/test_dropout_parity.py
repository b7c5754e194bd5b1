"""Programs with dropout: the generated OpenMP code agrees with the numpy interpreter.

The interpreter draws the backends' own counter-based dropout masks, so forward and generated
backward can be compared element by element, on the dense and on the sparse feature path.
Regression: an activation or bias right after ``dropout(v.x, p) * W`` (the first layer of an
MLP or APPNP) was fused into the product and then dropped by the input-feature kernel, so the
logits stayed 0 and training stayed at chance without any error.
"""
import numpy as np
import pytest

from morphgen.frontend import compile_source
from tests.backend.harness import assert_matches_interpreter
from tests.ir import models
from tests.ir.helpers import random_data, random_graph

MLP_TAILS = {
    "relu_bias": "relu(dropout(v.x, 0.5) * W1 + b1)",
    "relu": "relu(dropout(v.x, 0.5) * W1)",
    "bias": "dropout(v.x, 0.5) * W1 + b1",
    "tanh_bias_no_dropout": "tanh(v.x * W1 + b1)",
}


def mlp_source(first_layer: str) -> str:
    return f"""
function mlp(Graph g, propNode<float[F]> x, propNode<int[C]> y) {{
    weight<float[F][8]> W1 = glorot;
    weight<float[8]> b1 = zeros;
    weight<float[8][C]> W2 = glorot;
    propNode<float[8]> h;
    propNode<float[C]> out;
    gnn.optimizer("sgd", lr = 1.0);
    for (int epoch = 0; epoch < 1; epoch++) {{
        forall (v in g.nodes()) {{
            v.h = {first_layer};
            v.out = Sum(e in v.incoming_edges(): e.src.h * W2) + v.h * W2;
        }}
        gnn.loss(out, "cross_entropy");
        gnn.backPropagation();
        gnn.optimizerStep();
    }}
}}
"""


def _check(program, features, width=33, classes=4):
    graph = random_graph(n=12, e=30, seed=5)
    x, labels, mask = random_data(graph, width, classes=classes)
    x[np.random.default_rng(2).random(x.shape) < 0.7] = 0.0
    assert_matches_interpreter(program, graph, x, labels, mask, classes, features=features)


@pytest.mark.parametrize("features", ["dense", "csr"])
@pytest.mark.parametrize("tail", sorted(MLP_TAILS))
def test_epilogue_after_a_product_of_the_input_features_runs(tail, features):
    _check(compile_source(mlp_source(MLP_TAILS[tail]), filename="mlp.mp"), features)


@pytest.mark.parametrize("features", ["dense", "csr"])
@pytest.mark.parametrize("name", ["gcn", "sage_mean"])
def test_models_with_dropout_match_interpreter(name, features):
    program = {"gcn": lambda: models.gcn(dropout=0.5),
               "sage_mean": lambda: models.sage("mean", dropout=0.5)}[name]()
    _check(program, features)
