"""Stopping on a signal (morphgen/stop_signals.py): a run with a checkpoint that gets SIGTERM or
SIGUSR1 ends after the epoch under way, saved, with exit status 4, and resumes bit for bit."""
import json
import os
import signal

import pytest

from morphgen.cli import main
from morphgen.commands import Progress
from morphgen.errors import UserError
from morphgen.outputs import checkpoint_epochs
from morphgen.stop_signals import STOPPED_EXIT_STATUS

from tests.e2e.support import DENSE_THRESHOLD, example
from tests.e2e.test_checkpoint import SYNTHETIC_SPEC, _model, small_dataset


def test_fit_stops_after_the_epoch_and_resumes_exactly(tmp_path):
    """stop() true after epoch 4 of 10: four epochs, a checkpoint of four, and six more from it
    end where the ten uninterrupted ones do."""
    dataset = small_dataset()
    whole = _model(dataset=dataset).fit(epochs=10)
    ckpt = tmp_path / "run.ckpt"
    seen = []
    stopped = _model(dataset=dataset).fit(epochs=10, checkpoint=ckpt, progress=lambda row, _: seen.append(row),
                                          stop=lambda: len(seen) >= 4)
    assert stopped.stopped and len(stopped.history) == 4
    assert checkpoint_epochs(ckpt) == 4
    model = _model(dataset=dataset)
    model.load_checkpoint(ckpt)
    rest = model.fit(epochs=6)
    assert not rest.stopped
    assert [r["loss"] for r in rest.history] == [r["loss"] for r in whole.history[4:]]
    assert rest.final == whole.final


def test_a_stop_at_the_last_epoch_is_a_normal_end():
    seen = []
    result = _model().fit(epochs=2, progress=lambda row, _: seen.append(row), stop=lambda: len(seen) >= 2)
    assert not result.stopped and len(result.history) == 2


def test_fit_refuses_a_stop_that_cannot_be_called():
    with pytest.raises(UserError, match="stop must be a function of no arguments"):
        _model().fit(epochs=1, stop=True)


def _train(tmp_path, tag, *extra):
    report = tmp_path / f"{tag}.json"
    rc = main(["train", str(example("gcn")), "--dataset", SYNTHETIC_SPEC, "--threads", "2", "--seed", "7",
               "--sparsity-threshold", str(DENSE_THRESHOLD), "--quiet", "--json", str(report), *map(str, extra)])
    return rc, (json.loads(report.read_text()) if report.exists() else None)


def _signal_at_epoch(monkeypatch, signum, epoch):
    """The progress callback sends `signum` to this process after `epoch`."""
    def progress(self, row, total):
        if row["epoch"] == epoch:
            os.kill(os.getpid(), signum)
    monkeypatch.setattr(Progress, "__call__", progress)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1])
def test_train_stops_saved_on_a_signal_and_resumes_to_the_same_end(tmp_path, monkeypatch, capsys, signum):
    straight_rc, straight = _train(tmp_path, "straight", "--epochs", 12)
    assert straight_rc == 0
    before = signal.getsignal(signum)
    _signal_at_epoch(monkeypatch, signum, 5)
    ckpt = tmp_path / "run.ckpt"
    predictions = tmp_path / "predictions.npz"
    rc, stopped = _train(tmp_path, "stopped", "--epochs", 12, "--checkpoint", ckpt, "--predictions", predictions)
    err = capsys.readouterr().err
    assert rc == STOPPED_EXIT_STATUS, err[-3000:]
    name = signal.Signals(signum).name
    assert f"morphgen: {name}: stopped after epoch 5 of this run's 12 and saved {ckpt}" in err
    # not the predictions of a run stopped half way: those of its end, when it is resumed
    assert not predictions.exists() and "--predictions: not written" in err
    assert stopped["stopped_by"] == name and len(stopped["history"]) == 5
    assert checkpoint_epochs(ckpt) == 5
    assert signal.getsignal(signum) is before, "the run left its handler installed"
    monkeypatch.undo()
    rc, resumed = _train(tmp_path, "resumed", "--resume", ckpt, "--until-epoch", 12, "--predictions", predictions)
    assert rc == 0 and "stopped_by" not in resumed and predictions.exists()
    assert "resuming from" in capsys.readouterr().err and len(resumed["history"]) == 7
    assert [r["loss"] for r in resumed["history"]] == [r["loss"] for r in straight["history"][5:]]
    assert resumed["test_acc"] == straight["test_acc"]


def test_without_a_checkpoint_the_signals_keep_their_meaning(tmp_path, monkeypatch):
    """Nothing to save: the run installs no handler (SIGTERM would end it at once), and a run
    that nobody signals is not affected."""
    seen = []
    monkeypatch.setattr(Progress, "__call__",
                        lambda self, row, total: seen.append(signal.getsignal(signal.SIGTERM)))
    before = signal.getsignal(signal.SIGTERM)
    rc, report = _train(tmp_path, "plain", "--epochs", 2)
    assert rc == 0 and "stopped_by" not in report
    assert seen == [before, before]


def test_until_epoch_counts_the_checkpoint_and_excludes_epochs(tmp_path, capsys):
    ckpt = tmp_path / "run.ckpt"
    assert _train(tmp_path, "first", "--epochs", 3, "--checkpoint", ckpt)[0] == 0
    rc, _ = _train(tmp_path, "done", "--resume", ckpt, "--until-epoch", 3)
    assert rc == 2
    assert "--until-epoch 3: the checkpoint" in capsys.readouterr().err
    rc, _ = _train(tmp_path, "both", "--epochs", 2, "--until-epoch", 3)
    assert rc == 2 and "give --epochs" in capsys.readouterr().err
    rc, report = _train(tmp_path, "fresh", "--until-epoch", 2)    # no checkpoint: the same as --epochs 2
    assert rc == 0 and len(report["history"]) == 2
