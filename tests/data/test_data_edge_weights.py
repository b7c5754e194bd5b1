"""Edge weights in the data: read from an .npz file's 'edge_weight', written back by save_npz,
drawn by the synthetic generator, kept through self loops, and refused with the field named
when they are malformed."""
import numpy as np
import pytest

from morphgen.data import DataError, load_dataset, save_npz, synthetic_dataset
from morphgen.data.resolve import symmetrise_graph
from morphgen.graph import Graph, with_self_loops
from morphgen.layout import GraphLayout

SMALL = dict(nodes=300, edges=2000, features=8, classes=3, val=50, test=100, seed=1)


def test_the_synthetic_weights_lie_on_the_unweighted_graph_and_favour_one_class():
    plain, weighted = synthetic_dataset(**SMALL), synthetic_dataset(**SMALL, weighted=1)
    assert plain.graph.edge_weight is None
    g, w = weighted.graph, weighted.graph.edge_weight
    assert np.array_equal(g.src, plain.graph.src) and np.array_equal(g.dst, plain.graph.dst)
    assert np.array_equal(weighted.features, plain.features) and np.array_equal(weighted.labels, plain.labels)
    assert w.dtype == np.float32 and w.shape == (g.num_edges,)
    same = weighted.labels[g.src] == weighted.labels[g.dst]
    assert same.any() and (~same).any()
    assert w[same].min() >= 1.0 and w[same].max() < 2.0 and w[~same].min() >= 0.1 and w[~same].max() < 1.0
    assert np.array_equal(w, synthetic_dataset(**SMALL, weighted=1).graph.edge_weight)     # seeded
    assert "(weighted)" in weighted.summary() and "(weighted)" not in plain.summary()


def test_the_synthetic_spec_takes_weighted_and_refuses_other_values():
    assert load_dataset("synthetic:nodes=200,edges=1000,weighted=1").graph.edge_weight is not None
    with pytest.raises(DataError, match="synthetic: weighted: must be 0 or 1, got 2"):
        load_dataset("synthetic:nodes=200,edges=1000,weighted=2")


def test_npz_files_keep_the_weights(tmp_path):
    ds = synthetic_dataset(**SMALL, weighted=1)
    path = save_npz(ds, tmp_path / "w.npz")
    with np.load(path) as z:
        assert z["edge_weight"].dtype == np.float32
    assert np.array_equal(load_dataset(path).graph.edge_weight, ds.graph.edge_weight)


def _write(tmp_path, weight):
    arrays = dict(np.load(save_npz(synthetic_dataset(**SMALL), tmp_path / "plain.npz")))
    arrays["edge_weight"] = weight
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    return path, arrays["edge_index"].shape[1]


@pytest.mark.parametrize("case,words", [
    ("short", ["edge_weight: shape (5,) != (2000,), one weight per edge"]),
    ("two-d", ["edge_weight: shape (2000, 1)"]),
    ("nan", ["edge_weight: entry 7 is nan, not a finite number"]),
    ("huge", ["edge_weight: entry 3 is 1e+300, not a finite number (or too large for float32)"]),
    ("bool", ["edge_weight: dtype bool is not a number type"]),
])
def test_malformed_weights_are_refused_naming_the_field(tmp_path, case, words):
    e = 2000
    weight = {"short": lambda: np.ones(5), "two-d": lambda: np.ones((e, 1)),
              "nan": lambda: np.where(np.arange(e) == 7, np.nan, 1.0),
              "huge": lambda: np.where(np.arange(e) == 3, 1e300, 1.0),
              "bool": lambda: np.ones(e, bool)}[case]()
    path, edges = _write(tmp_path, weight)
    assert edges == e
    with pytest.raises(DataError) as info:
        load_dataset(path)
    assert str(path) in str(info.value)
    for word in words:
        assert word in str(info.value)


def test_integer_weights_are_read_as_floats(tmp_path):
    path, e = _write(tmp_path, np.arange(2000) % 3 + 1)
    w = load_dataset(path).graph.edge_weight
    assert w.dtype == np.float32 and np.array_equal(w, (np.arange(e) % 3 + 1).astype(np.float32))


@pytest.mark.parametrize("typed", [False, True])
def test_added_self_loops_weigh_one(typed):
    g = Graph(4, np.array([0, 1, 2]), np.array([1, 2, 2]), edge_weight=np.array([0.5, 2.0, 3.0]),
              etype=np.array([0, 1, 0]) if typed else None, num_etypes=2 if typed else 1)
    looped = with_self_loops(g)
    added = looped.num_edges - g.num_edges
    assert added == (4 if typed else 3)                   # untyped: node 2 has its loop already
    assert np.array_equal(looped.edge_weight, np.concatenate([[0.5, 2.0, 3.0], np.ones(added)]))


def test_the_layout_carries_the_weights_in_its_edge_order():
    g = Graph(3, np.array([2, 0, 1, 0]), np.array([1, 2, 0, 1]), edge_weight=np.array([1.0, 2.0, 3.0, 4.0]))
    layout = GraphLayout.from_graph(g)
    assert np.array_equal(layout.edge_weight, g.edge_weight[layout.order])
    assert layout.nbytes() >= layout.edge_weight.nbytes + layout.col.nbytes


def test_symmetrising_refuses_weights_it_would_have_to_merge():
    g = Graph(3, np.array([0, 1]), np.array([1, 0]), edge_weight=np.array([1.0, 2.0]))
    with pytest.raises(DataError, match="symmetrise: the graph has edge weights"):
        symmetrise_graph(g)
