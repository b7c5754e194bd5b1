"""Same seed, same thread count: the same bits, run after run, and a resumed run equals the
uninterrupted one.  Three threads (more than this machine's cores, so the team's timing varies
a lot) on real graphs large enough for every kernel to run in parallel, on both feature paths.
"""
import numpy as np
import pytest

import morphgen
from morphgen.data import load_dataset

from tests.e2e.support import datasets_dir, example

THREADS = 3
EPOCHS = 6
CASES = [  # model, dataset, sparsity threshold (0.5: cora's sparse path; 0.999: its dense path)
    ("gcn", "cora", 0.5), ("gcn", "cora", 0.999), ("gat", "cora", 0.5), ("rgcn", "aifb", None),
]


@pytest.fixture(scope="module")
def data():
    return {name: load_dataset(name, data_dir=datasets_dir()) for name in ("cora", "aifb")}


def _model(name, dataset, threshold):
    model = morphgen.compile(example(name), threads=THREADS, seed=11, sparsity_threshold=threshold)
    return model.bind(dataset)


def _train(model, epochs):
    return [model.session.train_epoch() for _ in range(epochs)]


def _assert_same(a: dict, b: dict):
    for name in a:
        assert np.array_equal(a[name], b[name]), f"parameter {name} differs between identical runs"


@pytest.mark.parametrize("name,dataset,threshold", CASES, ids=lambda v: str(v))
def test_identical_runs_give_identical_bits(data, name, dataset, threshold):
    runs = []
    for _ in range(2):
        model = _model(name, data[dataset], threshold)
        runs.append((_train(model, EPOCHS), model.get_params()))
    assert runs[0][0] == runs[1][0]
    _assert_same(runs[0][1], runs[1][1])


@pytest.mark.parametrize("name,dataset,threshold", CASES[:3], ids=lambda v: str(v))
def test_a_resumed_run_equals_the_uninterrupted_one(data, tmp_path, name, dataset, threshold):
    whole = _model(name, data[dataset], threshold)
    losses = _train(whole, EPOCHS)
    first = _model(name, data[dataset], threshold)
    _train(first, EPOCHS // 2)
    first.save_checkpoint(tmp_path / "half.ckpt")
    resumed = _model(name, data[dataset], threshold)
    resumed.load_checkpoint(tmp_path / "half.ckpt")
    assert _train(resumed, EPOCHS - EPOCHS // 2) == losses[EPOCHS // 2:]
    _assert_same(resumed.get_params(), whole.get_params())
