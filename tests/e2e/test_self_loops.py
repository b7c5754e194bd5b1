"""gnn.addSelfLoops: the loader adds one loop per node that has none, and a GCN that relies on
the graph's loops computes exactly what the GCN that adds the self term itself computes."""
import dataclasses

import numpy as np
import pytest

import morphgen
from morphgen.graph import Graph, GraphError, with_self_loops

from tests.e2e.support import EXAMPLES, small_dataset, typed_dataset


def test_loops_are_added_only_where_missing_and_edges_keep_their_ids():
    g = Graph(4, np.array([0, 1, 2, 2]), np.array([1, 1, 0, 3]))
    looped = with_self_loops(g)
    assert looped.num_edges == 7                       # node 1 already had its loop
    assert np.array_equal(looped.src[:4], g.src) and np.array_equal(looped.dst[:4], g.dst)
    assert sorted(zip(looped.src[4:], looped.dst[4:])) == [(0, 0), (2, 2), (3, 3)]
    assert with_self_loops(looped) is looped


def test_a_graph_with_edge_types_is_refused_by_name():
    with pytest.raises(GraphError, match="gnn.addSelfLoops: the graph has edge types"):
        with_self_loops(typed_dataset().graph)


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
