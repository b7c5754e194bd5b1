"""Checkpoints: a resumed run continues bit for bit; bad checkpoints give clear errors.

gcn.mp trains with dropout 0.5 and Adam, so an exact continuation needs the weights, both Adam
moments and the epoch counter (which keys the dropout stream and Adam's bias correction).
"""
import json

import numpy as np
import pytest

import morphgen
from morphgen.errors import UserError
from morphgen.outputs import checkpoint_epochs, checkpoint_seed

from tests.e2e.support import DENSE_THRESHOLD, example, run_cli, small_dataset

SYNTHETIC_SPEC = "synthetic:nodes=120,edges=600,features=17,classes=3,train_per_class=10,val=20,test=30,seed=1"


def _model(name="gcn", dataset=None):
    model = morphgen.compile(example(name), threads=2, sparsity_threshold=DENSE_THRESHOLD, seed=7)
    return model.bind(dataset if dataset is not None else small_dataset())


def _epoch(model):
    loss = model.session.train_epoch()
    return loss, model.get_params()


def _assert_same_params(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert np.array_equal(a[name], b[name]), f"parameter {name} differs"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Train 3 epochs, checkpoint, train one more: the checkpoint and what came after it."""
    path = tmp_path_factory.mktemp("ckpt") / "gcn.ckpt"
    model = _model()
    for _ in range(3):
        model.session.train_epoch()
    model.save_checkpoint(path)
    loss, params = _epoch(model)
    return path, loss, params


def test_training_is_deterministic():
    """Two fresh runs with the same seed agree bitwise (the premise of the resume check)."""
    a, b = _model(), _model()
    for _ in range(3):
        assert a.session.train_epoch() == b.session.train_epoch()
    _assert_same_params(a.get_params(), b.get_params())


def _assert_resumes_exactly(path, loss, params):
    """A fresh model loading `path` trains the next epoch as the run that saved it did."""
    model = _model()
    model.load_checkpoint(path)
    got_loss, got_params = _epoch(model)
    assert got_loss == loss
    _assert_same_params(got_params, params)


def test_resume_reproduces_the_next_epoch_exactly(saved):
    _assert_resumes_exactly(*saved)


def test_resume_differs_from_a_fresh_start(saved):
    """The comparison above is not vacuous: without the checkpoint the next epoch differs."""
    _, loss, params = saved
    got_loss, got_params = _epoch(_model())
    assert got_loss != loss
    assert any(not np.array_equal(got_params[k], params[k]) for k in params)


def test_checkpoint_restores_the_weights(saved):
    """Loading overwrites weights that were changed after binding."""
    path, _, _ = saved
    reference = _model()
    reference.load_checkpoint(path)
    model = _model()
    model.set_params({k: np.full_like(v, 0.5) for k, v in model.get_params().items()})
    model.load_checkpoint(path)
    _assert_same_params(model.get_params(), reference.get_params())


def _expect_load_error(model, path, *needles):
    with pytest.raises(UserError) as info:
        model.load_checkpoint(path)
    message = str(info.value)
    assert message.startswith("morphgen: error:"), message
    for needle in needles:
        assert needle in message, message
    return message


def test_checkpoint_of_a_different_model_is_rejected(saved):
    path, _, _ = saved
    _expect_load_error(_model("sage"), path, str(path), "checkpoint of a different program")


def test_checkpoint_for_a_different_dataset_is_rejected(saved):
    path, _, _ = saved
    _expect_load_error(_model(dataset=small_dataset(features=23)), path, str(path), "different model or dataset")


def test_a_rejected_checkpoint_leaves_the_model_unchanged(saved):
    """A failed load must not leave a half-restored model (weights or epoch counter)."""
    path, _, _ = saved
    untouched, model = _model("sage"), _model("sage")
    _expect_load_error(model, path)
    _assert_same_params(model.get_params(), untouched.get_params())
    loss_a, params_a = _epoch(untouched)
    loss_b, params_b = _epoch(model)
    assert loss_b == loss_a, "the failed load changed the training state (epoch counter?)"
    _assert_same_params(params_b, params_a)


def test_truncated_checkpoint_is_rejected(saved, tmp_path):
    path, _, _ = saved
    data = path.read_bytes()
    for cut in (len(data) // 2, len(data) - 1, 12):
        bad = tmp_path / f"cut{cut}.ckpt"
        bad.write_bytes(data[:cut])
        _expect_load_error(_model(), bad, "truncated")


def test_garbage_checkpoint_is_rejected(tmp_path):
    model = _model()
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(np.random.default_rng(0).bytes(4096))
    _expect_load_error(model, garbage, "not a morphgen checkpoint")
    empty = tmp_path / "empty.ckpt"
    empty.write_bytes(b"")
    _expect_load_error(model, empty, str(empty))
    _expect_load_error(model, tmp_path / "missing.ckpt", "missing.ckpt")


# Format 03 (runtime/context.h): magic (8), fingerprint (8), epoch (8), seed (8), arrays, FNV-1a 64
# checksum (8).  Format 02 lacks the seed.
EPOCH_FIELD = slice(16, 24)
SEED_FIELD = slice(24, 32)
FIRST_NAME_LENGTH = slice(32, 40)


def _with_checksum(body: bytes) -> bytes:
    """A forged checkpoint: `body` followed by its correct checksum, so only the field checks remain."""
    h = 1469598103934665603
    for b in body:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return body + h.to_bytes(8, "little")


def _forge(path, tmp_path, name, edit) -> "Path":
    body = bytearray(path.read_bytes()[:-8])
    edit(body)
    bad = tmp_path / name
    bad.write_bytes(_with_checksum(bytes(body)))
    return bad


def test_corrupt_name_length_is_rejected(saved, tmp_path):
    """A nonsense array-name length is reported, not obeyed, even under a matching checksum."""
    path, _, _ = saved
    bad = _forge(path, tmp_path, "corrupt.ckpt",
                 lambda b: b.__setitem__(FIRST_NAME_LENGTH, (2 ** 40).to_bytes(8, "little")))
    _expect_load_error(_model(), bad, "corrupt")


def test_a_flipped_byte_is_caught_by_the_checksum(saved, tmp_path):
    path, _, _ = saved
    data = bytearray(path.read_bytes())
    for where in (20, len(data) // 2, len(data) - 20):
        flipped = bytearray(data)
        flipped[where] ^= 0x10
        bad = tmp_path / f"flip{where}.ckpt"
        bad.write_bytes(bytes(flipped))
        _expect_load_error(_model(), bad, "checksum mismatch")


@pytest.mark.parametrize("epoch", [-1, 2 ** 62])
def test_an_impossible_epoch_counter_is_rejected(saved, tmp_path, epoch):
    path, _, _ = saved
    bad = _forge(path, tmp_path, "epoch.ckpt",
                 lambda b: b.__setitem__(EPOCH_FIELD, epoch.to_bytes(8, "little", signed=True)))
    _expect_load_error(_model(), bad, "corrupt epoch counter")


@pytest.mark.parametrize("value", [np.nan, np.inf, 1e38])
def test_non_finite_or_huge_weights_are_rejected(saved, tmp_path, value):
    path, _, _ = saved
    raw = np.float32(value).tobytes()
    bad = _forge(path, tmp_path, "weights.ckpt", lambda b: b.__setitem__(slice(len(b) - 4, len(b)), raw))
    _expect_load_error(_model(), bad, "not finite or implausibly large")


def test_a_checkpoint_records_its_runs_seed(saved):
    path, _, _ = saved
    assert path.read_bytes()[:8] == b"MGCKPT03"
    assert checkpoint_seed(path) == 7 and checkpoint_epochs(path) == 3


def test_a_checkpoint_of_format_02_still_resumes_exactly(saved, tmp_path):
    """Format 02 is 03 without the seed: such a file loads and continues as the run did."""
    path, loss, params = saved
    body = path.read_bytes()[:-8]
    old = tmp_path / "format02.ckpt"
    old.write_bytes(_with_checksum(b"MGCKPT02" + body[8:SEED_FIELD.start] + body[SEED_FIELD.stop:]))
    assert checkpoint_seed(old) is None and checkpoint_epochs(old) == 3
    _assert_resumes_exactly(old, loss, params)


def test_loading_a_checkpoint_of_another_seed_warns(saved):
    path, _, _ = saved
    other = morphgen.compile(example("gcn"), threads=2, sparsity_threshold=DENSE_THRESHOLD, seed=3)
    other = other.bind(small_dataset())
    with pytest.warns(UserWarning, match="trained with seed 7, this model has seed 3"):
        other.load_checkpoint(path)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _model().load_checkpoint(path)           # the same seed: nothing to say


def test_saving_is_atomic_and_leaves_no_partial_files(saved, tmp_path):
    model = _model()
    target = tmp_path / "run.ckpt"
    model.save_checkpoint(target)               # the previous checkpoint, replaced below
    model.save_checkpoint(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt"]
    model.load_checkpoint(target)
    with pytest.raises(UserError):
        model.save_checkpoint(tmp_path / "no_such_dir" / "x.ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt"]


def _cli_train(tmp_path, tag, epochs, *extra):
    report = tmp_path / f"{tag}.json"
    proc = run_cli("train", example("gcn"), "--dataset", SYNTHETIC_SPEC, "--epochs", epochs, "--threads", "2",
                   "--seed", "7", "--sparsity-threshold", DENSE_THRESHOLD, "--quiet", "--json", report, *extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(report.read_text())


def test_cli_checkpoint_and_resume(tmp_path):
    ckpt = tmp_path / "run.ckpt"
    straight = _cli_train(tmp_path, "straight", 3)
    _cli_train(tmp_path, "first", 2, "--checkpoint", ckpt)
    assert ckpt.is_file() and ckpt.stat().st_size > 0
    resumed = _cli_train(tmp_path, "resumed", 1, "--resume", ckpt)
    assert resumed["final_loss"] == straight["history"][2]["loss"]
    assert resumed["test_acc"] == straight["test_acc"]


def test_cli_resume_keeps_the_checkpoints_seed(tmp_path):
    """Trained with --seed 7 and resumed without --seed, a run continues with seed 7 (dropout masks
    as uninterrupted); an explicit other seed is obeyed, with a warning."""
    ckpt = tmp_path / "run.ckpt"
    straight = _cli_train(tmp_path, "straight", 3)
    _cli_train(tmp_path, "first", 2, "--checkpoint", ckpt)
    common = ("train", example("gcn"), "--dataset", SYNTHETIC_SPEC, "--epochs", 1, "--threads", "2",
              "--sparsity-threshold", DENSE_THRESHOLD, "--quiet", "--resume", ckpt)
    kept = run_cli(*common, "--json", tmp_path / "kept.json")
    assert kept.returncode == 0 and "warning" not in kept.stderr, kept.stderr[-3000:]
    report = json.loads((tmp_path / "kept.json").read_text())
    assert report["seed"] == 7 and report["final_loss"] == straight["history"][2]["loss"]
    changed = run_cli(*common, "--seed", "3", "--json", tmp_path / "changed.json")
    assert changed.returncode == 0, changed.stderr[-3000:]
    assert changed.stderr.count("warning: --seed 3, but") == 1, changed.stderr[-3000:]
    assert "trained with seed 7" in changed.stderr and "UserWarning" not in changed.stderr
    report = json.loads((tmp_path / "changed.json").read_text())
    assert report["seed"] == 3 and report["final_loss"] != straight["history"][2]["loss"]


class _Interrupted(Exception):
    pass


def test_a_run_interrupted_resumes_from_its_last_periodic_checkpoint(tmp_path):
    """fit(checkpoint=, checkpoint_every=3) stopped during epoch 8 of 10 leaves epoch 6's
    checkpoint; 4 epochs from it end where the 10 uninterrupted ones do, bit for bit."""
    dataset = small_dataset()
    whole = _model(dataset=dataset).fit(epochs=10)
    ckpt = tmp_path / "run.ckpt"

    def interrupt_at_epoch_8(row, epochs):
        if row["epoch"] == 8:
            raise _Interrupted()
    with pytest.raises(_Interrupted):
        _model(dataset=dataset).fit(epochs=10, progress=interrupt_at_epoch_8, checkpoint=ckpt, checkpoint_every=3)
    assert checkpoint_epochs(ckpt) == 6
    model = _model(dataset=dataset)
    model.load_checkpoint(ckpt)
    rest = model.fit(epochs=4, checkpoint=ckpt)
    assert [r["loss"] for r in rest.history] == [r["loss"] for r in whole.history[6:]]
    assert rest.final == whole.final
    assert checkpoint_epochs(ckpt) == 10          # fit saves the end's too


@pytest.mark.parametrize("kwargs, message", [
    ({"checkpoint_every": 2}, "checkpoint_every needs checkpoint"),
    ({"checkpoint": "x.ck", "checkpoint_every": 0}, "checkpoint_every must be a positive integer"),
])
def test_fit_refuses_checkpoint_arguments_that_cannot_work(kwargs, message):
    with pytest.raises(UserError, match=message):
        _model().fit(epochs=1, **kwargs)


def test_cli_resume_without_epochs_trains_the_rest_of_the_program(tmp_path):
    """The interrupted command run again with --resume finishes the program's epoch count (gcn.mp
    trains 200); a checkpoint that has trained them all is refused with what to do instead."""
    def cli(tag, *extra):
        report = tmp_path / f"{tag}.json"
        proc = run_cli("train", example("gcn"), "--dataset", SYNTHETIC_SPEC, "--threads", "2", "--seed", "7",
                       "--sparsity-threshold", DENSE_THRESHOLD, "--json", report, *extra)
        return proc, (json.loads(report.read_text()) if proc.returncode == 0 else None)

    _, straight = cli("straight", "--quiet")
    ckpt = tmp_path / "run.ckpt"
    cli("first", "--epochs", "4", "--checkpoint", ckpt, "--checkpoint-every", "1", "--quiet")
    proc, resumed = cli("resumed", "--resume", ckpt, "--checkpoint", ckpt)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resuming from {ckpt} after epoch 4: 196 more epoch(s) (the program trains 200)" in proc.stderr
    assert resumed["epochs_before"] == 4 and len(resumed["history"]) == 196
    assert resumed["final_loss"] == straight["history"][199]["loss"]
    assert resumed["test_acc"] == straight["test_acc"]
    proc, _ = cli("again", "--resume", ckpt)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "the checkpoint has already trained 200 epochs and the program trains 200: none are left" in proc.stderr
    assert "give --epochs N to train N more" in proc.stderr
    proc, _ = cli("unsaved", "--checkpoint-every", "2")
    assert proc.returncode == 2 and "--checkpoint-every needs --checkpoint FILE" in proc.stderr


def test_cli_resume_from_a_bad_checkpoint(tmp_path):
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"not a checkpoint at all")
    proc = run_cli("train", example("gcn"), "--dataset", SYNTHETIC_SPEC, "--epochs", "1", "--threads", "2",
                   "--sparsity-threshold", DENSE_THRESHOLD, "--quiet", "--resume", bad)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "not a morphgen checkpoint" in proc.stderr and str(bad) in proc.stderr


def test_batch_norm_running_statistics_are_saved_and_restored(tmp_path):
    """gin.mp's batch norms: the running statistics move with training, travel in the
    checkpoint, and evaluation after a resume reads them (same accuracy as before saving)."""
    model = _model("gin")
    before = model.get_params()
    for _ in range(2):
        model.session.train_epoch()
    trained = model.get_params()
    state = [p.name for p in model.program.params if not p.trainable]
    assert state and all(not np.array_equal(trained[n], before[n]) for n in state)
    path = tmp_path / "gin.ckpt"
    model.save_checkpoint(path)
    evaluated = model.session.evaluate()
    resumed = _model("gin")
    resumed.load_checkpoint(path)
    _assert_same_params(resumed.get_params(), trained)
    assert resumed.session.evaluate() == evaluated
