"""A training epoch captured once as a CUDA graph and replayed (backends/cuda/graph.cuh).

A replay repeats the captured kernels with their captured arguments, so everything that changes
from epoch to epoch must come from the device: the dropout streams and the optimizer's step
(from the epochs since the capture), the loss (staged to the host on the stream).  These runs
compare replayed epochs with the same epochs launched kernel by kernel (MORPHGEN_CUDA_GRAPHS=0)
and with the OpenMP backend; dropout is on in all of them.  Without a GPU they run through the
SIMT emulation, which records a captured stream's work and refuses, as the CUDA runtime does,
what would synchronise inside a capture.
"""
from __future__ import annotations

import pytest

from tests.e2e.support import example
from tests.mpi.support import assert_same_run, train

SYNTHETIC = "synthetic:nodes=300,edges=2400,features=24,classes=4,train_per_class=12,val=60,test=100"


@pytest.fixture(autouse=True)
def unoptimised_builds(monkeypatch):
    """-O0, as tests/cuda/test_cuda_parity.py builds the examples: the same builds, from the cache."""
    monkeypatch.setenv("MORPHGEN_OPT_LEVEL", "0")


def test_replayed_epochs_match_epochs_launched_one_by_one(tmp_path, monkeypatch):
    """GAT drops features, hidden rows and attention weights: three kinds of dropout kernels.
    (tests/cuda/test_cuda_parity.py compares every example's replayed epochs with OpenMP.)"""
    graphed = train(tmp_path, "gat", SYNTHETIC, backend="cuda", epochs=5, tag="graph")
    monkeypatch.setenv("MORPHGEN_CUDA_GRAPHS", "0")
    launched = train(tmp_path, "gat", SYNTHETIC, backend="cuda", epochs=5, tag="kernels")
    assert graphed["cuda_graph"] is True and launched["cuda_graph"] is False
    # the same kernels with the same arguments (atomics may add in another order); a replay with
    # the captured epoch's masks or step would be off by 1e-3 from the third epoch on
    assert_same_run(launched, graphed, 1e-6, "gat: replayed epochs")


def test_a_resumed_run_replays_from_the_checkpoint_epoch(tmp_path):
    """The captured epoch is the resumed run's second (epoch 4 of the whole): later replays take
    their dropout masks and Adam steps from the epochs since then, not since epoch 0."""
    whole = train(tmp_path, "gcn", SYNTHETIC, epochs=6)
    ck = tmp_path / "cuda.ck"
    train(tmp_path, "gcn", SYNTHETIC, "--checkpoint", ck, backend="cuda", epochs=2, tag="first")
    resumed = train(tmp_path, "gcn", SYNTHETIC, "--resume", ck, backend="cuda", epochs=4, tag="resumed")
    assert resumed["cuda_graph"] is True
    resumed = dict(resumed, history=[dict(r, epoch=r["epoch"] + 2) for r in resumed["history"]])
    assert_same_run(dict(whole, history=whole["history"][2:]), resumed, 1e-4, "cuda resumed from a checkpoint")


def test_replayed_epochs_count_their_kernels_and_timed_epochs_are_not_replayed():
    """Each replay adds the captured epoch's calls, bytes and flops to the kernel timers; with the
    clock on (--profile) the epochs run kernel by kernel, so that every kernel is timed."""
    import morphgen
    from morphgen.data import load_dataset
    model = morphgen.compile(example("gat"), backend="cuda", threads=1)
    model.bind(load_dataset(SYNTHETIC))
    session = model.session
    session.time_kernels(False)
    calls = []
    for _ in range(4):
        session.reset_timers()
        session.train_epoch()
        calls.append({r["kernel"]: (r["calls"], r["bytes"], r["flops"]) for r in session.timers()})
    assert session.epoch_graph()
    assert calls[0] == calls[1] == calls[2] == calls[3]          # eager, captured, replayed, replayed
    assert sum(c for c, _, _ in calls[0].values()) > 0
    session.time_kernels(True)
    session.reset_timers()
    session.train_epoch()
    assert not session.epoch_graph()
    assert sum(r["seconds"] for r in session.timers()) > 0
