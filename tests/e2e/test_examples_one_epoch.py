"""Every example program trains one epoch through the Python API, and gcn.mp through the CLI.

Before training, the generated library's evaluation forward (dropout off) must agree with the
numpy IR interpreter on the same parameters, so an example whose generated code computes the
wrong logits fails here even when its loss still looks plausible.
"""
import json

import numpy as np
import pytest

import morphgen
from morphgen.interp import Interpreter

from tests.e2e.support import (DENSE_THRESHOLD, HOMOGENEOUS_EXAMPLES, RELATIONAL_EXAMPLES, example,
                               run_cli, small_dataset, typed_dataset)

CASES = ([(name, "homogeneous") for name in HOMOGENEOUS_EXAMPLES]
         + [(name, "typed") for name in RELATIONAL_EXAMPLES]
         + [("rgcn", "typed-featureless")])


def _dataset(kind):
    if kind == "homogeneous":
        return small_dataset()
    return typed_dataset(features=None if kind == "typed-featureless" else 7)


def _interpreter_eval(model):
    """Loss and logits of the interpreter (float64, dropout off) on the model's current params."""
    got = model.get_params()
    params = {p.name: got[p.name].reshape(p.value.shape).astype(np.float64) for p in model.program.params}
    ds = model.dataset
    interp = Interpreter(model.program, ds.graph, ds.features, ds.labels, ds.train_mask, dtype=np.float64)
    values = interp.forward(params, training=False)
    return float(values[model.program.loss.id]), values[model.program.logits.id]


@pytest.mark.parametrize("name,kind", CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_example_trains_one_epoch(name, kind):
    model = morphgen.compile(example(name), threads=2, sparsity_threshold=DENSE_THRESHOLD)
    model.bind(_dataset(kind))
    before = model.get_params()
    assert before, "the program has no parameters"

    ref_loss, ref_logits = _interpreter_eval(model)
    logits = model.predict()
    assert np.all(np.isfinite(logits))
    np.testing.assert_allclose(logits, ref_logits, rtol=1e-4, atol=1e-5,
                               err_msg=f"{name}: generated forward differs from the interpreter")
    assert model.evaluate()["loss"] == pytest.approx(ref_loss, rel=1e-4, abs=1e-6)

    result = model.fit(epochs=1)
    assert len(result.history) == 1
    assert np.isfinite(result.history[0]["loss"]) and result.history[0]["loss"] > 0
    after = model.get_params()
    for pname, value in before.items():
        assert np.all(np.isfinite(after[pname])), pname
        assert not np.array_equal(value, after[pname]), f"{name}: parameter {pname} did not change"
    final = model.evaluate()
    assert np.isfinite(final["loss"])
    for key in ("train_acc", "val_acc", "test_acc"):
        assert 0.0 <= final[key] <= 1.0, (key, final[key])
    selection = {"best_epoch", "epochs_run"}     # gnn.earlyStopping's record of the kept epoch
    assert {k: v for k, v in result.final.items() if k not in selection} == final
    if model.program.early_stopping:
        assert (result.final["best_epoch"], result.final["epochs_run"]) == (1, 1)


REQUIRED_JSON = {"model": str, "backend": str, "dataset": str, "epochs": int, "train_acc": float,
                 "val_acc": float, "test_acc": float, "final_loss": float, "epoch_times_s": list,
                 "feature_path": str, "peak_rss_bytes": int}


def test_cli_train_writes_the_json_report(tmp_path):
    out = tmp_path / "run.json"
    spec = "synthetic:nodes=120,edges=600,features=17,classes=3,train_per_class=10,val=20,test=30,seed=1"
    proc = run_cli("train", example("gcn"), "--dataset", spec, "--epochs", "2", "--threads", "2",
                   "--sparsity-threshold", DENSE_THRESHOLD, "--json", out, "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "final: train_acc" in proc.stdout
    report = json.loads(out.read_text())
    for key, kind in REQUIRED_JSON.items():
        assert key in report, f"JSON report lacks {key}"
        assert isinstance(report[key], kind), (key, report[key])
    assert report["backend"] == "openmp" and report["epochs"] == 2
    assert report["model"].endswith("gcn.mp")
    assert report["feature_path"] == "dense"
    assert len(report["epoch_times_s"]) == 2 and all(t > 0 for t in report["epoch_times_s"])
    assert np.isfinite(report["final_loss"])
    for key in ("train_acc", "val_acc", "test_acc"):
        assert 0.0 <= report[key] <= 1.0
    assert report["peak_rss_bytes"] > 10 * 2 ** 20     # a Python process with numpy: tens of MiB
