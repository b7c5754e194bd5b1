"""gnn.addSelfLoops: the loader adds one loop per node that has none, and a GCN that relies on
the graph's loops computes exactly what the GCN that adds the self term itself computes."""
import dataclasses

import numpy as np
import pytest

import morphgen
from morphgen.graph import Graph, with_self_loops

from tests.e2e.support import EXAMPLES, small_dataset, typed_dataset


def test_loops_are_added_only_where_missing_and_edges_keep_their_ids():
    g = Graph(4, np.array([0, 1, 2, 2]), np.array([1, 1, 0, 3]))
    looped = with_self_loops(g)
    assert looped.num_edges == 7                       # node 1 already had its loop
    assert np.array_equal(looped.src[:4], g.src) and np.array_equal(looped.dst[:4], g.dst)
    assert sorted(zip(looped.src[4:], looped.dst[4:])) == [(0, 0), (2, 2), (3, 3)]
    assert with_self_loops(looped) is looped


def test_a_typed_graph_gets_a_loop_of_a_new_edge_type_at_every_node():
    g = typed_dataset().graph
    looped = with_self_loops(g)
    n, e, t = g.num_nodes, g.num_edges, g.num_etypes
    assert (looped.num_edges, looped.num_etypes) == (e + n, t + 1)
    assert np.array_equal(looped.src[:e], g.src) and np.array_equal(looped.etype[:e], g.etype)
    assert np.array_equal(looped.src[e:], np.arange(n)) and np.array_equal(looped.dst[e:], np.arange(n))
    assert (looped.etype[e:] == t).all() and np.array_equal(looped.ntype, g.ntype)


RGCN = """function rgcn(Graph g, propNode<float[F]> x, propNode<int[C]> y) {
    weight<float[g.etypes][F][C]> W = glorot;
SELF    gnn.optimizer("adam", lr = 0.01);
    for (int epoch = 0; epoch < 5; epoch++) {
        forall (v in g.nodes()) { v.out = Sum(e in v.incoming_edges(): e.src.x * W[e.etype] / e.rel_degree)TERM; }
        gnn.loss(out, "cross_entropy");
        gnn.backPropagation();
        gnn.optimizerStep();
    }
}
"""


def test_rgcn_over_typed_loops_equals_rgcn_with_its_self_weight(tmp_path):
    """The loop type's W[T] is R-GCN's self weight: a loop is its node's only in-edge of that type."""
    explicit = tmp_path / "explicit.mp"
    explicit.write_text(RGCN.replace("SELF", "    weight<float[F][C]> S = glorot;  propNode<float[C]> out;\n")
                        .replace("TERM", " + v.x * S"))
    looped = tmp_path / "looped.mp"
    looped.write_text(RGCN.replace("SELF", "    propNode<float[C]> out;\n    gnn.addSelfLoops();\n")
                      .replace("TERM", ""))
    data = typed_dataset(features=5)
    a = morphgen.compile(explicit, threads=2, seed=3)
    b = morphgen.compile(looped, threads=2, seed=3)
    a.bind(data)
    b.bind(data)
    assert b.dataset.graph.num_etypes == data.graph.num_etypes + 1
    w, s = a.get_params()["W"], a.get_params()["S"]
    b.set_params({"W": np.concatenate([w, s])})
    losses = [[row["loss"] for row in m.fit(epochs=5, eval_every=0).history] for m in (a, b)]
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)


def _without_loops(ds):
    g = ds.graph
    keep = g.src != g.dst
    return dataclasses.replace(ds, graph=Graph(g.num_nodes, g.src[keep], g.dst[keep]))


def test_gcn_over_the_looped_graph_equals_gcn_adding_its_self_term(tmp_path):
    source = (EXAMPLES / "gcn.mp").read_text()
    looped = tmp_path / "gcn_loops.mp"
    looped.write_text(source.replace('gnn.normalizeFeatures("row");',
                                     'gnn.normalizeFeatures("row");\n    gnn.addSelfLoops();'))
    assert looped.read_text() != source
    data = _without_loops(small_dataset())
    runs = []
    for path in (EXAMPLES / "gcn.mp", looped):
        model = morphgen.compile(path, threads=2, seed=3)
        runs.append(model.fit(data, epochs=5, eval_every=0))
        assert model.dataset.graph.num_edges == data.graph.num_edges + (path == looped) * data.graph.num_nodes
    plain, with_loops = ([row["loss"] for row in r.history] for r in runs)
    np.testing.assert_allclose(with_loops, plain, rtol=1e-5)
    assert runs[0].final["test_acc"] == runs[1].final["test_acc"]


def test_train_notes_nodes_whose_stored_loop_gcn_counts_again(tmp_path):
    """A + I on a graph that already has v -> v: the node counts itself twice (PyG's GCNConv adds
    only missing loops); `train` says so and names gnn.addSelfLoops, SAGE (no self term) does not."""
    from morphgen.commands import nodes_counting_themselves_twice
    from morphgen.pipeline import lower, sizes_of
    data = small_dataset()
    g = data.graph
    looped = dataclasses.replace(data, graph=Graph(g.num_nodes, np.concatenate([g.src, [0, 3, 3]]),
                                                   np.concatenate([g.dst, [0, 3, 3]])))
    counts = {name: nodes_counting_themselves_twice(lower(EXAMPLES / f"{name}.mp", sizes_of(looped)), looped.graph)
              for name in ("gcn", "sage")}
    assert counts == {"gcn": 2, "sage": 0}
