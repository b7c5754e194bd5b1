"""Name resolution and the save_npz / load round trip."""
import numpy as np
import pytest
import scipy.sparse as sp

from morphgen.data import DataError, load_dataset, load_graph, save_npz, synthetic_dataset
from morphgen.data.resolve import ENV_VAR


def _same(a, b):
    assert (a.name, a.num_classes) == (b.name, b.num_classes)
    np.testing.assert_array_equal(a.graph.src, b.graph.src)
    np.testing.assert_array_equal(a.graph.dst, b.graph.dst)
    for x, y in ((a.labels, b.labels), (a.train_mask, b.train_mask), (a.val_mask, b.val_mask),
                 (a.test_mask, b.test_mask)):
        np.testing.assert_array_equal(x, y)
    assert type(a.features) is type(b.features)
    if a.features is not None:
        fa = a.features.toarray() if sp.issparse(a.features) else a.features
        fb = b.features.toarray() if sp.issparse(b.features) else b.features
        assert fb.dtype == np.float32
        np.testing.assert_array_equal(fa, fb)


@pytest.mark.parametrize("sparsity,features", [(0.0, 16), (0.9, 16), (0.0, 0)])
def test_save_and_reload_round_trip(tmp_path, sparsity, features):
    ds = synthetic_dataset(nodes=400, edges=3000, features=features, sparsity=sparsity, val=50, test=100)
    path = save_npz(ds, tmp_path / "synthetic.npz")
    back = load_dataset(path)
    _same(ds, back)
    # the file is readable without morphgen: plain numpy, no pickles
    z = np.load(path, allow_pickle=False)
    assert z["edge_index"].shape == (2, 3000) and int(z["num_nodes"]) == 400
    assert ("x_indptr" in z.files) == (features > 0 and sparsity >= 0.5)


def test_round_trip_relational(tmp_path):
    ds = load_dataset("/work/shared/datasets/aifb.npz")
    back = load_dataset(save_npz(ds, tmp_path / "aifb.npz"))
    _same(ds, back)
    np.testing.assert_array_equal(ds.graph.etype, back.graph.etype)
    np.testing.assert_array_equal(ds.graph.ntype, back.graph.ntype)
    assert back.graph.num_etypes == 90 and back.graph.meta["inverse_edge_type_offset"] == 45


def test_save_needs_npz_suffix(tmp_path):
    with pytest.raises(DataError, match=r"save_npz writes .npz files"):
        save_npz(synthetic_dataset(), tmp_path / "x.bin")


def test_name_resolution_order(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(); second.mkdir()
    small = synthetic_dataset(nodes=300, edges=1000, val=20, test=50)
    other = synthetic_dataset(nodes=350, edges=1000, val=20, test=50)
    save_npz(small, first / "toy.npz")
    save_npz(other, second / "toy.npz")
    save_npz(other, second / "only_env.npz")
    monkeypatch.setenv(ENV_VAR, str(second))
    assert load_dataset("toy", data_dir=first).num_nodes == 300         # data_dir wins
    assert load_dataset("toy").num_nodes == 350                         # then $MORPHGEN_DATA
    assert load_dataset("only_env", data_dir=first).num_nodes == 350    # falls through to the env
    assert load_graph("toy", data_dir=first).num_nodes == 300


def test_unknown_name_lists_places_and_names(tmp_path, monkeypatch):
    save_npz(synthetic_dataset(nodes=300, edges=1000, val=20, test=50), tmp_path / "toy.npz")
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "missing_dir"))
    with pytest.raises(DataError) as info:
        load_dataset("tyo", data_dir=tmp_path)
    msg = str(info.value)
    assert f"{tmp_path / 'tyo.npz'} (data_dir): not found; available there: toy" in msg
    assert "(${}): directory does not exist".format(ENV_VAR) in msg
    assert "did you mean 'toy'?" in msg


def test_no_data_dir_at_all(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match=r"no data directory to look in: pass data_dir .* or set \$MORPHGEN_DATA"):
        load_dataset("cora")


def test_feature_format_conversion():
    ds = load_dataset("/work/shared/datasets/cora.npz", feature_format="dense")
    assert isinstance(ds.features, np.ndarray) and ds.features.dtype == np.float32
    assert ds.features.shape == (2708, 1433) and int(ds.features.sum()) == 49216


def test_npz_without_suffix_is_recognised(tmp_path):
    ds = synthetic_dataset(nodes=300, edges=1000, val=20, test=50)
    save_npz(ds, tmp_path / "toy.npz")
    (tmp_path / "toy.npz").rename(tmp_path / "toy.data")
    assert load_dataset(str(tmp_path / "toy.data")).num_nodes == 300


def test_feature_format_on_synthetic():
    ds = load_dataset("synthetic:nodes=300,edges=1000,val=20,test=50", feature_format="csr")
    assert sp.isspmatrix_csr(ds.features) and ds.features.dtype == np.float32


def test_sparse_features_load_with_32_bit_indices(tmp_path):
    """The file stores int64 indices; loading gives int32 ones, the layout training borrows uncopied."""
    ds = synthetic_dataset(nodes=300, edges=1000, features=50, sparsity=0.9, val=20, test=50)
    back = load_dataset(save_npz(ds, tmp_path / "toy.npz"))
    assert back.features.indices.dtype == np.int32
    np.testing.assert_array_equal(back.features.toarray(), ds.features.toarray())
