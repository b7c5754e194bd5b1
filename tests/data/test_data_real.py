"""The shared real datasets load with the counts of their README."""
import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from morphgen.data import DataError, load_dataset, load_graph

DATASETS = Path(os.environ.get("MORPHGEN_TEST_DATASETS", "/work/shared/datasets"))


def _load(name):
    return load_dataset(name, data_dir=DATASETS)


@pytest.mark.parametrize("name,nodes,edges,feats,nnz,classes,split", [
    ("cora", 2708, 10556, 1433, 49216, 7, (140, 500, 1000)),
    ("citeseer", 3327, 9104, 3703, 105165, 6, (120, 500, 1000)),
])
def test_planetoid_npz(name, nodes, edges, feats, nnz, classes, split):
    ds = _load(name)
    assert (ds.num_nodes, ds.num_edges, ds.num_features, ds.num_classes) == (nodes, edges, feats, classes)
    assert sp.issparse(ds.features) and ds.features.dtype == np.float32 and ds.features.nnz == nnz
    assert ds.feature_sparsity == pytest.approx(1 - nnz / (nodes * feats))
    assert (int(ds.train_mask.sum()), int(ds.val_mask.sum()), int(ds.test_mask.sum())) == split
    # 20 training nodes per class, ids 0..139 (resp. 0..119)
    assert np.bincount(ds.labels[ds.train_mask], minlength=classes).tolist() == [20] * classes
    assert np.flatnonzero(ds.train_mask).tolist() == list(range(split[0]))
    # symmetric, no self loops
    fwd = set(zip(ds.graph.src.tolist(), ds.graph.dst.tolist()))
    assert all((d, s) in fwd for s, d in fwd)
    assert not np.any(ds.graph.src == ds.graph.dst)


def test_citeseer_padded_rows_are_unlabelled():
    ds = _load("citeseer")
    unl = np.flatnonzero(ds.labels == -1)
    assert len(unl) == 15
    assert ds.features[unl].nnz == 0
    assert not (ds.train_mask | ds.val_mask | ds.test_mask)[unl].any()


@pytest.mark.parametrize("name,nodes,edges,etypes,ntypes,classes,train,test", [
    ("aifb", 8285, 58086, 90, 11, 4, 140, 36),
    ("mutag", 23644, 148454, 46, 7, 2, 272, 68),
])
def test_relational(name, nodes, edges, etypes, ntypes, classes, train, test):
    ds = _load(name)
    g = ds.graph
    assert (g.num_nodes, g.num_edges, g.num_etypes, g.num_ntypes) == (nodes, edges, etypes, ntypes)
    assert ds.is_relational and ds.features is None and ds.num_features == nodes
    assert ds.num_classes == classes
    assert (int(ds.train_mask.sum()), int(ds.val_mask.sum()), int(ds.test_mask.sum())) == (train, 0, test)
    assert g.meta["inverse_edge_type_offset"] == etypes // 2
    # labelled nodes are exactly train + test, all of the target type
    assert int((ds.labels >= 0).sum()) == train + test
    assert ds.feature_sparsity == pytest.approx(1 - 1 / nodes)


def test_heco_per_type_features_side_by_side():
    ds = _load("acm_heco")
    assert ds.num_classes == 3 and (ds.num_nodes, ds.num_edges, ds.graph.num_etypes) == (11246, 34852, 4)
    x = ds.features
    assert sp.issparse(x) and x.shape == (11246, 1902 + 1902 + 60)
    assert [b["columns"] for b in ds.meta["feature_blocks"]] == [[0, 1902], [1902, 3804], [3804, 3864]]
    raw = np.load(DATASETS / "acm_heco.npz")
    paper = sp.csr_matrix((raw["x_paper_data"], raw["x_paper_indices"], raw["x_paper_indptr"]),
                          shape=tuple(raw["x_paper_shape"]))
    assert (x[:4019, :1902] != paper).nnz == 0 and x[:4019, 1902:].nnz == 0
    assert x[4019:11186, 1902:3804].nnz == 888869 and x[4019:11186, :1902].nnz == 0
    subject = x[11186:, 3804:].toarray()                          # no features: one-hot per node
    assert np.array_equal(subject, np.eye(60, dtype=np.float32)) and x[11186:, :3804].nnz == 0


def test_heco_loads_featureless_when_asked():
    ds = load_dataset("acm_heco", data_dir=DATASETS, per_type_features=False)
    assert ds.features is None
    assert any("author, paper" in note for note in ds.meta["notes"])


def test_snap_facebook_graph_only():
    g = load_graph("snap_facebook", data_dir=DATASETS)
    assert (g.num_nodes, g.num_edges) == (4039, 88234)
    s = load_graph(DATASETS / "snap_facebook.npz", symmetrise=True)
    assert s.num_edges == 176468
    with pytest.raises(DataError, match="labels are required for training"):
        _load("snap_facebook")


def test_symmetrise_refuses_typed_graphs():
    with pytest.raises(DataError, match="edge types"):
        load_graph("aifb", data_dir=DATASETS, symmetrise=True)
