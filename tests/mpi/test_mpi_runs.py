"""The MPI backend's runs beyond parity: measured halo traffic, checkpoints shared with the
OpenMP backend at any rank count, and failures that end the whole job with a located message."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.e2e.support import REPO, assert_clean_failure, example, run_cli
from tests.mpi.support import assert_same_run, train

SYNTHETIC = "synthetic:nodes=300,edges=2400,features=24,classes=4,train_per_class=12,val=60,test=100"


def test_halo_bytes_equal_the_partition_figure(tmp_path):
    """examples/gcn.mp, per training epoch: forward, the C-wide product of the second layer
    (the first layer's product x·W is computed for ghost rows from their loaded features: no
    exchange); backward, the gradients of both aggregations' inputs (C and 16 wide) return to
    their owners.  So rows sent x C + ghost rows x (16 + C), times 4 bytes."""
    run = train(tmp_path, "gcn", SYNTHETIC, "--profile", backend="mpi", ranks=4)
    classes = 4
    for rank, figures in enumerate(run["per_rank"]):
        expected = (figures["halo_rows_sent"] * classes + figures["ghosts"] * (16 + classes)) * 4
        assert figures["ghosts"] > 0, f"rank {rank} has no ghosts: the test graph is too easy"
        assert figures["halo_bytes_per_epoch"] == expected, f"rank {rank}: {figures}"
        assert figures["allreduce_s_per_epoch"] > 0, figures     # a blocking all-reduce of the same gradients
        # the communication a wait exposes is the part of it after every rank had posted
        assert 0 <= figures["allreduce_exposed_s_per_epoch"] <= figures["allreduce_wait_s_per_epoch"], figures
    assert 0 <= run["allreduce_hidden"] <= 1
    # --profile: every rank's kernel timers, rank 0's in the report; the halo timer has counted
    # the training exchanges (and the evaluations' forward ones)
    for figures in run["per_rank"]:
        kernels = {k["kernel"]: k for k in figures["profile"]}
        assert kernels["halo"]["bytes"] >= figures["halo_bytes_per_epoch"] * 4, kernels["halo"]
        assert kernels["allreduce_wait"]["calls"] == kernels["allreduce_exposed"]["calls"] > 0
    assert run["profile"] == run["per_rank"][0]["profile"]


def _relational_small_weights(model: str, etypes: int, classes: int) -> int:
    """The floats of examples/MODEL.mp's weights other than its first layer's tables, all
    reduced whole: rgcn's b1, W2, S2, b2; rgcn_bases's also A1 and A2 (30 bases)."""
    second_layer = 16 + 16 * classes + classes                          # b1, S2, b2
    if model == "rgcn":
        return second_layer + etypes * 16 * classes                      # W2
    return second_layer + 2 * etypes * 30 + 30 * 16 * classes           # A1, A2, V2


@pytest.mark.parametrize("model", ["rgcn", "rgcn_bases"])
def test_featureless_tables_reduce_only_what_the_lookups_make(tmp_path, model):
    """On a featureless graph the first layer reads its tables at (edge type, source) pairs:
    rgcn's W1[etype][node] rows, rgcn_bases's bases V1[30][node] through pairs of a type and a
    source, and S1[node] at every node.  So the gradient all-reduce sums one 16-wide row per
    pair (W1's rows, or the lookups' pair sums that V1's gradient is made from), S1's rows and
    the small weights whole, on any rank count; the numbers stay one process's."""
    from morphgen.data.npz import save_npz
    from tests.e2e.support import typed_dataset
    dataset = typed_dataset(features=None, nodes=64, edges=320, etypes=12)
    data = save_npz(dataset, tmp_path / "typed.npz")
    g = dataset.graph
    pairs = len(set(zip(g.etype.tolist(), g.src.tolist())))
    assert pairs < g.num_etypes * g.num_nodes / 2, "the test graph reads too much of the table"
    expected = pairs * 16 + g.num_nodes * 16 + _relational_small_weights(model, g.num_etypes, dataset.num_classes)
    reference = train(tmp_path, model, str(data))
    for ranks in (2, 4):
        run = train(tmp_path, model, str(data), backend="mpi", ranks=ranks)
        assert_same_run(reference, run, 1e-5, f"{model} (featureless) on {ranks} ranks")
        for figures in run["per_rank"]:
            assert figures["allreduce_floats_per_epoch"] == expected, figures


def test_featureless_tables_are_stored_in_shares(tmp_path):
    """Each rank stores the weights, Adam moments and gradient of the rows of W1[etype][node] it
    steps only (TableShare::pack_storage): its own pairs' rows and a 1/ranks range of the rows no
    lookup reads, so on 4 ranks a rank allocates at least 4 x 64 bytes x (T - P)(1 - 1/4) less
    than a single rank, which stores the T = etypes x nodes rows whole (P: the rows the lookups
    read), and the numbers stay one process's."""
    from morphgen.data.npz import save_npz
    from tests.e2e.support import typed_dataset
    dataset = typed_dataset(features=None, nodes=64, edges=320, etypes=12)
    data = save_npz(dataset, tmp_path / "typed.npz")
    g = dataset.graph
    table, pairs = g.num_etypes * g.num_nodes, len(set(zip(g.etype.tolist(), g.src.tolist())))
    whole = train(tmp_path, "rgcn", str(data), backend="mpi", ranks=1)["per_rank"][0]["allocated_bytes"]
    run = train(tmp_path, "rgcn", str(data), backend="mpi", ranks=4)
    assert_same_run(train(tmp_path, "rgcn", str(data)), run, 1e-5, "rgcn (featureless) on 4 ranks")
    saved = 4 * 16 * 4 * ((table - pairs) * (1 - 1 / 4) - 1)
    for figures in run["per_rank"]:
        assert figures["allocated_bytes"] <= whole - saved, (figures["allocated_bytes"], whole, saved)


def test_featureless_bases_are_stored_in_shares(tmp_path):
    """rgcn_bases's bases V1[30][node][16] likewise: a rank stores every basis's row of the nodes
    its lookups read (sources of its edges: owned or ghost rows, so at most owned + ghosts of
    them) and a quarter of the rows no lookup reads (at most 30 x nodes / 4), so on 4 ranks it
    allocates at least 4 x 64 bytes x 30 x (nodes - owned - ghosts - nodes / 4) less than a
    single rank, with one process's numbers."""
    from morphgen.data.npz import save_npz
    from tests.e2e.support import typed_dataset
    dataset = typed_dataset(features=None, nodes=400, edges=600, etypes=6)
    data = save_npz(dataset, tmp_path / "typed.npz")
    nodes = dataset.graph.num_nodes
    whole = train(tmp_path, "rgcn_bases", str(data), backend="mpi", ranks=1)["per_rank"][0]["allocated_bytes"]
    run = train(tmp_path, "rgcn_bases", str(data), backend="mpi", ranks=4)
    assert_same_run(train(tmp_path, "rgcn_bases", str(data)), run, 1e-5, "rgcn_bases (featureless) on 4 ranks")
    for figures in run["per_rank"]:
        saved = 4 * 16 * 4 * 30 * (nodes - figures["owned"] - figures["ghosts"] - nodes / 4 - 1)
        assert saved > 0, figures              # the graph leaves a rank rows it does not read
        assert figures["allocated_bytes"] <= whole - saved, (figures, whole, saved)


def test_checkpoints_move_between_backends_and_rank_counts(tmp_path):
    """Three epochs on one backend, three more from its checkpoint on the other: the losses of
    one six-epoch run.  The MPI run also saves after every epoch (--checkpoint-every 1: every
    rank takes part in each save)."""
    whole = train(tmp_path, "gcn", SYNTHETIC, epochs=6)
    ck_mpi, ck_omp = tmp_path / "mpi.ck", tmp_path / "omp.ck"
    train(tmp_path, "gcn", SYNTHETIC, "--checkpoint", ck_mpi, "--checkpoint-every", 1, backend="mpi", ranks=2,
          epochs=3)
    resumed = train(tmp_path, "gcn", SYNTHETIC, "--resume", ck_mpi, epochs=3, tag="resumed")
    train(tmp_path, "gcn", SYNTHETIC, "--checkpoint", ck_omp, epochs=3, tag="first")
    resumed_mpi = train(tmp_path, "gcn", SYNTHETIC, "--resume", ck_omp, backend="mpi", ranks=4, epochs=3)
    tail = dict(whole, history=whole["history"][3:])
    for run, what in ((resumed, "openmp from an mpi checkpoint"), (resumed_mpi, "4 ranks from an openmp checkpoint")):
        run = dict(run, history=[dict(r, epoch=r["epoch"] + 3) for r in run["history"]])
        assert_same_run(tail, run, 1e-5, what)


@pytest.mark.parametrize("model", ["rgcn", "rgcn_bases"])
def test_checkpoints_of_tables_stepped_in_shares_hold_every_row(tmp_path, model):
    """A featureless R-GCN's tables (and the bases of its basis-decomposed form) are stepped in
    shares, each rank its own rows (TableRows, BasisTable): a checkpoint (and the weights)
    still hold every row as one process has it, so a run resumed from a 2-rank checkpoint on
    one process, or from one process's on 4 ranks, gives the losses of the uninterrupted run."""
    from morphgen.data.npz import save_npz
    from tests.e2e.support import typed_dataset
    data = str(save_npz(typed_dataset(features=None, nodes=64, edges=320, etypes=12), tmp_path / "typed.npz"))
    whole = train(tmp_path, model, data, epochs=6)
    ck_mpi, ck_omp = tmp_path / "mpi.ck", tmp_path / "omp.ck"
    train(tmp_path, model, data, "--checkpoint", ck_mpi, "--checkpoint-every", 1, backend="mpi", ranks=2, epochs=3)
    resumed = train(tmp_path, model, data, "--resume", ck_mpi, epochs=3, tag="resumed")
    train(tmp_path, model, data, "--checkpoint", ck_omp, epochs=3, tag="first")
    resumed_mpi = train(tmp_path, model, data, "--resume", ck_omp, backend="mpi", ranks=4, epochs=3)
    tail = dict(whole, history=whole["history"][3:])
    for run, what in ((resumed, "openmp from an mpi checkpoint"), (resumed_mpi, "4 ranks from an openmp checkpoint")):
        run = dict(run, history=[dict(r, epoch=r["epoch"] + 3) for r in run["history"]])
        assert_same_run(tail, run, 1e-5, what)


def test_predictions_are_gathered_in_the_datasets_node_order(tmp_path):
    """--predictions on 3 ranks: each node's logits come from the rank that owns it, written in
    the dataset's node order, as one process writes them (up to the order of the ranks' sums)."""
    one, ranks = tmp_path / "one.npz", tmp_path / "ranks.npz"
    train(tmp_path, "gcn", SYNTHETIC, "--predictions", one)
    report = train(tmp_path, "gcn", SYNTHETIC, "--predictions", ranks, backend="mpi", ranks=3)
    assert report["predictions"] == str(ranks)
    a, b = np.load(one), np.load(ranks)
    assert b["logits"].shape == a["logits"].shape == (300, 4)
    np.testing.assert_allclose(b["logits"], a["logits"], rtol=1e-5, atol=1e-6)
    top2 = np.sort(a["logits"], axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 1e-4           # a near tie may go either way
    np.testing.assert_array_equal(b["predicted"][clear], a["predicted"][clear])


def _mpi_args(tmp_path, *extra, ranks=2, parts="parts"):
    return ["train", example("gcn"), "--backend", "mpi", "--ranks", ranks, "--threads", 1, "--dataset", SYNTHETIC,
            "--epochs", 2, "--quiet", "--parts-dir", tmp_path / parts, *extra]


def test_a_rank_that_fails_ends_the_job_naming_it(tmp_path):
    assert run_cli(*_mpi_args(tmp_path)).returncode == 0          # writes the part files
    damaged = tmp_path / "parts" / "part-1.npz"
    damaged.write_bytes(damaged.read_bytes()[:200])
    started = time.monotonic()
    proc = run_cli(*_mpi_args(tmp_path), timeout=120)
    assert time.monotonic() - started < 60
    assert_clean_failure(proc, 2, "rank 1", "damaged part file", "MPI job failed")


def test_a_rank_that_dies_ends_the_job(tmp_path):
    """SIGKILL one rank mid-training: the others must not wait for it forever."""
    env = dict(os.environ)
    args = [sys.executable, "-m", "morphgen", *map(str, _mpi_args(tmp_path, ranks=2))]
    args[args.index("2", args.index("--epochs"))] = "1000000"
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        victim = None
        deadline = time.monotonic() + 120
        while victim is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            found = subprocess.run(["pgrep", "-f", f"^{sys.executable} -m morphgen.backends.mpi.worker {tmp_path}"],
                                   capture_output=True, text=True).stdout.split()
            victim = int(found[-1]) if len(found) == 2 else None    # the run's files sit in tmp_path/parts
        assert victim is not None, f"the ranks never started: {proc.poll()} {proc.stderr.read() if proc.poll() is not None else ''}"
        time.sleep(2)                                  # well into training
        os.kill(victim, signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    assert "MPI job failed" in err and "Traceback" not in err, err[-2000:]


def test_sigterm_stops_every_rank_after_one_epoch_saved(tmp_path):
    """SIGTERM to the launcher (as SLURM's time limit sends it) is passed on to the ranks, which
    agree on an epoch, save the checkpoint together and end with status 4; the checkpoint holds
    the epochs the report lists and resumes on the OpenMP backend."""
    ckpt, report, predictions = tmp_path / "run.ck", tmp_path / "run.json", tmp_path / "run.npz"
    args = [sys.executable, "-m", "morphgen",
            *map(str, _mpi_args(tmp_path, "--checkpoint", ckpt, "--checkpoint-every", 20, "--json", report,
                                "--predictions", predictions))]
    args[args.index("2", args.index("--epochs"))] = "1000000"
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)     # a failure below ends mpiexec and the ranks too
    try:
        deadline = time.monotonic() + 120
        while not ckpt.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)      # the first periodic checkpoint: the ranks are training
        assert ckpt.exists(), f"no checkpoint appeared: {proc.poll()} {proc.stderr.read() if proc.poll() is not None else ''}"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 4, err[-3000:]
    run = json.loads(report.read_text())
    epochs = len(run["history"])
    # the signal the launcher got, not the SIGUSR1 it passes on to the ranks
    assert run["stopped_by"] == "SIGTERM" and 20 <= epochs < 1000000
    assert f"morphgen: SIGTERM: stopped after epoch {epochs} of this run's 1000000 and saved {ckpt}" in err
    assert "Traceback" not in err and "MPI job failed" not in err
    assert not predictions.exists() and "--predictions: not written" in err     # a half-trained run's
    from morphgen.outputs import checkpoint_epochs
    assert checkpoint_epochs(ckpt) == epochs
    resumed = train(tmp_path, "gcn", SYNTHETIC, "--resume", ckpt, "--until-epoch", epochs + 2, epochs=None,
                    tag="resumed")
    assert len(resumed["history"]) == 2 and resumed["epochs_before"] == epochs


def test_partition_files_for_other_ranks_or_data_are_refused(tmp_path):
    assert run_cli(*_mpi_args(tmp_path, ranks=2)).returncode == 0
    assert_clean_failure(run_cli(*_mpi_args(tmp_path, ranks=4)), 2, "for 2 ranks, not 4")
    other = [a if a != SYNTHETIC else SYNTHETIC.replace("nodes=300", "nodes=301") for a in _mpi_args(tmp_path)]
    assert_clean_failure(run_cli(*other), 2, "written for other data")
    assert_clean_failure(run_cli(*_mpi_args(tmp_path, "--partitioner", "random")), 2,
                         "made by --partitioner auto, not random")
    manifest = tmp_path / "parts" / "manifest.json"
    manifest.write_text("{not json")
    assert_clean_failure(run_cli(*_mpi_args(tmp_path)), 2, "manifest.json: unreadable")


def test_bad_rank_counts_and_flags_are_clear_errors(tmp_path):
    assert_clean_failure(run_cli(*_mpi_args(tmp_path, ranks=301)), 2, "--ranks 301 is larger than")
    assert_clean_failure(run_cli(*_mpi_args(tmp_path, ranks=0)), 2, "--ranks must be at least 1")
    proc = run_cli("train", example("gcn"), "--ranks", 2, "--dataset", SYNTHETIC)
    assert_clean_failure(proc, 2, "--ranks, --parts-dir and --partitioner need a distributed backend")


def test_ranks_sleep_between_regions_only_where_threads_outnumber_cores(monkeypatch):
    """Spinning OpenMP workers are kept (fast regions) unless the ranks' threads outnumber a
    node's cores; a policy the user set is never replaced."""
    from backends.mpi.launch import ranks_per_node
    from morphgen.library import openmp_wait_env
    from morphgen.resources import usable_cores

    cores = usable_cores()
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert openmp_wait_env(cores) == {}
    assert openmp_wait_env(cores + 1) == {"OMP_WAIT_POLICY": "PASSIVE"}
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert openmp_wait_env(cores + 1) == {}
    monkeypatch.delenv("SLURM_JOB_NUM_NODES", raising=False)
    assert ranks_per_node(4) == 4
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    assert ranks_per_node(4) == 2 and ranks_per_node(5) == 3


class _NodeComm:
    """What _progress_thread_setting asks of a communicator: the ranks sharing this node."""
    def __init__(self, ranks_here):
        self.ranks_here = ranks_here

    def Split_type(self, kind):
        return self

    def Get_size(self):
        return self.ranks_here

    def Free(self):
        pass


def test_the_progress_thread_runs_only_where_a_core_is_left_for_it(monkeypatch):
    """A polling thread on a node whose cores the ranks' threads already fill made small epochs
    several times longer (every reduction step waited for a peer's thread to be scheduled); a
    setting the user gave is never replaced."""
    from backends.mpi import worker
    from morphgen import resources

    monkeypatch.setattr(resources, "usable_cores", lambda: 4)
    for ranks_here, threads, polls in ((2, 1, True), (3, 1, True), (4, 1, False), (2, 2, False), (1, 4, False)):
        monkeypatch.delenv("MORPHGEN_MPI_POLL_US", raising=False)
        worker._progress_thread_setting(_NodeComm(ranks_here), threads)
        assert ("MORPHGEN_MPI_POLL_US" not in os.environ) == polls, (ranks_here, threads)
    monkeypatch.setenv("MORPHGEN_MPI_POLL_US", "50")
    worker._progress_thread_setting(_NodeComm(4), 1)
    assert os.environ["MORPHGEN_MPI_POLL_US"] == "50"


def test_early_stopping_stops_selects_and_resumes_as_one_process(tmp_path):
    """gnn.earlyStopping(patience = 3), seed 0: the best validation accuracy at epoch 4 (tied at
    6 and 7), training ends after epoch 7 with epoch 4's weights, on 2 ranks as in one process,
    and a 2-rank run resumed from the one-process checkpoint of epoch 5 (whose weights are newer
    than the best ones) stops and selects as the uninterrupted run."""
    program = tmp_path / "gcn_es.mp"
    program.write_text(example("gcn").read_text().replace(
        'gnn.normalizeFeatures("row");', 'gnn.normalizeFeatures("row");\n    gnn.earlyStopping(patience = 3);'))
    whole = train(tmp_path, program, SYNTHETIC, epochs=10)
    assert (whole["best_epoch"], len(whole["history"])) == (4, 7), whole["history"]
    ranks = train(tmp_path, program, SYNTHETIC, backend="mpi", ranks=2, epochs=10)
    assert ranks["best_epoch"] == 4
    assert_same_run(whole, ranks, 1e-5, "2 ranks")
    checkpoint = tmp_path / "epoch5.ck"
    first = train(tmp_path, program, SYNTHETIC, "--checkpoint", checkpoint, epochs=5, tag="first")
    resumed = train(tmp_path, program, SYNTHETIC, "--resume", checkpoint, backend="mpi", ranks=2, epochs=5,
                    tag="resumed")
    assert resumed["best_epoch"] == 4
    both = dict(resumed, history=first["history"] + [dict(r, epoch=r["epoch"] + 5) for r in resumed["history"]])
    assert_same_run(whole, both, 1e-5, "2 ranks resumed from one process's epoch 5")
