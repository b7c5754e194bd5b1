"""gnn.earlyStopping(patience): training stops `patience` epochs after the best validation
accuracy and the model keeps that epoch's weights, exactly."""
import numpy as np
import pytest

import morphgen
from morphgen.errors import UserError
from morphgen.frontend import check_source

from tests.e2e.support import EXAMPLES, small_dataset


def gcn_with_early_stopping(tmp_path, patience: int):
    source = (EXAMPLES / "gcn.mp").read_text().replace(
        'gnn.normalizeFeatures("row");', f'gnn.normalizeFeatures("row");\n    gnn.earlyStopping(patience = {patience});')
    path = tmp_path / "gcn_es.mp"
    path.write_text(source)
    return path


def test_training_stops_after_the_patience_and_keeps_the_best_weights(tmp_path):
    path = gcn_with_early_stopping(tmp_path, 5)
    data = small_dataset()
    model = morphgen.compile(path, threads=2, seed=2)
    result = model.fit(data)
    vals = [row["val_acc"] for row in result.history]
    best = int(np.argmax(vals)) + 1                      # the first epoch of the best accuracy
    assert result.final["best_epoch"] == best and len(vals) == min(best + 5, 200) < 200
    assert result.final["val_acc"] == vals[best - 1]
    # the kept weights are that epoch's: a plain run of `best` epochs ends with the same ones
    plain = morphgen.compile(EXAMPLES / "gcn.mp", threads=2, seed=2)
    plain.fit(data, epochs=best, eval_every=0)
    for name, value in plain.get_params().items():
        np.testing.assert_array_equal(model.get_params()[name], value, err_msg=name)


def test_early_stopping_errors_are_located():
    head = "function m(Graph g, propNode<float[F]> x, propNode<int[C]> y) {\n"
    body = ('    gnn.layer(F, C);\n    gnn.optimizer("adam", lr = 0.01);\n    STOP\n'
            '    for (int epoch = 0; epoch < 3; epoch++) {\n        gnn.forwardPass(0, "GCN", "Sum");\n'
            '        gnn.loss("cross_entropy");\n        gnn.backPropagation();\n        gnn.optimizerStep();\n'
            '    }\n}\n')
    cases = {"gnn.earlyStopping(patience = 0);": "patience must be in [1, 1000000], got 0",
             "gnn.earlyStopping(); gnn.earlyStopping();": "gnn.earlyStopping is declared twice",
             "gnn.earlyStopping(10);": "gnn.earlyStopping takes no positional arguments (patience = N), got 1 argument(s)"}
    for stop, message in cases.items():
        [d] = check_source(head + body.replace("STOP", stop))
        assert (d.line, d.message) == (4, message)


# (seed, epochs before the checkpoint): with patience 4 on small_dataset, seed 0's best epoch is
# 10 (tied at 11-13, stopping after 14), so a checkpoint after 12 holds weights newer than the best
# ones in use; seed 1 stops after epoch 6 (best 2), so a run resumed after 8 has nothing to train.
@pytest.mark.parametrize("seed, split", [(0, 12), (1, 8)], ids=["mid-run", "already-stopped"])
def test_a_resumed_run_stops_and_selects_as_the_uninterrupted_one(tmp_path, seed, split):
    path, data = gcn_with_early_stopping(tmp_path, 4), small_dataset()
    whole = morphgen.compile(path, threads=2, seed=seed)
    expected = whole.fit(data, epochs=20)
    first = morphgen.compile(path, threads=2, seed=seed)
    part_one = first.fit(data, epochs=split)
    assert part_one.final["best_epoch"] < split           # the best weights are not the last ones
    first.save_checkpoint(tmp_path / "run.ck")
    resumed = morphgen.compile(path, threads=2, seed=seed)
    resumed.bind(data)
    resumed.load_checkpoint(tmp_path / "run.ck")
    part_two = resumed.fit(data, epochs=20 - split)
    continued = first.fit(data, epochs=20 - split)        # the same process, without a checkpoint
    losses = [row["loss"] for row in expected.history]
    for second in (part_two, continued):
        assert [row["loss"] for row in part_one.history + second.history] == losses
        assert second.final["best_epoch"] == expected.final["best_epoch"]
    for model in (resumed, first):
        for name, value in whole.get_params().items():
            np.testing.assert_array_equal(model.get_params()[name], value, err_msg=name)


def test_early_stopping_without_validation_nodes_is_refused(tmp_path):
    """aifb and mutag have no validation split: selecting by its accuracy would keep epoch 1."""
    data = small_dataset()
    data.val_mask[:] = False
    model = morphgen.compile(gcn_with_early_stopping(tmp_path, 3), threads=1)
    with pytest.raises(UserError, match="has no validation nodes; give a dataset with a validation split"):
        model.fit(data, epochs=2)
