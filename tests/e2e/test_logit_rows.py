"""The logits on the rows each use reads (backends/openmp/ops.h MaskedRows).

When nothing but the loss reads the logits, a training epoch computes them on the training rows
alone, an evaluation on the labelled rows (training, validation, test) and a prediction on every
row; the weight gradients that are zero elsewhere are reduced over the training rows.  Here the
training rows are 20 of 400 and the labelled ones 90: the restricted kernels run.  After some
epochs, every row of the prediction must equal the numpy interpreter's evaluation with the
trained weights, and the evaluation's accuracies must be those of the prediction.
"""
from __future__ import annotations

import numpy as np
import pytest

from morphgen.api import CompiledModel
from morphgen.data.synthetic import synthetic_dataset
from morphgen.interp import Interpreter
from morphgen.pipeline import preprocess

from tests.e2e.support import example


@pytest.fixture(scope="module")
def data():
    return synthetic_dataset(nodes=400, edges=2400, features=24, classes=4, train_per_class=5, val=30,
                             test=40, seed=2, sparsity=0.0)


# The kernels that compute the logit rows alone: SAGE's neighbour sum too (added inside the self
# product's kernel); gcn3's last sum, after its product (4 classes are fewer than 32 columns)
RESTRICTED = {"sgc": {"linear"}, "sage": {"linear", "aggregate"}, "gin": {"linear"}, "gcn3": {"aggregate"}}


@pytest.mark.parametrize("name", sorted(RESTRICTED))
def test_prediction_and_evaluation_read_rows_the_training_epochs_skipped(name, data, monkeypatch):
    monkeypatch.setenv("MORPHGEN_OPT_LEVEL", "0")       # numbers, not speed: a faster build
    model = CompiledModel(example(name), threads=2, seed=3)
    model.bind(data)
    plan = model.plan_table()
    assert {k for k in ("linear", "aggregate") if f"{k}_masked_rows" in plan} == RESTRICTED[name]
    assert ("matmul_tn_train_rows" in plan) == (name != "gcn3")    # gcn3's G goes through its sum
    losses = [float(model.session.train_epoch()) for _ in range(5)]
    assert len(set(np.round(losses, 5))) == 5, "the weights must move"

    accuracies = model.evaluate()              # first: the prediction would leave every row computed
    logits = model.predict()
    shapes = {p.name: p.value.shape for p in model.program.params}
    params = {k: np.array(v, np.float64).reshape(shapes[k]) for k, v in model.get_params().items()}
    used = preprocess(data, model.program)
    reference = Interpreter(model.program, used.graph, np.asarray(used.features, np.float64), used.labels,
                            used.train_mask, dtype=np.float64).predict(params)
    np.testing.assert_allclose(logits, reference, rtol=1e-4, atol=1e-5)

    for split in ("train", "val", "test"):
        mask = getattr(data, f"{split}_mask")
        expected = np.mean(np.argmax(logits[mask], axis=1) == data.labels[mask])
        assert accuracies[f"{split}_acc"] == pytest.approx(expected, abs=1e-9), split
