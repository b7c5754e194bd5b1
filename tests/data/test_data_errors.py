"""Every malformed input gives a DataError naming the field (never a KeyError/IndexError)."""
import re

import numpy as np
import pytest
import scipy.sparse as sp

from morphgen.data import DataError, Dataset, load_dataset, load_graph
from morphgen.graph import Graph

N, F, C = 2708, 5, 3


def _valid_arrays():
    rng = np.random.default_rng(0)
    x = sp.random(N, F, density=0.3, format="csr", dtype=np.float32, random_state=1)
    y = rng.integers(0, C, N).astype(np.int64)
    train = np.zeros(N, bool); train[:30] = True
    val = np.zeros(N, bool); val[30:60] = True
    test = np.zeros(N, bool); test[60:100] = True
    src = rng.integers(0, N, 40)
    dst = rng.integers(0, N, 40)
    return {"edge_index": np.stack([src, dst]).astype(np.int64), "x_indptr": x.indptr.astype(np.int64),
            "x_indices": x.indices.astype(np.int64), "x_data": x.data, "x_shape": np.array([N, F]),
            "y": y, "train_mask": train, "val_mask": val, "test_mask": test}


def _write(tmp_path, arrays, name="bad.npz"):
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


def _expect(tmp_path, arrays, pattern):
    path = _write(tmp_path, arrays)
    with pytest.raises(DataError, match=pattern) as info:
        load_dataset(path)
    assert "bad.npz" in str(info.value)       # the file is named
    return info.value


def test_valid_fixture_loads(tmp_path):
    ds = load_dataset(_write(tmp_path, _valid_arrays()))
    assert ds.num_nodes == N and ds.num_classes == C


def test_edge_index_out_of_range(tmp_path):
    a = _valid_arrays()
    a["edge_index"][0, 17] = 9999
    _expect(tmp_path, a, r"edge_index\[0\] entry 17 is 9999, outside \[0, 2708\)")
    a = _valid_arrays()
    a["edge_index"][1, 3] = -1
    _expect(tmp_path, a, r"edge_index\[1\] entry 3 is -1, outside \[0, 2708\)")


def test_edge_index_bad_shape_and_dtype(tmp_path):
    a = _valid_arrays()
    a["edge_index"] = np.zeros((3, 4), np.int64)
    err = _expect(tmp_path, a, r"edge_index: shape \(3, 4\), expected \(2, E\)")
    assert "transpose" not in str(err)
    a = _valid_arrays()
    a["edge_index"] = a["edge_index"].T.copy()          # one row per edge, as many tools write it
    _expect(tmp_path, a, r"edge_index: shape \(40, 2\), expected \(2, E\) \(one row per edge: store its transpose\)")
    a = _valid_arrays()
    a["edge_index"] = a["edge_index"].astype(np.float64)
    _expect(tmp_path, a, r"edge_index: dtype float64, expected an integer array")


def test_nan_and_inf_features_name_row_and_column(tmp_path):
    a = _valid_arrays()
    row = 7
    pos = a["x_indptr"][row]
    assert a["x_indptr"][row + 1] > pos, "fixture row 7 must hold a stored value"
    a["x_data"][pos] = np.nan
    _expect(tmp_path, a, rf"features: non-finite value nan at row 7, column {a['x_indices'][pos]}")
    dense = _valid_arrays()
    for k in ("x_indptr", "x_indices", "x_data", "x_shape"):
        dense.pop(k)
    dense["x"] = np.zeros((N, F), np.float32)
    dense["x"][11, 4] = np.inf
    _expect(tmp_path, dense, r"features: non-finite value inf at row 11, column 4")


def test_features_given_both_dense_and_sparse_are_refused(tmp_path):
    a = _valid_arrays()
    a["x"] = np.zeros(tuple(a["x_shape"]), np.float32)
    _expect(tmp_path, a, r"x: the features are given twice, dense \(x\) and sparse")


def test_label_length_mismatch(tmp_path):
    a = _valid_arrays()
    a["y"] = a["y"][:-1]
    a["num_nodes"] = np.int64(N)
    _expect(tmp_path, a, r"y has 2707 rows, expected 2708")


def test_labels_outside_classes(tmp_path):
    a = _valid_arrays()
    a["num_classes"] = np.int64(C)
    a["y"][42] = 5
    _expect(tmp_path, a, r"y entry 42 \(node 42\) is 5, outside \[0, 3\)")
    a = _valid_arrays()
    a["y"][9] = -4
    _expect(tmp_path, a, r"y entry 9 \(node 9\) is -4")


def test_overlapping_masks(tmp_path):
    a = _valid_arrays()
    a["test_mask"][25] = True
    _expect(tmp_path, a, r"train_mask and test_mask overlap: 1 node\(s\), first is node 25")
    a = _valid_arrays()
    a["val_mask"][70] = True
    _expect(tmp_path, a, r"val_mask and test_mask overlap")


def test_empty_train_is_an_error_empty_val_is_not(tmp_path):
    a = _valid_arrays()
    a["train_mask"][:] = False
    _expect(tmp_path, a, r"train_mask: is empty")
    a = _valid_arrays()
    a["val_mask"][:] = False
    assert load_dataset(_write(tmp_path, a, "ok.npz")).val_mask.sum() == 0
    a = _valid_arrays()
    a["test_mask"][:] = False
    _expect(tmp_path, a, r"test_mask: is empty")


def test_mask_selects_unlabelled_node(tmp_path):
    a = _valid_arrays()
    a["y"][3] = -1
    _expect(tmp_path, a, r"train_mask: node 3 is selected but unlabelled")


def test_missing_keys_name_key_and_file(tmp_path):
    for key in ("train_mask", "edge_index", "x_indices"):
        a = _valid_arrays()
        a.pop(key)
        _expect(tmp_path, a, rf"missing key '{key}'")
    a = _valid_arrays()
    a.pop("y")
    _expect(tmp_path, a, r"has no labels \(key 'y'\); labels are required for training")
    # a typed graph must say how many types it has
    a = _valid_arrays()
    a["edge_type"] = np.zeros(a["edge_index"].shape[1], np.int64)
    _expect(tmp_path, a, r"missing key 'num_edge_types'")


@pytest.mark.parametrize("alias", ["features", "X", "node_features"])
def test_features_under_another_name_are_refused_not_dropped(tmp_path, alias):
    # without the format's x keys the file would load featureless, the user's features unread
    a = _valid_arrays()
    dense = sp.csr_matrix((a.pop("x_data"), a.pop("x_indices"), a.pop("x_indptr")), shape=a.pop("x_shape"))
    a[alias] = dense.toarray()
    err = _expect(tmp_path, a, rf"key '{alias}' is not read: this format takes node features from 'x' ")
    assert "x_indptr" in str(err) and "rename it" in str(err)


@pytest.mark.parametrize("alias", ["labels", "Y"])
def test_labels_under_another_name_are_refused(tmp_path, alias):
    a = _valid_arrays()
    a[alias] = a.pop("y")
    _expect(tmp_path, a, rf"key '{alias}' is not read: this format takes node labels from 'y' ")


def test_other_names_beside_the_format_keys_are_left_alone(tmp_path):
    a = _valid_arrays()
    a["features"] = np.zeros((N, 2), np.float32)     # x_* present: extra keys are the file's own
    a["labels"] = a["y"].copy()
    assert load_dataset(_write(tmp_path, a)).num_features == F


def test_graph_only_npz_needs_num_nodes(tmp_path):
    path = tmp_path / "bad.npz"
    np.savez(path, edge_index=np.zeros((2, 1), np.int64))
    with pytest.raises(DataError, match=r"bad.npz: missing key 'num_nodes'"):
        load_graph(path)


def test_one_hot_labels_are_named_as_such(tmp_path):
    a = _valid_arrays()
    a["y"] = np.eye(C, dtype=np.int64)[a["y"]]
    _expect(tmp_path, a, r"y \(labels\): shape \(2708, 3\), expected 1-D \[num_nodes\] \(one-hot rows\? "
                         r"store each row's class index, y.argmax\(1\)\)")


def test_wrong_dtypes(tmp_path):
    a = _valid_arrays()
    a["train_mask"] = a["train_mask"].astype(np.int64)
    _expect(tmp_path, a, r"train_mask: dtype int64, expected bool")
    a = _valid_arrays()
    a["y"] = a["y"].astype(np.float32)
    _expect(tmp_path, a, r"y: dtype float32, expected int64")
    a = _valid_arrays()
    a["x_data"] = a["x_data"].astype(np.int32)
    _expect(tmp_path, a, r"x_data: dtype int32, expected float32")


def test_wrong_shapes(tmp_path):
    a = _valid_arrays()
    a["x_indptr"] = a["x_indptr"][:-1]
    _expect(tmp_path, a, r"x_indptr: length 2708, expected 2709")
    a = _valid_arrays()
    a["x_indices"][0] = F + 2
    _expect(tmp_path, a, rf"x_indices entry 0 is {F + 2}, outside \[0, {F}\)")
    a = _valid_arrays()
    a["val_mask"] = a["val_mask"][:100]
    _expect(tmp_path, a, r"val_mask has shape \(100,\), expected \(2708,\)")
    a = _valid_arrays()
    a["x_shape"] = np.array([N - 1, F])
    a["num_nodes"] = np.int64(N)
    _expect(tmp_path, a, r"x_shape: 2707 rows, expected 2708")


def test_edge_type_out_of_range(tmp_path):
    a = _valid_arrays()
    a["edge_type"] = np.full(a["edge_index"].shape[1], 4, np.int64)
    a["num_edge_types"] = np.int64(2)
    _expect(tmp_path, a, r"edge_type: values must lie in \[0, 2\)")


def test_bad_meta_and_bad_archives(tmp_path):
    a = _valid_arrays()
    a["meta"] = np.array("{not json")
    _expect(tmp_path, a, r"meta: not valid JSON")
    junk = tmp_path / "bad.npz"
    junk.write_bytes(b"hello")
    with pytest.raises(DataError, match=r"bad.npz: not a readable .npz archive"):
        load_dataset(junk)
    a = _valid_arrays()
    path = _write(tmp_path, a)
    np.savez(path, **{**a, "meta": np.array([{"x": 1}], dtype=object)})
    with pytest.raises(DataError, match=r"meta: expected a 0-d JSON string|cannot be read without unpickling"):
        load_dataset(path)


@pytest.mark.parametrize("value", ["true", "-3", "2.5", "\"7\""])
def test_a_class_count_in_meta_that_is_not_a_count_is_named(tmp_path, value):
    """JSON true is an int to Python: it must not become one class."""
    a = _valid_arrays()
    a["meta"] = np.array('{"num_classes": %s}' % value)
    _expect(tmp_path, a, r"meta: num_classes: expected a non-negative integer, got " + re.escape(value))


def test_missing_path_and_unknown_option(tmp_path):
    with pytest.raises(DataError, match=r"nothere.npz: no such file or directory"):
        load_dataset(tmp_path / "nothere.npz")
    with pytest.raises(DataError, match=r"unknown option 'feature_fromat'; did you mean 'feature_format'"):
        load_dataset(_write(tmp_path, _valid_arrays()), feature_fromat="csr")
    with pytest.raises(DataError, match=r"feature_format: must be one of dense, csr"):
        load_dataset(_write(tmp_path, _valid_arrays()), feature_format="coo")


def test_dataset_constructor_validates():
    g = Graph(4, np.array([0, 1]), np.array([1, 2]))
    y = np.array([0, 1, 0, 1], np.int64)
    masks = [np.array(m, bool) for m in ([1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 1])]
    ok = Dataset("t", g, np.ones((4, 2), np.float32), y, *masks, num_classes=2)
    assert ok.num_features == 2 and ok.feature_sparsity == 0.0
    with pytest.raises(DataError, match=r"features: dtype float64, expected float32"):
        Dataset("t", g, np.ones((4, 2)), y, *masks, num_classes=2)
    with pytest.raises(DataError, match=r"features: 3 rows, expected 4"):
        Dataset("t", g, np.ones((3, 2), np.float32), y, *masks, num_classes=2)
    with pytest.raises(DataError, match=r"y \(labels\): dtype int32, expected int64"):
        Dataset("t", g, None, y.astype(np.int32), *masks, num_classes=2)
    with pytest.raises(DataError, match=r"num_classes: must be a positive integer"):
        Dataset("t", g, None, y, *masks, num_classes=0)


def test_data_error_is_a_user_error():
    from morphgen.errors import UserError
    assert issubclass(DataError, UserError) and issubclass(DataError, ValueError)


def _typed_arrays():
    """Two node types (a: 0..999 with dense features, b: 1000.. without), no homogeneous x."""
    a = {k: v for k, v in _valid_arrays().items() if not k.startswith("x_")}
    ntype = np.zeros(N, np.int64)
    ntype[1000:] = 1
    a.update(node_type=ntype, num_node_types=np.int64(2), x_a=np.ones((1000, 4), np.float32),
             meta=np.array('{"node_type_names": ["a", "b"]}'))
    return a


def test_per_type_features_load_as_blocks(tmp_path):
    ds = load_dataset(_write(tmp_path, _typed_arrays()))
    assert ds.features.shape == (N, 4 + N - 1000)
    assert ds.features[:1000, :4].sum() == 4000 and ds.features[1000:, 4:].sum() == N - 1000


@pytest.mark.parametrize("change,pattern", [
    (lambda a: a.update(x_c=np.ones((3, 2), np.float32)), r"key 'x_c': 'c' is not a node type"),
    (lambda a: a.update(x_a=np.ones((999, 4), np.float32)), r"x_a: 999 rows, expected 1000"),
    (lambda a: a.update(x_a=np.ones(1000, np.float32)), r"x_a: shape \(1000,\), expected 2-D"),
    (lambda a: a.update(meta=np.array('{"node_type_names": ["a"]}')), r"node_type_names must list the 2"),
    (lambda a: [a.pop("node_type"), a.pop("num_node_types")], r"per-type features .* but no node_type array"),
])
def test_per_type_feature_errors_name_the_key(tmp_path, change, pattern):
    a = _typed_arrays()
    change(a)
    _expect(tmp_path, a, pattern)
