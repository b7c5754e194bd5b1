"""Raw Planetoid conversion on a tiny hand-made ind.* set (pickled like the originals)."""
import os
import pickle
from collections import defaultdict

import numpy as np
import pytest
import scipy.sparse as sp

from morphgen.data import DataError, load_dataset, load_graph, read_planetoid

F, C = 4, 3


def _onehot(classes):
    out = np.zeros((len(classes), C))
    for i, c in enumerate(classes):
        if c >= 0:
            out[i, c] = 1
    return out


def _write(directory, name, parts, test_index):
    for part, obj in parts.items():
        with open(directory / f"ind.{name}.{part}", "wb") as fh:
            pickle.dump(obj, fh, protocol=2)   # protocol 2 writes Python-2 names (__builtin__.list)
    (directory / f"ind.{name}.test.index").write_text("".join(f"{i}\n" for i in test_index))


def _kipf_reference(parts, test_index, pad):
    """The loader of Kipf's gcn/utils.py, written out independently of morphgen."""
    tx, ty = parts["tx"], parts["ty"]
    test_range = np.sort(test_index)
    if pad:
        full = range(min(test_index), max(test_index) + 1)
        tx_ext = sp.lil_matrix((len(full), tx.shape[1]))
        tx_ext[test_range - min(test_range), :] = tx
        tx = tx_ext
        ty_ext = np.zeros((len(full), ty.shape[1]))
        ty_ext[test_range - min(test_range), :] = ty
        ty = ty_ext
    features = sp.vstack((parts["allx"], tx)).tolil()
    features[test_index, :] = features[test_range, :]
    labels = np.vstack((parts["ally"], ty))
    labels[test_index, :] = labels[test_range, :]
    return features.toarray(), labels


def _make_parts(rng, n_all, n_test, n_train):
    allx = sp.csr_matrix(rng.integers(0, 2, (n_all, F)).astype(np.float32))
    tx = sp.csr_matrix(rng.integers(0, 2, (n_test, F)).astype(np.float32) + np.eye(n_test, F))
    ally = _onehot(rng.integers(0, C, n_all))
    ty = _onehot(rng.integers(0, C, n_test))
    graph = defaultdict(list)
    return dict(x=allx[:n_train], y=ally[:n_train], allx=allx, ally=ally, tx=tx, ty=ty, graph=graph)


@pytest.fixture
def citeseer_like(tmp_path):
    """6 allx rows (ids 0..5), test ids [9, 6, 8] in file order: id 7 is an isolated gap."""
    rng = np.random.default_rng(3)
    parts = _make_parts(rng, n_all=6, n_test=3, n_train=3)
    g = parts["graph"]
    g[0] += [1, 1, 2, 0]        # duplicate and a self loop
    g[1] += [0]
    g[2] += [0, 9]
    g[9] += [2]
    g[7] += []                  # the padded node has no edges
    test_index = [9, 6, 8]
    _write(tmp_path, "tiny", parts, test_index)
    return tmp_path, parts, test_index


def test_conversion_matches_kipf_with_padding(citeseer_like):
    directory, parts, test_index = citeseer_like
    ds = read_planetoid(directory)
    ref_x, ref_y = _kipf_reference(parts, np.array(test_index), pad=True)
    assert ds.name == "tiny" and ds.num_nodes == 10
    assert sp.issparse(ds.features) and ds.features.dtype == np.float32
    np.testing.assert_array_equal(ds.features.toarray(), ref_x)
    # tx row i belongs to node test_index[i]
    np.testing.assert_array_equal(ds.features[9].toarray(), parts["tx"][0].toarray())
    np.testing.assert_array_equal(ds.features[6].toarray(), parts["tx"][1].toarray())
    labelled = ref_y.sum(1) > 0
    np.testing.assert_array_equal(ds.labels[labelled], ref_y.argmax(1)[labelled])
    assert ds.labels[7] == -1 and not ds.features[7].toarray().any()
    assert ds.num_classes == C
    assert ds.meta["padded_test_ids"] == 1


def test_split_is_the_public_planetoid_split(citeseer_like):
    directory, _, test_index = citeseer_like
    ds = read_planetoid(directory)
    assert np.flatnonzero(ds.train_mask).tolist() == [0, 1, 2]
    assert np.flatnonzero(ds.test_mask).tolist() == sorted(test_index)
    # val = the ids after the training rows, never a test id or the unlabelled pad
    assert np.flatnonzero(ds.val_mask).tolist() == [3, 4, 5]


def test_edges_deduplicated_without_self_loops(citeseer_like):
    directory, _, _ = citeseer_like
    ds = read_planetoid(directory)
    pairs = sorted(zip(ds.graph.src.tolist(), ds.graph.dst.tolist()))
    assert pairs == [(0, 1), (0, 2), (1, 0), (2, 0), (2, 9), (9, 2)]
    assert ds.meta["raw_pairs"] == 8 and ds.meta["self_loops"] == 1


def test_contiguous_test_ids_cora_like(tmp_path):
    rng = np.random.default_rng(5)
    parts = _make_parts(rng, n_all=5, n_test=4, n_train=2)
    parts["graph"][0] += [3, 8]
    parts["graph"][8] += [0]
    test_index = [7, 5, 8, 6]
    _write(tmp_path, "small", parts, test_index)
    ds = load_dataset(tmp_path)                 # directory spec goes to the Planetoid reader
    ref_x, ref_y = _kipf_reference(parts, np.array(test_index), pad=False)
    np.testing.assert_array_equal(ds.features.toarray(), ref_x)
    np.testing.assert_array_equal(ds.labels, ref_y.argmax(1))
    assert (ds.labels >= 0).all()
    assert load_graph(tmp_path).num_edges == 3


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo owned",))


def test_restricted_unpickler_refuses_code(citeseer_like):
    directory, _, _ = citeseer_like
    with open(directory / "ind.tiny.graph", "wb") as fh:
        pickle.dump(_Evil(), fh, protocol=2)
    with pytest.raises(DataError, match=r"ind\.tiny\.graph: refuses to unpickle .*system"):
        read_planetoid(directory)


def test_missing_file_named(citeseer_like):
    directory, _, _ = citeseer_like
    (directory / "ind.tiny.ty").unlink()
    with pytest.raises(DataError, match=r"missing Planetoid file\(s\) ind\.tiny\.ty"):
        read_planetoid(directory)


def test_bad_test_index_line(citeseer_like):
    directory, _, _ = citeseer_like
    (directory / "ind.tiny.test.index").write_text("9\nsix\n8\n")
    with pytest.raises(DataError, match=r"ind\.tiny\.test\.index:2: expected a node id"):
        read_planetoid(directory)


def test_garbage_pickle(citeseer_like):
    directory, _, _ = citeseer_like
    (directory / "ind.tiny.allx").write_bytes(b"not a pickle")
    with pytest.raises(DataError, match=r"ind\.tiny\.allx: not a readable Planetoid pickle"):
        read_planetoid(directory)


def test_two_datasets_in_one_directory_need_a_name(citeseer_like):
    directory, parts, test_index = citeseer_like
    _write(directory, "other", parts, test_index)
    with pytest.raises(DataError, match="found: other, tiny. Name the set: .*ind.other"):
        load_dataset(directory)
    assert load_dataset(directory, name="other").name == "other"


def test_a_set_of_a_directory_is_named_by_its_prefix_or_one_of_its_files(citeseer_like):
    """`DIR/ind.<name>` (what `morphgen train --dataset` can say) or a file of the set reads that set."""
    directory, parts, test_index = citeseer_like
    _write(directory, "other", parts, test_index)
    whole = load_dataset(directory, name="tiny")
    for spec in (directory / "ind.tiny", str(directory / "ind.tiny"), directory / "ind.tiny.graph",
                 directory / "ind.tiny.test.index"):
        ds = load_dataset(spec)
        assert ds.name == "tiny" and np.array_equal(ds.labels, whole.labels)
        assert load_graph(spec).num_edges == whole.graph.num_edges
    assert load_dataset(directory / "ind.other").name == "other"
    with pytest.raises(DataError, match="names the Planetoid set 'tiny', but name='other'"):
        load_dataset(directory / "ind.tiny", name="other")
    with pytest.raises(DataError, match="ind.missing"):
        load_dataset(directory / "ind.missing")


class _FileWriter:
    """Would create a file through numpy if numpy classes were allowed wholesale."""
    def __reduce__(self):
        return (np.save, ("/tmp/should_not_exist.npy", np.zeros(1)))


def test_restricted_unpickler_refuses_numpy_functions(citeseer_like):
    directory, _, _ = citeseer_like
    with open(directory / "ind.tiny.allx", "wb") as fh:
        pickle.dump(_FileWriter(), fh, protocol=2)
    with pytest.raises(DataError, match=r"ind\.tiny\.allx: refuses to unpickle numpy.*save"):
        read_planetoid(directory)
