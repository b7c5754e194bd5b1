"""Programs that read the dataset's edge weights (e.edge_weight), shared by every backend's
parity tests: each use a lowering may take its own way through (the weighted sums GCN's
example makes, a weight inside an attention score, a division by the weights, a weighted mean)."""
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


def weighted_programs() -> dict:
    """name -> a fresh program (dropout off: the interpreter compares without masks)."""
    def example():
        program = compile_file(str(EXAMPLE))
        for op in program.forward:
            if op.opcode == "dropout":
                op.attrs["p"] = 0.0
        return program
    return {"gcn_weighted": example, "attention": lambda: compile_source(ATTENTION, "weighted_attention.mp")}
