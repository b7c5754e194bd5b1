"""The compiled first-layer aggregation computed once (dense features) trains like the per-epoch one.

`hoist_invariants=False` keeps the aggregation inside the epoch; both runs start from the same
weights and dropout streams, so their losses and parameters agree to float32 round-off.  The
features the caller still holds are never written; donated ones are overwritten in place."""
import numpy as np
import pytest

import morphgen
from morphgen.data.synthetic import synthetic_dataset

from tests.e2e.support import example


def _data(features=40, weighted=0):
    return synthetic_dataset(nodes=300, edges=2400, features=features, classes=4, train_per_class=20,
                             val=40, test=60, seed=7, weighted=weighted)


def _train(data, hoist: bool, donate: bool = False, model_name: str = "gcn3", epochs: int = 4):
    model = morphgen.compile(example(model_name), threads=2, seed=5, sparsity_threshold=0.99,
                             hoist_invariants=hoist)
    model.bind(data, donate_features=donate)
    losses = [row["loss"] for row in model.fit(epochs=epochs).history]
    return model, losses


def test_hoisted_first_layer_trains_like_the_per_epoch_one():
    data = _data()
    hoisted, hoisted_losses = _train(data, hoist=True)
    plain, plain_losses = _train(data, hoist=False)
    assert len(hoisted.program.invariant) == 1 and not plain.program.invariant
    np.testing.assert_allclose(hoisted_losses, plain_losses, rtol=1e-5)
    a, b = hoisted.get_params(), plain.get_params()
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-4, atol=1e-6, err_msg=name)
    assert hoisted.evaluate()["test_acc"] == pytest.approx(plain.evaluate()["test_acc"], abs=0.02)


@pytest.mark.parametrize("features", [16, 40])
def test_hoisted_aggregations_weighed_by_the_edges_train_like_the_per_epoch_ones(features):
    """GCN layers weighing their edges: the first layer's weighted aggregation of the features
    (before its product when the features are narrower, 16, after it otherwise, 40), with a
    copy of the edge weights read once at load time."""
    data = _data(features, weighted=1)
    hoisted, hoisted_losses = _train(data, hoist=True, model_name="bench/gcn3_weighted")
    plain, plain_losses = _train(data, hoist=False, model_name="bench/gcn3_weighted")
    kinds = [(op.opcode, op.attrs.get("kind"), op.attrs.get("norm")) for op in hoisted.program.invariant]
    assert kinds == [("graph_scalar", "edge_weight", None), ("aggregate", None, "gcn_weighted")]
    assert not plain.program.invariant
    np.testing.assert_allclose(hoisted_losses, plain_losses, rtol=1e-5)
    a, b = hoisted.get_params(), plain.get_params()
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-4, atol=1e-6, err_msg=name)


# 40 features: 16-column blocks with a remainder; 530: 64-column blocks with a remainder
@pytest.mark.parametrize("features", [40, 530])
def test_callers_features_are_kept_unless_donated(features):
    data = _data(features)
    original = data.features.copy()
    kept, kept_losses = _train(data, hoist=True)
    np.testing.assert_array_equal(data.features, original)         # the caller's array is untouched
    donated, donated_losses = _train(data, hoist=True, donate=True)
    assert not np.array_equal(data.features, original)             # overwritten by the aggregation
    np.testing.assert_allclose(donated_losses, kept_losses, rtol=1e-6)
    # donated, the aggregation needs no N x F array of its own
    n, f = original.shape
    assert kept.session.allocated_bytes() - donated.session.allocated_bytes() >= 4 * n * f


def test_prepare_runs_once_per_context():
    model, _ = _train(_data(), hoist=True, donate=True, epochs=1)
    session = model.session
    assert session.lib.mg_prepare(session.ctx) != 0
    assert "already" in session.ffi.string(session.lib.mg_error(session.ctx)).decode()


def test_labels_are_refused_after_prepare():
    """The masks' counts and row lists are built at prepare: new masks after it would go unseen."""
    model, _ = _train(_data(), hoist=True, epochs=1)
    session, n = model.session, model.dataset.graph.num_nodes
    labels, mask = np.zeros(n, np.int64), np.ones(n, np.uint8)
    ptr = [session.ffi.cast(t, a.ctypes.data) for t, a in (("int64_t *", labels), ("uint8_t *", mask))]
    assert session.lib.mg_set_labels(session.ctx, ptr[0], ptr[1], ptr[1], ptr[1]) != 0
    assert "before it" in session.ffi.string(session.lib.mg_error(session.ctx)).decode()


def test_normalised_features_the_model_keeps_are_not_overwritten():
    """GIN normalises its input, and its first sum of the raw rows is hoisted out of the epoch:
    the normalised copy the model keeps as model.dataset.features must still hold the normalised
    features (only a caller's donation lets the aggregation overwrite them)."""
    from morphgen.pipeline import normalize_features

    data = _data(features=12)
    model = morphgen.compile(example("gin"), threads=2, seed=5, sparsity_threshold=0.99)
    model.bind(data)
    assert model.program.invariant and model.program.feature_normalization == "row"
    expected = normalize_features(data, "row").features
    np.testing.assert_array_equal(model.dataset.features, expected)
