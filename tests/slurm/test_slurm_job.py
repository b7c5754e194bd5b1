"""`morphgen slurm`: the job script it writes, and that script run on a real SLURM cluster.

The unit tests read the generated script; the end-to-end tests start a private single-node
cluster (tests/slurm/cluster.py), submit the script with sbatch and compare the job's metrics
with an in-process run of the same program. A cluster that cannot start fails the tests (with
the reason and the daemons' logs), it never skips them.
"""
from __future__ import annotations

import json
import math
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from morphgen.cli import main

from .cluster import Cluster, ClusterError

REPO = Path(__file__).resolve().parents[2]
GCN = REPO / "examples" / "gcn.mp"
MORPHGEN = Path(sys.executable).parent / "morphgen"
METRICS = ("final_loss", "train_acc", "val_acc", "test_acc")


def generate(tmp_path, *extra, output="job.sbatch"):
    """Run `morphgen slurm`; returns (exit status, script path)."""
    script = tmp_path / output
    rc = main(["slurm", *map(str, extra), "-o", str(script)])
    return rc, script


def train_words(script: Path) -> list[str]:
    """The `morphgen train` command of a script, split as the shell would (before expansion)."""
    text = script.read_text().replace("\\\n", " ")
    lines = [line for line in text.splitlines() if " train " in line and not line.startswith("#")]
    assert len(lines) == 1, f"expected one train command in {script}:\n{script.read_text()}"
    return shlex.split(lines[0])


def option(words, flag):
    return words[words.index(flag) + 1]


# -- the generator ---------------------------------------------------------------------------

def test_mpi_script_contents(tmp_path):
    rc, script = generate(tmp_path, GCN, "--nodes", 2, "--ntasks-per-node", 4, "--threads", 3,
                          "--time", "00:10:00", "--partition", "cpu", "--job-name", "gcn-run",
                          "--dataset", "synthetic", "--epochs", 7, "--seed", 5,
                          "--json", tmp_path / "out.json", "--checkpoint", tmp_path / "ck.npz",
                          "--checkpoint-every", 3, "--parts-dir", tmp_path / "parts",
                          "--predictions", tmp_path / "predicted.npz")
    assert rc == 0
    text = script.read_text()
    for line in ("#!/bin/bash", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "#SBATCH --cpus-per-task=3",
                 "#SBATCH --time=00:10:00", "#SBATCH --partition=cpu", "#SBATCH --job-name=gcn-run",
                 "#SBATCH --output=slurm-%j.out", "export OMP_NUM_THREADS=3"):
        assert line in text.splitlines(), f"{line!r} missing from:\n{text}"
    # directives must come before the first command or sbatch ignores them
    lines = text.splitlines()
    first_command = next(i for i, l in enumerate(lines) if l and not l.startswith("#"))
    assert max(i for i, l in enumerate(lines) if l.startswith("#SBATCH")) < first_command
    words = train_words(script)
    assert words[:3] == [str(MORPHGEN), "train", str(GCN)]
    assert option(words, "--backend") == "mpi"
    assert option(words, "--ranks") == "${SLURM_NTASKS:?submit this script with sbatch}"
    assert option(words, "--threads") == "3"
    assert option(words, "--epochs") == "7" and option(words, "--seed") == "5"
    assert option(words, "--json") == str(tmp_path / "out.json")
    assert option(words, "--checkpoint") == str(tmp_path / "ck.npz")
    assert option(words, "--checkpoint-every") == "3"
    assert option(words, "--predictions") == str(tmp_path / "predicted.npz")
    assert option(words, "--parts-dir") == str(tmp_path / "parts")
    assert script.stat().st_mode & 0o111, "the script should be executable"
    subprocess.run(["bash", "-n", str(script)], check=True)


def test_openmp_script_runs_plain_train(tmp_path):
    rc, script = generate(tmp_path, GCN, "--backend", "openmp", "--nodes", 1, "--ntasks-per-node", 1,
                          "--threads", 2, "--resume", tmp_path / "ck.npz")
    assert rc == 0
    words = train_words(script)
    assert option(words, "--backend") == "openmp" and "--ranks" not in words
    assert option(words, "--threads") == "2"
    assert option(words, "--resume") == str(tmp_path / "ck.npz")
    assert "#SBATCH --cpus-per-task=2" in script.read_text()


def test_the_job_creates_the_folders_of_its_outputs(tmp_path):
    """--json, --checkpoint and --predictions may name folders that exist only once the job runs
    (`morphgen train` refuses a missing folder): the script creates them before training."""
    json_out, checkpoint = tmp_path / "runs" / "a.json", tmp_path / "ckpts dir" / "a.ck"
    predictions = tmp_path / "predicted" / "a.npz"
    rc, script = generate(tmp_path, GCN, "--backend", "openmp", "--nodes", 1, "--ntasks-per-node", 1,
                          "--dataset", "synthetic:nodes=200,edges=800,features=8,classes=3", "--epochs", 1,
                          "--json", json_out, "--checkpoint", checkpoint, "--predictions", predictions)
    assert rc == 0 and not json_out.parent.exists() and not predictions.parent.exists()
    subprocess.run(["bash", str(script)], cwd=tmp_path, check=True, capture_output=True)
    assert json.loads(json_out.read_text())["epochs"] == 1 and checkpoint.is_file()
    assert np.load(predictions)["logits"].shape == (200, 3)


def test_a_job_resuming_a_checkpoint_keeps_its_seed_unless_given_one(tmp_path):
    """Without --seed the script names none: `morphgen train --resume` keeps the checkpoint's."""
    rc, script = generate(tmp_path, GCN, "--nodes", 1, "--ntasks-per-node", 2, "--resume", tmp_path / "a.ck")
    assert rc == 0 and "--seed" not in train_words(script)
    rc, script = generate(tmp_path, GCN, "--nodes", 1, "--ntasks-per-node", 2, "--resume", tmp_path / "a.ck",
                          "--seed", 3, output="seeded.sbatch")
    assert rc == 0 and option(train_words(script), "--seed") == "3"


def test_a_checkpointing_job_is_warned_before_its_time_limit(tmp_path):
    """With --checkpoint, SLURM signals the batch shell --save-before seconds ahead (120 by
    default), and the script passes the signal on to morphgen; without one, nothing changes."""
    rc, script = generate(tmp_path, GCN, "--nodes", 1, "--ntasks-per-node", 2, "--checkpoint", tmp_path / "ck")
    assert rc == 0
    lines = script.read_text().splitlines()
    assert "#SBATCH --signal=B:USR1@120" in lines and "#SBATCH --requeue" not in lines
    assert "trap 'kill -USR1 \"$train\" 2>/dev/null || true' USR1" in lines
    assert "resume=" not in script.read_text()
    subprocess.run(["bash", "-n", str(script)], check=True)
    rc, script = generate(tmp_path, GCN, "--nodes", 1, "--ntasks-per-node", 2, "--checkpoint", tmp_path / "ck",
                          "--save-before", 600, output="later.sbatch")
    assert rc == 0 and "#SBATCH --signal=B:USR1@600" in script.read_text().splitlines()
    rc, script = generate(tmp_path, GCN, "--nodes", 1, "--ntasks-per-node", 2, output="plain.sbatch")
    assert rc == 0 and "--signal" not in script.read_text() and "trap" not in script.read_text()


def test_a_requeueing_job_resumes_from_its_checkpoint_and_counts_epochs_in_all(tmp_path):
    ckpt = tmp_path / "ck"
    rc, script = generate(tmp_path, GCN, "--nodes", 1, "--ntasks-per-node", 2, "--checkpoint", ckpt,
                          "--requeue", "--epochs", 50)
    assert rc == 0
    text = script.read_text()
    for line in ("#SBATCH --requeue", "#SBATCH --open-mode=append", "resume=()",
                 f'if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ] && [ -e {ckpt} ]; then', f"    resume=(--resume {ckpt})"):
        assert line in text.splitlines(), f"{line!r} missing from:\n{text}"
    words = train_words(script)
    assert option(words, "--until-epoch") == "50" and "--epochs" not in words and "--resume" not in words
    assert '    --quiet ${resume[@]+"${resume[@]}"} &' in text.splitlines()
    subprocess.run(["bash", "-n", str(script)], check=True)
    rc, script = generate(tmp_path, GCN, "--nodes", 1, "--ntasks-per-node", 2, "--checkpoint", ckpt,
                          "--requeue", "--resume", tmp_path / "old", "--until-epoch", 80, output="more.sbatch")
    assert rc == 0
    assert f"resume=(--resume {tmp_path / 'old'})" in script.read_text().splitlines()
    assert option(train_words(script), "--until-epoch") == "80"


def test_paths_with_spaces_and_quotes_are_quoted(tmp_path):
    folder = tmp_path / "my models & 'data'"
    folder.mkdir()
    model = folder / "gcn.mp"
    shutil.copy(GCN, model)
    rc, script = generate(tmp_path, model, "--nodes", 1, "--ntasks-per-node", 2,
                          "--json", folder / "out put.json", "--dataset", folder / "my graph.npz")
    assert rc == 0
    words = train_words(script)
    assert words[2] == str(model)
    assert option(words, "--json") == str(folder / "out put.json")
    assert option(words, "--dataset") == str(folder / "my graph.npz")
    subprocess.run(["bash", "-n", str(script)], check=True)


def test_relative_paths_become_absolute_and_default_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(GCN, tmp_path / "model.mp")
    assert main(["slurm", "model.mp", "--nodes", "1", "--ntasks-per-node", "2",
                 "--json", "runs/out.json", "--dataset", "cora", "--data-dir", "data"]) == 0
    script = tmp_path / "model.sbatch"       # default: MODEL-stem.sbatch in the working directory
    words = train_words(script)
    assert words[2] == str(tmp_path / "model.mp")
    assert option(words, "--json") == str(tmp_path / "runs" / "out.json")
    assert option(words, "--data-dir") == str(tmp_path / "data")
    assert option(words, "--dataset") == "cora"   # a name stays a name (looked up in --data-dir)
    assert "#SBATCH --job-name=model" in script.read_text()


def test_refuses_to_overwrite_without_force(tmp_path, capsys):
    script = tmp_path / "job.sbatch"
    script.write_text("mine\n")
    rc, _ = generate(tmp_path, GCN, "--nodes", 1, "--ntasks-per-node", 1)
    assert rc == 2
    assert "job.sbatch exists; pass --force" in capsys.readouterr().err
    assert script.read_text() == "mine\n"
    assert main(["slurm", str(GCN), "--nodes", "1", "--ntasks-per-node", "1", "-o", str(script), "--force"]) == 0
    assert "#SBATCH --nodes=1" in script.read_text()


@pytest.mark.parametrize("args, message", [
    (["--nodes", "0", "--ntasks-per-node", "2"], "--nodes must be at least 1, got 0"),
    (["--nodes", "1", "--ntasks-per-node", "-1"], "--ntasks-per-node must be at least 1, got -1"),
    (["--nodes", "1", "--ntasks-per-node", "1", "--threads", "0"], "--threads must be at least 1, got 0"),
    (["--nodes", "1", "--ntasks-per-node", "2", "--backend", "openmp"], "--backend openmp runs one process"),
    (["--nodes", "2", "--ntasks-per-node", "1", "--backend", "openmp"], "asks for 2 tasks"),
    (["--nodes", "1", "--ntasks-per-node", "1", "--backend", "openmp", "--parts-dir", "p"],
     "--parts-dir needs --backend mpi"),
    (["--nodes", "1", "--ntasks-per-node", "1", "--time", "90"], "expected [D-]HH:MM:SS"),
    (["--nodes", "1", "--ntasks-per-node", "1", "--job-name", "a b"], "--job-name 'a b'"),
    (["--nodes", "1", "--ntasks-per-node", "1", "--epochs", "0"], "--epochs must be positive"),
    (["--nodes", "1", "--ntasks-per-node", "1", "--requeue"], "--requeue needs --checkpoint FILE"),
    (["--nodes", "1", "--ntasks-per-node", "1", "--checkpoint", "c", "--time", "00:02:00"],
     "--save-before 120 is not shorter than the job's --time 00:02:00 (120 s)"),
    (["--nodes", "1", "--ntasks-per-node", "1", "--checkpoint", "c", "--save-before", "0"],
     "--save-before must be 1 to 65535 seconds"),
    (["--nodes", "1", "--ntasks-per-node", "1", "--checkpoint", "c", "--requeue", "--resume", "r", "--epochs", "5"],
     "give --until-epoch N"),
    (["--nodes", "1", "--ntasks-per-node", "1", "--epochs", "5", "--until-epoch", "6"], "not both"),
])
def test_bad_arguments_exit_2_with_a_message(tmp_path, capsys, args, message):
    rc, script = generate(tmp_path, GCN, *args)
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err and "Traceback" not in err
    assert not script.exists()


def test_missing_program_exits_2(tmp_path, capsys):
    rc, script = generate(tmp_path, tmp_path / "nope.mp", "--nodes", 1, "--ntasks-per-node", 1)
    assert rc == 2 and "no such program file" in capsys.readouterr().err and not script.exists()


# -- on a real cluster -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster():
    """One private cluster for this module's jobs (under xdist, one per worker that runs them:
    each has its own directory and ports, so they do not meet). A start failure is kept and
    reported by the test, so that it fails rather than errors in set-up."""
    c = Cluster()
    try:
        c.start()
    except ClusterError as exc:
        c.error = f"could not start the test SLURM cluster: {exc}"
    yield c
    c.stop()
    shutil.rmtree(c.root, ignore_errors=True)


def reference_run(tmp_path, epochs: int) -> dict:
    """The same program and data trained in this process on the OpenMP backend, one thread."""
    out = tmp_path / "reference.json"
    rc = main(["train", str(GCN), "--backend", "openmp", "--dataset", "synthetic", "--epochs", str(epochs),
               "--threads", "1", "--seed", "0", "--quiet", "--json", str(out)])
    assert rc == 0, "the in-process reference run failed"
    return json.loads(out.read_text())


def run_job(cluster, tmp_path, backend: str, ntasks: int) -> dict:
    if cluster.error:
        pytest.fail(cluster.error)
    out = tmp_path / "out.json"
    rc, script = generate(tmp_path, GCN, "--dataset", "synthetic", "--epochs", 5, "--backend", backend,
                          "--nodes", 1, "--ntasks-per-node", ntasks, "--threads", 1, "--time", "00:05:00",
                          "--json", out, output=f"{backend}.sbatch")
    assert rc == 0, "morphgen slurm failed"
    try:
        job, state = cluster.submit_and_wait(script, cwd=tmp_path, timeout_s=300)
    except ClusterError as exc:
        pytest.fail(str(exc))
    log = tmp_path / f"slurm-{job}.out"
    log_text = log.read_text(errors="replace") if log.exists() else f"(no log {log})"
    assert state == "COMPLETED", (f"{backend} job {job} ended {state}, exit code {cluster.job_exit_code(job)}; "
                                  f"its log {log}:\n{log_text[-4000:]}")
    assert out.is_file(), f"{backend} job {job} completed but wrote no {out}; its log:\n{log_text[-4000:]}"
    return json.loads(out.read_text())


def assert_same_metrics(job: dict, reference: dict, backend: str) -> None:
    for key in METRICS:
        assert math.isclose(job[key], reference[key], rel_tol=1e-5, abs_tol=1e-7), \
            f"{backend} job's {key} {job[key]!r} differs from the in-process OpenMP run's {reference[key]!r}"


def test_sbatch_openmp_job_matches_in_process_run(cluster, tmp_path):
    reference = reference_run(tmp_path, epochs=5)   # first: it also fills the build cache for the job
    job = run_job(cluster, tmp_path, "openmp", ntasks=1)
    assert job["backend"] == "openmp" and job["epochs"] == 5 and job["threads"] == 1
    assert_same_metrics(job, reference, "openmp")


def test_sbatch_mpi_job_matches_in_process_run(cluster, tmp_path):
    reference = reference_run(tmp_path, epochs=5)
    job = run_job(cluster, tmp_path, "mpi", ntasks=2)
    assert job["epochs"] == 5
    assert_same_metrics(job, reference, "mpi")


def test_a_job_warned_of_its_time_limit_saves_requeues_and_ends_as_one_run(cluster, tmp_path):
    """USR1 to the batch shell, as SLURM sends it --save-before seconds ahead of the time limit
    (sent at once here): morphgen stops after its epoch, saved; the script requeues the job; the
    job's second run resumes from the checkpoint and ends where an uninterrupted run does."""
    if cluster.error:
        pytest.fail(cluster.error)
    epochs = 6000       # ~4 s of training: the signal arrives well before the end
    reference = reference_run(tmp_path, epochs=epochs)
    ckpt, out = tmp_path / "run.ck", tmp_path / "out.json"
    rc, script = generate(tmp_path, GCN, "--dataset", "synthetic", "--epochs", epochs, "--backend", "openmp",
                          "--nodes", 1, "--ntasks-per-node", 1, "--threads", 1, "--time", "00:10:00",
                          "--json", out, "--checkpoint", ckpt, "--checkpoint-every", 50, "--requeue",
                          output="requeue.sbatch")
    assert rc == 0, "morphgen slurm failed"
    log = lambda: (tmp_path / f"slurm-{job}.out").read_text(errors="replace")   # noqa: E731
    try:
        job = cluster.submit(script, cwd=tmp_path)
        # training has begun (its first periodic checkpoint), or the job ended early
        cluster.wait(job, 120, until=lambda state: ckpt.exists() or
                     state not in ("", "PENDING", "CONFIGURING", "RUNNING"))
        cluster.signal_batch_shell(job, "USR1")
        cluster.wait(job, 120, until=lambda state: state in ("COMPLETED", "FAILED") or
                     cluster.job_field(job, "Restarts") == "1")
        assert cluster.job_field(job, "Restarts") == "1", f"the job was not requeued; its log:\n{log()[-4000:]}"
        cluster.start_now(job)
        state = cluster.wait(job, 300)
    except ClusterError as exc:
        pytest.fail(str(exc))
    text = log()
    assert state == "COMPLETED", f"job {job} ended {state}; its log:\n{text[-4000:]}"
    assert "morphgen: SIGUSR1: stopped after epoch" in text and f"requeueing job {job}" in text, text[-4000:]
    run = json.loads(out.read_text())          # the second run's report
    assert run["resumed_from"] == str(ckpt) and 0 < run["epochs_before"] < epochs
    assert run["epochs_before"] + len(run["history"]) == epochs
    assert_same_metrics(run, reference, "requeued openmp")
