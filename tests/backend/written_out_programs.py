"""Programs that write GCN's normalisation out in the language, shared by the MPI parity tests and
the benchmark's peer tests: the compiler folds each into the aggregations the layer directives
give (passes/edge_aggregate.py)."""

# As message passing (PyG's gcn_norm): per-edge coefficients n_src * n_dst and the node's own
# row scaled by n twice (fold_edge_normalisation).
GCN_MESSAGE_PASSING = """
function gcnEdgeNorm(Graph g, propNode<float[F]> x, propNode<int[C]> y) {
    weight<float[F][16]> W1 = glorot;
    weight<float[16]> b1 = zeros;
    weight<float[16][C]> W2 = glorot;
    weight<float[C]> b2 = zeros;
    propNode<float[1]> norm;
    propEdge<float[1]> c;
    propNode<float[16]> z1, h;
    propNode<float[C]> z2, out;
    gnn.optimizer("adam", lr = 0.01, weight_decay = 5e-4);
    for (int epoch = 0; epoch < 200; epoch++) {
        forall (v in g.nodes()) { v.norm = rsqrt(v.in_degree + 1); }
        forall (e in g.edges()) { e.c = e.src.norm * e.dst.norm; }
        forall (v in g.nodes()) { v.z1 = dropout(v.x, 0.5) * W1; }
        forall (v in g.nodes()) { v.h = relu(Sum(e in v.incoming_edges(): e.src.z1 * e.c) + v.z1 * v.norm * v.norm + b1); }
        forall (v in g.nodes()) { v.z2 = dropout(v.h, 0.5) * W2; }
        forall (v in g.nodes()) { v.out = Sum(e in v.incoming_edges(): e.src.z2 * e.c) + v.z2 * v.norm * v.norm + b2; }
        gnn.loss(out, "cross_entropy");
        gnn.backPropagation();
        gnn.optimizerStep();
    }
}
"""
