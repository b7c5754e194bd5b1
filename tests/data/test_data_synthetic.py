"""The synthetic generators: determinism, sparsity, structure, learnability, spec strings."""
import numpy as np
import pytest
import scipy.sparse as sp

from morphgen.data import DataError, load_dataset, parse_synthetic_spec, rmat, synthetic_dataset


def _arrays(ds):
    f = ds.features.toarray() if sp.issparse(ds.features) else ds.features
    return [ds.graph.src, ds.graph.dst, f, ds.labels, ds.train_mask, ds.val_mask, ds.test_mask]


def test_same_seed_identical_arrays():
    a, b = synthetic_dataset(seed=4, sparsity=0.7), synthetic_dataset(seed=4, sparsity=0.7)
    for x, y in zip(_arrays(a), _arrays(b)):
        np.testing.assert_array_equal(x, y)
    c = synthetic_dataset(seed=5, sparsity=0.7)
    assert not np.array_equal(a.graph.src, c.graph.src)
    assert not np.array_equal(a.labels, c.labels)


def test_feature_width_does_not_change_the_graph():
    a, b = synthetic_dataset(features=8), synthetic_dataset(features=100)
    np.testing.assert_array_equal(a.graph.src, b.graph.src)
    np.testing.assert_array_equal(a.labels, b.labels)


@pytest.mark.parametrize("sparsity", [0.0, 0.3, 0.5, 0.9, 0.99])
def test_zero_fraction_matches_requested_sparsity(sparsity):
    ds = synthetic_dataset(nodes=2000, features=64, sparsity=sparsity)
    dense = ds.features.toarray() if sp.issparse(ds.features) else ds.features
    zero_fraction = 1.0 - np.count_nonzero(dense) / dense.size
    assert zero_fraction == pytest.approx(sparsity, abs=0.01)
    assert ds.feature_sparsity == pytest.approx(zero_fraction)
    assert ds.features.dtype == np.float32
    assert sp.issparse(ds.features) == (sparsity >= 0.5)


def test_forced_layouts_hold_the_same_values():
    d = synthetic_dataset(sparsity=0.8, format="dense")
    c = synthetic_dataset(sparsity=0.8, format="csr")
    assert isinstance(d.features, np.ndarray) and sp.isspmatrix_csr(c.features)
    np.testing.assert_array_equal(d.features, c.features.toarray())
    assert c.features.has_sorted_indices


def test_featureless():
    ds = synthetic_dataset(features=0)
    assert ds.features is None and ds.num_features == ds.num_nodes


def test_graph_shape():
    ds = synthetic_dataset(nodes=3000, edges=30000)
    g = ds.graph
    assert g.num_edges == 30000
    pairs = g.src * g.num_nodes + g.dst
    assert np.unique(pairs).size == g.num_edges                       # no duplicates
    assert not np.any(g.src == g.dst)                                 # no self loops
    np.testing.assert_array_equal(np.sort(pairs), np.sort(g.dst * g.num_nodes + g.src))  # symmetric
    deg = g.in_degree
    assert deg.max() > 10 * np.median(deg)                            # heavy-tailed degrees


def test_split_sizes():
    ds = synthetic_dataset(classes=5, train_per_class=7, val=100, test=300)
    assert np.bincount(ds.labels[ds.train_mask], minlength=5).tolist() == [7] * 5
    assert (int(ds.val_mask.sum()), int(ds.test_mask.sum())) == (100, 300)
    assert not (ds.train_mask & ds.val_mask).any() and not (ds.val_mask & ds.test_mask).any()


def _centroid_accuracy(ds, hops):
    """Nearest class centroid after ``hops`` rounds of mean aggregation (an SGC-like probe)."""
    g, n = ds.graph, ds.num_nodes
    a = sp.csr_matrix((np.ones(g.num_edges), (g.dst, g.src)), shape=(n, n)) + sp.eye(n)
    a = sp.diags(1.0 / np.asarray(a.sum(1)).ravel()) @ a
    x = ds.features.toarray() if sp.issparse(ds.features) else ds.features.astype(np.float64)
    for _ in range(hops):
        x = a @ x
    x = x / (np.linalg.norm(x, axis=1, keepdims=True) + 1e-12)
    cent = np.stack([x[ds.train_mask & (ds.labels == c)].mean(0) for c in range(ds.num_classes)])
    pred = (x @ cent.T).argmax(1)
    return float((pred[ds.test_mask] == ds.labels[ds.test_mask]).mean())


@pytest.mark.parametrize("sparsity", [0.0, 0.95])
def test_labels_are_learnable_from_structure_and_features(sparsity):
    ds = synthetic_dataset(sparsity=sparsity)
    homophily = float((ds.labels[ds.graph.src] == ds.labels[ds.graph.dst]).mean())
    assert homophily > 0.7
    chance = 1.0 / ds.num_classes
    features_only, with_graph = _centroid_accuracy(ds, 0), _centroid_accuracy(ds, 2)
    assert features_only > chance + 0.1
    assert with_graph > 0.8 and with_graph > features_only + 0.05


def test_spec_string():
    kwargs = parse_synthetic_spec("synthetic:nodes=100000,edges=2000000,features=128,classes=40,"
                                  "sparsity=0.992,seed=1")
    assert kwargs == dict(nodes=100000, edges=2000000, features=128, classes=40, sparsity=0.992, seed=1)
    assert parse_synthetic_spec("synthetic") == {}
    assert parse_synthetic_spec("synthetic:nodes=1e4, edges=2_000")["nodes"] == 10000
    ds = load_dataset("synthetic:nodes=500,edges=2000,val=100,test=200", seed=3)
    assert ds.num_nodes == 500 and ds.num_edges == 2000 and ds.meta["params"]["seed"] == 3


def test_typed_edges_leave_the_rest_of_the_dataset_unchanged():
    plain = load_dataset("synthetic:nodes=500,edges=4000,val=100,test=200")
    typed = load_dataset("synthetic:nodes=500,edges=4000,val=100,test=200,etypes=7")
    assert plain.graph.etype is None and typed.graph.num_etypes == 7
    assert set(np.unique(typed.graph.etype)) == set(range(7))
    np.testing.assert_array_equal(plain.graph.src, typed.graph.src)
    np.testing.assert_array_equal(plain.graph.dst, typed.graph.dst)
    np.testing.assert_array_equal(plain.features, typed.features)
    np.testing.assert_array_equal(plain.labels, typed.labels)


def test_default_spec_is_small():
    ds = load_dataset("synthetic")
    assert (ds.num_nodes, ds.num_edges, ds.num_features, ds.num_classes) == (2000, 20000, 64, 7)


@pytest.mark.parametrize("spec, split", [
    ("synthetic", (140, 500, 1000)),                             # the usual split where it fits
    ("synthetic:nodes=500,edges=2000", (140, 120, 240)),         # the 360 left shared 1:2
    ("synthetic:nodes=100,edges=300", (49, 17, 34)),             # 7 per class: half the smallest class
    ("synthetic:nodes=500,edges=2000,val=50", (140, 50, 310)),   # the given size kept, test what is left
    ("synthetic:nodes=500,edges=2000,test=100", (140, 260, 100)),
])
def test_split_sizes_not_given_fit_a_small_graph(spec, split):
    ds = load_dataset(spec)
    assert (int(ds.train_mask.sum()), int(ds.val_mask.sum()), int(ds.test_mask.sum())) == split
    assert not (ds.train_mask & ds.val_mask).any() and not (ds.val_mask & ds.test_mask).any()
    assert ds.meta["params"]["val"] == split[1]        # the sizes used are recorded


@pytest.mark.parametrize("spec,pattern", [
    ("synthetic:nodez=10", r"unknown option 'nodez'; did you mean 'nodes'"),
    ("synthetic:nodes=abc", r"nodes: expected an integer, got 'abc'"),
    ("synthetic:nodes=1.5", r"nodes: expected an integer"),
    ("synthetic:sparsity=1.5", r"sparsity: must lie in \[0, 1\)"),
    ("synthetic:sparsity=nan", r"sparsity: expected a finite number"),
    ("synthetic:format=coo", r"format: must be one of auto, dense, csr"),
    ("synthetic:etypes=0", r"etypes: must be >= 1, got 0"),
    ("synthetic:nodes=300,val=500,test=1000", r"val: val \+ test = 1500 exceeds the 160 nodes left"),
    ("synthetic:nodes=300,test=200", r"val: val \+ test = 200 exceeds the 160 nodes left"),
    ("synthetic:nodes=100,train_per_class=20", r"train_per_class: 20 exceeds the smallest class \(14 nodes\)"),
    ("synthetic:nodes", r"'nodes': expected key=value"),
    ("synthetic:seed=1,seed=2", r"seed: given twice"),
    ("synthetic:nodes=50,edges=5000,val=5,test=5,train_per_class=1", r"edges: 5000 edges do not fit"),
])
def test_spec_errors(spec, pattern):
    with pytest.raises(DataError, match=pattern):
        load_dataset(spec)


def test_keyword_type_errors():
    with pytest.raises(DataError, match=r"nodes: expected an integer, got '10'"):
        synthetic_dataset(nodes="10")
    with pytest.raises(DataError, match=r"unknown option 'classs'"):
        load_dataset("synthetic", classs=3)


# -- R-MAT ----------------------------------------------------------------------------------
def test_rmat_deterministic_and_clean():
    a, b = rmat(1000, 20000, seed=7), rmat(1000, 20000, seed=7)
    np.testing.assert_array_equal(a.src, b.src)
    np.testing.assert_array_equal(a.dst, b.dst)
    assert a.num_edges == 20000 and not np.any(a.src == a.dst)
    assert a.src.max() < 1000 and a.dst.max() < 1000
    assert not np.array_equal(a.src, rmat(1000, 20000, seed=8).src)


def test_rmat_is_skewed():
    g = rmat(1 << 12, 1 << 16, seed=1)
    deg = g.out_degree + g.in_degree
    assert deg.max() > 10 * deg.mean()
    uniform = rmat(1 << 12, 1 << 16, a=0.25, b=0.25, c=0.25, seed=1)
    assert deg.max() > 3 * (uniform.out_degree + uniform.in_degree).max()


def test_rmat_dedup_and_symmetric():
    g = rmat(300, 6000, seed=2, dedup=True, symmetric=True)
    assert g.num_edges == 6000
    keys = g.src * 300 + g.dst
    assert np.unique(keys).size == 6000
    np.testing.assert_array_equal(np.sort(keys), np.sort(g.dst * 300 + g.src))


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(num_nodes=1, num_edges=5), r"num_nodes must be an integer >= 2"),
    (dict(num_nodes=10, num_edges=-1), r"num_edges must be a non-negative integer"),
    (dict(num_nodes=10, num_edges=5, a=0.6, b=0.3, c=0.3), r"a \+ b \+ c = 1.2 exceeds 1"),
    (dict(num_nodes=10, num_edges=200, dedup=True), r"at most 90"),
])
def test_rmat_errors(kwargs, pattern):
    with pytest.raises(DataError, match=pattern):
        rmat(**kwargs)


def test_guide_table_matches_searchsorted():
    from morphgen.data.synthetic import _InverseCdf
    rng = np.random.default_rng(0)
    cum = np.cumsum((1.0 - rng.random(5000)) ** -2.0)
    u = np.concatenate([rng.random(100000) * cum[-1], [0.0, cum[0], cum[17], np.nextafter(cum[-1], 0)]])
    np.testing.assert_array_equal(_InverseCdf(cum)(u), np.searchsorted(cum, u, side="right"))


def test_sorted_unique_matches_numpy():
    from morphgen.data.keys import sorted_unique
    keys = np.random.default_rng(1).integers(0, 500, 3000)
    np.testing.assert_array_equal(sorted_unique(keys), np.unique(keys))
    assert sorted_unique(np.empty(0, np.int64)).size == 0
