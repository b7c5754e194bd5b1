"""Every example trains to the numbers of one process on 1, 2 and 4 ranks (the MPI backend's
first promise: splitting the graph changes where rows live, never what is computed).

Each case trains a few epochs with --backend openmp and with --backend mpi at 1, 2 and 4 ranks
and compares the loss of every epoch and the final accuracies.  Dropout is on in most examples,
so this also checks that the masks are keyed by global node and edge ids.
"""
from __future__ import annotations

import numpy as np
import pytest

from morphgen.data.npz import save_npz
from tests.e2e.support import datasets_dir, example, typed_dataset, write_link_npz
from tests.backend.written_out_programs import GCN_MESSAGE_PASSING
from tests.mpi.support import RANKS, assert_same_run, train

SYNTHETIC = "synthetic:nodes=300,edges=2400,features=24,classes=4,train_per_class=12,val=60,test=100"
RTOL = 1e-5


# GCN's normalisation written out: each layer folds into one aggregation whose kernel reads the
# program's own scale at ghost sources too (norm=node_scale), and the scale is computed once at
# load time.  With the in-degree (the global graph's: no exchange needed) and an input dropout;
# with the weighted degrees (each rank sums its own rows' in-edges: the ghosts' scales come from
# their owners) and none, so that the first aggregation of the features is computed once too.
GCN_WRITTEN_OUT = """
function gcnWrittenOut(Graph g, propNode<float[F]> x, propNode<int[C]> y) {
    weight<float[F][16]> W1 = glorot;
    weight<float[16]> b1 = zeros;
    weight<float[16][C]> W2 = glorot;
    propNode<float[1]> s;
    propNode<float[16]> z1, h;
    propNode<float[C]> z2, out;
    gnn.optimizer("adam", lr = 0.01);
    for (int epoch = 0; epoch < 200; epoch++) {
        forall (v in g.nodes()) { v.s = rsqrt(DEGREE + 1); }
        forall (v in g.nodes()) { v.z1 = INPUT * W1 * v.s; }
        forall (v in g.nodes()) { v.h = relu((Sum(u in g.neighbors(v): u.z1) + v.z1) * v.s + b1); }
        forall (v in g.nodes()) { v.z2 = dropout(v.h, 0.5) * W2 * v.s; }
        forall (v in g.nodes()) { v.out = (Sum(u in g.neighbors(v): u.z2) + v.z2) * v.s; }
        gnn.loss(out, "cross_entropy");
        gnn.backPropagation();
        gnn.optimizerStep();
    }
}
"""


@pytest.mark.parametrize("degree, features, hoisted", [
    ("v.in_degree", "dropout(v.x, 0.5)", 0),
    ("Sum(e in v.incoming_edges(): e.edge_weight)", "v.x", 1)])
def test_gcn_written_out_matches_one_process(tmp_path, degree, features, hoisted):
    source = GCN_WRITTEN_OUT.replace("DEGREE", degree).replace("INPUT", features)
    data = SYNTHETIC + (",weighted=1" if "edge_weight" in degree else "")
    _assert_program_matches_one_process(tmp_path, source, data, hoisted, f"the written-out GCN ({degree})")


def _assert_program_matches_one_process(tmp_path, source: str, data: str, hoisted: int, what: str) -> None:
    """The program trains alike on one OpenMP process and on every rank count, hoisting as many
    aggregations of the features."""
    program = tmp_path / "program.mp"
    program.write_text(source)
    reference = train(tmp_path, program, data)
    assert reference["hoisted_aggregations"] == hoisted
    for ranks in RANKS:
        run = train(tmp_path, program, data, backend="mpi", ranks=ranks)
        assert run["hoisted_aggregations"] == hoisted
        assert_same_run(reference, run, RTOL, f"{what} on {ranks} ranks")


def test_gcn_as_message_passing_matches_one_process(tmp_path):
    """Per-edge coefficients n_src * n_dst fold into one aggregation per layer (its scale read at
    ghost sources, computed once)."""
    _assert_program_matches_one_process(tmp_path, GCN_MESSAGE_PASSING, SYNTHETIC, 0, "GCN as message passing")


# Graph constants of every kind, computed once at load time: a mean of the neighbours' degrees
# (the degrees read at ghost sources), a scale of it, a sum of the scale over the neighbours (read
# at ghost sources again), beside a hoisted aggregation of the features.
GRAPH_CONSTANTS = """
function degreeMean(Graph g, propNode<float[F]> x, propNode<int[C]> y) {
    weight<float[F][C]> W = glorot;
    weight<float[C]> b = zeros;
    propNode<float> d, s;
    propNode<float[F]> a;
    propNode<float[C]> out;
    gnn.optimizer("adam", lr = 0.05);
    for (int epoch = 0; epoch < 20; epoch++) {
        forall (v in g.nodes()) { v.d = Mean(u in g.neighbors(v): u.in_degree); }
        forall (v in g.nodes()) { v.s = rsqrt(v.d + 1); }
        forall (v in g.nodes()) { v.a = Mean(u in g.neighbors(v): u.x) * v.s; }
        forall (v in g.nodes()) { v.out = v.a * W + Sum(u in g.neighbors(v): u.s) * b; }
        gnn.loss(out, "cross_entropy");
        gnn.backPropagation();
        gnn.optimizerStep();
    }
}
"""


def test_graph_constants_computed_once_match_one_process(tmp_path):
    _assert_program_matches_one_process(tmp_path, GRAPH_CONSTANTS, SYNTHETIC, 1, "graph constants")


@pytest.mark.parametrize("model", ["gcn", "gcn3", "sage", "gin", "gat", "appnp", "gcn_weighted", "gcnii", "edgeconv",
                                   example("bench/gcn3_weighted")])
def test_homogeneous_examples_match_one_process(tmp_path, model):
    """gcn_weighted (sums written out) and bench/gcn3_weighted (GCN layers weighing their edges:
    weighted aggregations): each rank's part files carry its edges' weights, in its own order.
    gcnii's messages (u.h * u.norm) and edgeconv's ((x_u - x_v) Wd) are products of the node rows,
    gathered to ghost sources by the exchange."""
    data = SYNTHETIC + (",weighted=1" if "weighted" in str(model) else "")
    reference = train(tmp_path, model, data)
    for ranks in RANKS:
        assert_same_run(reference, train(tmp_path, model, data, backend="mpi", ranks=ranks), RTOL,
                        f"{model} on {ranks} ranks")


@pytest.mark.parametrize("model", ["gcn", "gcn3", "sage"])
def test_outputs_wider_than_the_hidden_layer_match_one_process(tmp_path, model):
    """47 classes against 16-32 hidden: the last layer aggregates before its product, so the
    backward runs a transposed aggregation with self loops on a gradient computed for owned rows."""
    data = SYNTHETIC.replace("classes=4,train_per_class=12", "classes=47,train_per_class=2")
    reference = train(tmp_path, model, data)
    for ranks in (2, 4):
        assert_same_run(reference, train(tmp_path, model, data, backend="mpi", ranks=ranks), RTOL,
                        f"{model}, 47 classes, on {ranks} ranks")


@pytest.mark.parametrize("model,featureless", [("rgcn", False), ("rgat", False), ("hgt", False),
                                                ("rgcn", True), ("rgat", True), ("hgt", True)])
def test_relational_examples_match_one_process(tmp_path, model, featureless):
    data = save_npz(typed_dataset(features=None if featureless else 7, nodes=64, edges=320),
                    tmp_path / "typed.npz")
    reference = train(tmp_path, model, data)
    for ranks in RANKS:
        assert_same_run(reference, train(tmp_path, model, data, backend="mpi", ranks=ranks), RTOL,
                        f"{model} ({'featureless' if featureless else 'features'}) on {ranks} ranks")


NODE_BASIS_LOOKUP = """
function nodeBases(Graph g, propNode<float[F]> x, propNode<int[C]> y) {
    weight<float[g.ntypes][2]> A = glorot;
    weight<float[2][F][C]> V = glorot;
    propNode<float[C]> h;
    gnn.optimizer("OPTIMIZER");
    for (int epoch = 0; epoch < 3; epoch++) {
        forall (v in g.nodes()) { v.h = dropout(exp(tanh(v.x * (A * V)[v.ntype])), 0.3); }
        gnn.loss(h, "cross_entropy");
        gnn.backPropagation();
        gnn.optimizerStep();
    }
}
"""


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_featureless_basis_lookups_of_node_rows_match_one_process(tmp_path, optimizer):
    """A featureless lookup per node type walks a plan that covers ghost rows too, where the
    gradient holds nothing of this rank's: its gradients must read zero there (they read what
    the buffer held before, and the second epoch's loss differed; found by
    tests/fuzz/mpi_campaign.py, seed 945, where the dropout's buffers left values there)."""
    data = save_npz(typed_dataset(features=None, nodes=120, edges=600), tmp_path / "typed.npz")
    program = tmp_path / "node_bases.mp"
    program.write_text(NODE_BASIS_LOOKUP.replace("OPTIMIZER", optimizer))
    reference = train(tmp_path, program, data, epochs=3)
    for ranks in (2, 3):
        assert_same_run(reference, train(tmp_path, program, data, backend="mpi", ranks=ranks, epochs=3), RTOL,
                        f"node-row basis lookups ({optimizer}) on {ranks} ranks")


def test_link_prediction_matches_one_process(tmp_path):
    """R-GCN link prediction (gnn.linkLoss, dropout on): each rank scores its share of the
    triples on the embeddings of the whole graph, gathered from their owners; the shares' losses
    and gradients add up to one process's (the L2 term counted once).  The losses and the
    filtered ranking are one process's up to the order of the sums.  Trained by SGD: Adam's step
    hardly changes when a gradient is counted twice."""
    program = tmp_path / "rgcn_link_sgd.mp"
    source = example("rgcn_link").read_text()
    assert 'gnn.optimizer("adam", lr = 0.01)' in source
    program.write_text(source.replace('gnn.optimizer("adam", lr = 0.01)', 'gnn.optimizer("sgd", lr = 0.5)'))
    data = str(write_link_npz(tmp_path / "kg.npz"))
    reference = train(tmp_path, program, data)
    for ranks in (2, 4):
        run = train(tmp_path, program, data, backend="mpi", ranks=ranks)
        assert_same_run(reference, run, RTOL, f"rgcn_link on {ranks} ranks")
        for key in ("valid_mrr", "test_mrr", "test_hits@1", "test_hits@10"):
            assert run[key] == pytest.approx(reference[key], rel=1e-3), f"rgcn_link on {ranks} ranks: {key}"


def test_link_prediction_with_adam_matches_one_process(tmp_path):
    """examples/rgcn_link.mp as written: Adam on a featureless embedding table, which the ranks
    step in shares (TableRows).  A rank's first layer reads the table at its ghost rows too,
    whose gradient only their owners compute: those rows must be stepped there as well, and
    the relation weights read on rank 0 at the end must not leave the other ranks waiting."""
    data = str(write_link_npz(tmp_path / "kg.npz"))
    reference = train(tmp_path, "rgcn_link", data, "--predictions", tmp_path / "one.npz")
    expected = np.load(tmp_path / "one.npz")
    for ranks in (2, 4):
        out = tmp_path / f"ranks-{ranks}.npz"
        run = train(tmp_path, "rgcn_link", data, "--predictions", out, backend="mpi", ranks=ranks, timeout=300)
        assert_same_run(reference, run, RTOL, f"rgcn_link (adam) on {ranks} ranks")
        assert run["test_mrr"] == pytest.approx(reference["test_mrr"], rel=1e-3), f"{ranks} ranks"
        # --predictions: the embeddings gathered from every rank, and the relation rows
        for name in ("embeddings", "relations"):
            np.testing.assert_allclose(np.load(out)[name], expected[name], rtol=1e-4, atol=1e-5,
                                       err_msg=f"{name} on {ranks} ranks")


MEAN_OVER_OUT_EDGES = """
function outMean(Graph g, propNode<float[F]> x, propNode<int[C]> y) {
    weight<float[F][C]> W = glorot;
    propNode<float[F]> h;  propNode<float[C]> o;
    gnn.optimizer("sgd", lr = 0.1);
    for (int epoch = 0; epoch < 3; epoch++) {
        forall (v in g.nodes()) { v.h = Mean(e in v.outgoing_edges(): e.dst.x * 2.0); }
        forall (v in g.nodes()) { v.o = v.h * W; }
        gnn.loss(o, "cross_entropy");
        gnn.backPropagation();
        gnn.optimizerStep();
    }
}
"""


def test_a_mean_over_out_edges_matches_one_process(tmp_path):
    """A rank holds only the edges into its own nodes, so it sees part of a node's out-edges: each
    rank divides its share's sum by the global out-degree and the owner adds the shares (each
    rank's own mean, summed, was wrong from the first loss on; found by tests/fuzz/mpi_campaign.py,
    seed 26)."""
    program = tmp_path / "out_mean.mp"
    program.write_text(MEAN_OVER_OUT_EDGES)
    reference = train(tmp_path, program, SYNTHETIC)
    assert_same_run(reference, train(tmp_path, program, SYNTHETIC, backend="mpi", ranks=3), RTOL,
                    "a mean over out-edges on 3 ranks")


MAX_OVER_OUT_EDGES = """
function outMax(Graph g, propNode<float[F]> x, propNode<int[C]> y) {
    weight<float[F][8]> W1 = glorot;  weight<float[F][8]> W2 = glorot;  weight<float[8][C]> W3 = glorot;
    propNode<float[8]> h;  propNode<float[8]> m;  propNode<float[C]> o;
    gnn.optimizer("adam", lr = 0.01);
    for (int epoch = 0; epoch < 4; epoch++) {
        forall (v in g.nodes()) { v.h = tanh(v.x * W1); }
        forall (v in g.nodes()) {
            v.m = Max(e in v.outgoing_edges(): e.dst.h) + Max(e in v.outgoing_edges(): tanh(e.dst.x * W2) * e.src.h);
        }
        forall (v in g.nodes()) { v.o = Mean(u in g.neighbors(v): u.m) * W3; }
        gnn.loss(o, "cross_entropy");
        gnn.backPropagation();
        gnn.optimizerStep();
    }
}
"""


def test_a_max_over_out_edges_matches_one_process(tmp_path):
    """Each rank's max covers the out-edges it holds; the owners take the max of the shares and
    send back the edge that won, whose rank alone passes the gradient on (a rank that kept its
    own share's winner would pass gradients from several edges)."""
    program = tmp_path / "out_max.mp"
    program.write_text(MAX_OVER_OUT_EDGES)
    reference = train(tmp_path, program, SYNTHETIC)
    for ranks in RANKS:
        assert_same_run(reference, train(tmp_path, program, SYNTHETIC, backend="mpi", ranks=ranks), RTOL,
                        f"a max over out-edges on {ranks} ranks")


def test_basis_decomposition_matches_one_process(tmp_path):
    data = save_npz(typed_dataset(features=None, nodes=64, edges=320), tmp_path / "typed.npz")
    reference = train(tmp_path, "rgcn_bases", data)
    assert_same_run(reference, train(tmp_path, "rgcn_bases", data, backend="mpi", ranks=2), RTOL,
                    "rgcn_bases (featureless) on 2 ranks")


@pytest.mark.parametrize("model,dataset", [("sage", "cora"), ("rgcn", "aifb")])
def test_real_datasets_match_one_process(tmp_path, model, dataset):
    """Cora's sparse features (the sparse feature path), aifb's featureless typed graph."""
    data = str(datasets_dir() / f"{dataset}.npz")
    reference = train(tmp_path, model, data, epochs=3)
    run = train(tmp_path, model, data, backend="mpi", ranks=2, epochs=3)
    assert run["feature_path"] == reference["feature_path"]
    assert_same_run(reference, run, RTOL, f"{model} on {dataset}, 2 ranks")


@pytest.mark.parametrize("sizes", ["features=3,classes=6", "features=24,classes=4"])
def test_aggregations_hoisted_out_of_the_epoch_match_one_process(tmp_path, sizes):
    """SGC's two propagations of the features are computed once, at load time, on every backend.
    The second reads the first at edge sources, so the first's ghost rows are exchanged then.
    With fewer classes than features the second hop is first put after the product, then
    hoisted as the aggregation of an invariant value with the product after it."""
    data = SYNTHETIC.replace("features=24,classes=4", sizes)
    reference = train(tmp_path, "sgc", data)
    assert reference["hoisted_aggregations"] == 2
    for ranks in (2, 4):
        run = train(tmp_path, "sgc", data, backend="mpi", ranks=ranks)
        assert run["hoisted_aggregations"] == 2
        assert_same_run(reference, run, RTOL, f"sgc, hoisted, on {ranks} ranks")


@pytest.mark.parametrize("model,layout,ranks", [("rgat", "compact", 2), ("hgt", "compact", 4), ("hgt", "edge", 2)])
def test_typed_linears_of_source_rows_match_one_process_in_every_layout(tmp_path, model, layout, ranks):
    """The products of rows read at edge sources (passes/edge_typed_linear.py): ghost rows
    exchanged before them, and HGT's input gradients of its keys and values, which land in ghost
    rows too, sent back to their owners; against one process with the rows gathered first."""
    data = save_npz(typed_dataset(features=7, nodes=64, edges=320), tmp_path / "typed.npz")
    reference = train(tmp_path, model, data, "--edge-typed-layout", "gathered")
    run = train(tmp_path, model, data, "--edge-typed-layout", layout, backend="mpi", ranks=ranks, tag=layout)
    assert_same_run(reference, run, RTOL, f"{model} ({layout}) on {ranks} ranks")


def test_typed_linears_of_sparse_feature_rows_match_one_process(tmp_path):
    """R-GAT on sparse features (the sparse feature path): each rank reads its own and its ghost
    rows' CSR features in place; against one process with the rows gathered first."""
    import dataclasses
    import numpy as np
    import scipy.sparse as sp
    ds = typed_dataset(features=40, nodes=64, edges=320)
    x = ds.features.copy()
    x[np.random.default_rng(2).random(x.shape) < 0.95] = 0.0
    data = save_npz(dataclasses.replace(ds, features=sp.csr_matrix(x)), tmp_path / "sparse.npz")
    reference = train(tmp_path, "rgat", data, "--edge-typed-layout", "gathered")
    assert reference["feature_path"] == "dense"        # the gathered rows need them dense
    run = train(tmp_path, "rgat", data, backend="mpi", ranks=2)
    assert run["feature_path"] == "sparse"
    assert_same_run(reference, run, RTOL, "rgat (sparse features) on 2 ranks")
