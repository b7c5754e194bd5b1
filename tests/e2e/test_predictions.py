"""What a trained model predicts, written for the user: `train --predictions FILE` and `morphgen
predict` (morphgen/predictions.py).  The files must hold what the reported metrics were computed
from, the weights the run ended with (early stopping's best), and never replace a file morphgen
did not write."""
import json

import numpy as np

import morphgen
from morphgen.data import load_dataset
from morphgen.link_eval import held_out_metrics

from tests.e2e.support import assert_clean_failure, example, run_cli, write_link_npz

SYNTHETIC = "synthetic:nodes=400,edges=3000,features=24,classes=4,train_per_class=15,val=80,test=120,seed=3"


def _train(tmp_path, program, *extra, tag="run"):
    report, predictions = tmp_path / f"{tag}.json", tmp_path / f"{tag}.npz"
    proc = run_cli("train", program, "--dataset", SYNTHETIC, "--threads", 2, "--quiet", "--json", report,
                   "--predictions", predictions, *extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"predictions written to {predictions}" in proc.stderr
    report = json.loads(report.read_text())
    assert report["predictions"] == str(predictions)
    return report, np.load(predictions)


def _accuracy(predicted, dataset, mask):
    return float(np.mean(predicted[mask] == dataset.labels[mask]))


def test_train_writes_the_logits_the_accuracies_come_from(tmp_path):
    report, saved = _train(tmp_path, example("gcn"), "--epochs", 30, "--seed", 4)
    dataset = load_dataset(SYNTHETIC)
    logits, predicted = saved["logits"], saved["predicted"]
    assert logits.shape == (dataset.num_nodes, 4) and logits.dtype == np.float32
    np.testing.assert_array_equal(predicted, np.argmax(logits, axis=1))
    for split in ("train", "val", "test"):
        assert _accuracy(predicted, dataset, getattr(dataset, f"{split}_mask")) == \
            report[f"{split}_acc"], split
    assert str(saved["written_by"]).startswith("morphgen ")
    # the API's model after the same training: the same bits (same seed and thread count)
    model = morphgen.compile(example("gcn"), threads=2, seed=4)
    model.fit(SYNTHETIC, epochs=30)
    np.testing.assert_array_equal(model.predict(), logits)


def test_predict_applies_a_checkpoint_as_its_run_ended(tmp_path):
    """With gnn.earlyStopping the run ends with the best epoch's weights, while its checkpoint
    holds the last epoch's (to continue training from): `predict` must use the best ones."""
    program = tmp_path / "gcn_es.mp"
    program.write_text(example("gcn").read_text().replace(
        'gnn.normalizeFeatures("row");', 'gnn.normalizeFeatures("row");\n    gnn.earlyStopping(patience = 3);'))
    checkpoint = tmp_path / "run.ck"
    report, trained = _train(tmp_path, program, "--epochs", 40, "--checkpoint", checkpoint)
    assert report["best_epoch"] < len(report["history"]), "no epoch after the best: the test shows nothing"
    out, metrics = tmp_path / "predicted.npz", tmp_path / "predicted.json"
    proc = run_cli("predict", program, "--dataset", SYNTHETIC, "--threads", 2, "--checkpoint", checkpoint,
                   "-o", out, "--json", metrics)
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_array_equal(np.load(out)["logits"], trained["logits"])
    predicted = json.loads(metrics.read_text())
    assert predicted["epochs_trained"] == len(report["history"])
    for key in ("train_acc", "val_acc", "test_acc"):
        assert predicted[key] == report[key], key
    assert f"test_acc {report['test_acc']:.4f}" in proc.stdout


def test_a_link_predictors_file_holds_what_it_is_ranked_with(tmp_path):
    data = write_link_npz(tmp_path / "kg.npz")
    report, out = tmp_path / "run.json", tmp_path / "run.npz"
    proc = run_cli("train", example("rgcn_link"), "--dataset", data, "--epochs", 4, "--threads", 2, "--quiet",
                   "--json", report, "--predictions", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved, report = np.load(out), json.loads(report.read_text())
    dataset = load_dataset(str(data))
    assert saved["embeddings"].shape[0] == dataset.num_nodes
    assert saved["relations"].shape[1] == saved["embeddings"].shape[1]
    triples = {split: getattr(dataset, f"{split}_triples") for split in ("train", "valid", "test")}
    metrics = held_out_metrics(saved["embeddings"], saved["relations"], triples)
    for key in ("valid_mrr", "test_mrr", "test_hits@10"):
        assert metrics[key] == report[key], key


def test_prediction_files_replace_only_their_own(tmp_path):
    foreign = tmp_path / "mine.npz"
    foreign.write_bytes(b"the user's own file")
    assert_clean_failure(run_cli("train", example("gcn"), "--epochs", 1, "--predictions", foreign), 2,
                         "--predictions", "is not a morphgen predictions file")
    assert foreign.read_bytes() == b"the user's own file"
    np.savez(foreign, logits=np.zeros((2, 2)))       # an npz, but not one morphgen wrote
    assert_clean_failure(run_cli("train", example("gcn"), "--epochs", 1, "--predictions", foreign), 2,
                         "is not a morphgen predictions file")
    same = tmp_path / "out"
    assert_clean_failure(run_cli("train", example("gcn"), "--epochs", 1, "--predictions", same, "--json", same),
                         2, "both name")
    assert not same.exists()
    ours = tmp_path / "ours.npz"
    for epochs in (1, 2):          # the second run replaces the first one's file
        proc = run_cli("train", example("gcn"), "--epochs", epochs, "--quiet", "--predictions", ours)
        assert proc.returncode == 0, proc.stderr[-3000:]


def test_predict_refuses_what_it_cannot_use(tmp_path):
    checkpoint = tmp_path / "run.ck"
    assert run_cli("train", example("gcn"), "--epochs", 1, "--quiet", "--checkpoint", checkpoint).returncode == 0
    assert_clean_failure(run_cli("predict", example("gcn"), "--checkpoint", tmp_path / "none.ck", "-o",
                                 tmp_path / "p.npz"), 2, "--checkpoint", "does not exist")
    assert_clean_failure(run_cli("predict", example("gcn"), "--checkpoint", example("gcn"), "-o",
                                 tmp_path / "p.npz"), 2, "is not a morphgen checkpoint")
    assert_clean_failure(run_cli("predict", example("gcn"), "--checkpoint", checkpoint, "-o", checkpoint), 2,
                         "-o", "is the checkpoint")
    assert_clean_failure(run_cli("predict", example("gcn"), "--backend", "mpi", "--checkpoint", checkpoint,
                                 "-o", tmp_path / "p.npz"), 2, "invalid choice: 'mpi' (choose from 'openmp', 'cuda')")
    assert_clean_failure(run_cli("predict", example("sage"), "--checkpoint", checkpoint, "-o", tmp_path / "p.npz"),
                         2, "checkpoint of a different program")
    assert not (tmp_path / "p.npz").exists()
