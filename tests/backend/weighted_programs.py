"""Programs that read the dataset's edge weights (e.edge_weight), shared by every backend's
parity tests: each use a lowering may take its own way through (the weighted sums GCN's
example makes, the same sums written by `gnn.layer(..., edge_weight = true)`, a weight inside an
attention score, a division by the weights, a weighted mean)."""
from __future__ import annotations

from pathlib import Path

from morphgen.frontend import compile_file, compile_source

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gcn_weighted.mp"

ATTENTION = """
function weightedAttention(Graph g, propNode<float[F]> x, propNode<int[C]> y) {
    weight<float[F][C]> W = glorot;
    weight<float[C]> a = glorot;
    weight<float[C]> b = zeros;
    propNode<float[C]> z, out;
    propEdge<float[1]> al;
    gnn.optimizer("sgd", lr = 0.1);
    for (int epoch = 0; epoch < 2; epoch++) {
        forall (v in g.nodes()) { v.z = v.x * W; }
        forall (e in g.edges()) { e.al = edge_softmax(dot(e.src.z, a) * e.edge_weight); }
        forall (v in g.nodes()) {
            v.out = Sum(e in v.incoming_edges(): e.src.z * e.al / e.edge_weight)
                    + Mean(e in v.incoming_edges(): tanh(e.src.z) * e.edge_weight) + b;
        }
        gnn.loss(out, "cross_entropy");
        gnn.backPropagation();
        gnn.optimizerStep();
    }
}
"""


# examples/gcn_weighted.mp in directives (without its dropout)
LAYERS = """
function gcnLayers(Graph g, propNode<float[F]> x, propNode<int[C]> y) {
    gnn.layer(F, 16, edge_weight = true);
    gnn.layer(16, C, edge_weight = true);
    gnn.optimizer("adam", lr = 0.01, weight_decay = 5e-4);
    for (int epoch = 0; epoch < 2; epoch++) {
        for (int l = 0; l < 2; l++) { gnn.forwardPass(l, "GCN", "Sum"); }
        gnn.loss("cross_entropy");
        gnn.backPropagation();
        gnn.optimizerStep();
    }
}
"""
# The example's weights under the names the layers give theirs.
LAYER_NAMES = {"W1": "layer0.W", "b1": "layer0.b", "W2": "layer1.W", "b2": "layer1.b"}


def weighted_programs() -> dict:
    """name -> a fresh program (dropout off: the interpreter compares without masks)."""
    def example():
        program = compile_file(str(EXAMPLE))
        for op in program.forward:
            if op.opcode == "dropout":
                op.attrs["p"] = 0.0
        return program
    return {"gcn_weighted": example, "gcn_layers": lambda: compile_source(LAYERS, "weighted_layers.mp"),
            "attention": lambda: compile_source(ATTENTION, "weighted_attention.mp")}
