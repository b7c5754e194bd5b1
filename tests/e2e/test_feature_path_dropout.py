"""With dropout on the input features, the dense and the sparse feature path train identically.

Both paths drop element (r, c) of X from the same counter-based stream (index r * F + c), the
dense path into a buffer, the sparse path inside its kernels; so after several training epochs
the parameters of the two runs must still agree to float32 round-off.
"""
import numpy as np
import morphgen
from morphgen.data.synthetic import synthetic_dataset

from tests.e2e.support import example


def _train(path: str, threshold: float, epochs: int = 3):
    data = synthetic_dataset(nodes=150, edges=900, features=61, classes=3, train_per_class=10, val=20,
                             test=30, seed=4, sparsity=0.9)
    model = morphgen.compile(example("gcn"), threads=2, sparsity_threshold=threshold, seed=3)
    result = model.fit(data, epochs=epochs)
    assert model.feature_path[0] == path
    return [row["loss"] for row in result.history], model.get_params()


def test_input_dropout_is_the_same_on_both_paths():
    dense_losses, dense = _train("dense", threshold=0.99)
    sparse_losses, sparse = _train("sparse", threshold=0.5)
    np.testing.assert_allclose(sparse_losses, dense_losses, rtol=1e-4)
    for name in dense:
        np.testing.assert_allclose(sparse[name], dense[name], rtol=1e-3, atol=1e-5, err_msg=name)


def test_library_calls_leave_the_callers_subnormals_alone():
    """The library flushes subnormals on its threads while it runs and restores the caller's mode."""
    tiny = np.float32(1e-39)                         # a float32 subnormal
    assert tiny * np.float32(1.0) != 0
    _train("sparse", threshold=0.5, epochs=1)
    assert tiny * np.float32(1.0) != 0
    assert np.nextafter(np.float32(0), np.float32(1)) > 0
