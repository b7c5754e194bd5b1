"""What the user names for morphgen to write never destroys what they had (morphgen/outputs.py):
the run's inputs, files and folders morphgen did not write, devices and pipes, the other output
of the same run.  Each refusal comes before any work, with the file's name and the reason."""
from __future__ import annotations

import json
import os

import pytest

from tests.e2e.support import assert_clean_failure, example, run_cli

TINY = "synthetic:nodes=120,edges=600,features=8,classes=3,train_per_class=10,val=20,test=30"


def _train(*extra, cwd):
    return run_cli("train", "m.mp", "--dataset", TINY, "--threads", "1", "--epochs", "1", "--quiet", *extra, cwd=cwd)


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "m.mp").write_text(example("gcn").read_text())
    (tmp_path / "mine.txt").write_text("precious")
    return tmp_path


@pytest.mark.parametrize("args, message", [
    (("--json", "m.mp"), "--json m.mp: is the program being trained"),
    (("--checkpoint", "m.mp"), "--checkpoint m.mp: is the program being trained"),
    (("--json", "mine.txt"), "--json mine.txt: exists and is not a morphgen report"),
    (("--checkpoint", "mine.txt"), "--checkpoint mine.txt: exists and is not a morphgen checkpoint"),
    (("--json", "run.out", "--checkpoint", "run.out"), "--json and --checkpoint both name run.out"),
    (("--resume", "missing.ck"), "--resume missing.ck: does not exist"),
], ids=["json-on-program", "checkpoint-on-program", "json-on-user-file", "checkpoint-on-user-file",
        "one-file-for-both", "missing-resume"])
def test_outputs_that_would_destroy_something_are_refused_before_any_work(folder, args, message):
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    proc = _train(*args, cwd=folder)
    assert_clean_failure(proc, 2, message)
    assert "compiling" not in proc.stderr
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_the_dataset_file_is_never_an_output(folder):
    data = folder / "data.npz"
    data.write_bytes(b"PK\x03\x04 not really a dataset")
    proc = run_cli("train", "m.mp", "--dataset", str(data), "--json", str(data), "--quiet", cwd=folder)
    assert_clean_failure(proc, 2, "is the dataset")
    assert data.read_bytes() == b"PK\x03\x04 not really a dataset"


def test_pipes_are_refused_and_links_written_through(folder):
    os.mkfifo(folder / "pipe")
    assert_clean_failure(_train("--json", "pipe", cwd=folder), 2, "is not a regular file")
    assert (folder / "pipe").is_fifo()
    (folder / "report.json").write_text('{"written_by": "morphgen 0.1.0"}')     # an earlier report
    (folder / "link.json").symlink_to("report.json")
    proc = _train("--json", "link.json", "--checkpoint", "run.ck", cwd=folder)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (folder / "link.json").is_symlink()
    assert json.loads((folder / "report.json").read_text())["epochs"] == 1
    # resuming from a checkpoint and saving it again in the same file is how runs are continued
    proc = _train("--resume", "run.ck", "--checkpoint", "run.ck", "--json", "link.json", cwd=folder)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((folder / "report.json").read_text())
    assert (report["resumed_from"], report["epochs_before"], len(report["history"])) == ("run.ck", 1, 1)


def test_compile_replaces_only_its_own_output_folder(folder):
    (folder / "out").mkdir()
    (folder / "out" / "model.cpp").write_text("// the user's own")
    proc = run_cli("compile", "m.mp", "-o", "out", cwd=folder)
    assert_clean_failure(proc, 2, "-o out: holds model.cpp, which morphgen did not write")
    assert (folder / "out" / "model.cpp").read_text() == "// the user's own"
    assert_clean_failure(run_cli("compile", "m.mp", "--emit", "ir", "-o", "out", cwd=folder), 2,
                         "--emit ir prints to the terminal")


def test_partition_replaces_only_its_own_parts_and_drops_stale_ones(folder):
    (folder / "mine").mkdir()
    (folder / "mine" / "part-00000.npz").write_text("the user's")
    graph = "rmat:200:1600:3"
    assert_clean_failure(run_cli("partition", graph, "--parts", "2", "--out", "mine", "--no-compare", cwd=folder), 2,
                         "--out mine: holds part-00000.npz, which morphgen did not write")
    assert (folder / "mine" / "part-00000.npz").read_text() == "the user's"
    for parts in (3, 2):
        proc = run_cli("partition", graph, "--parts", parts, "--out", "parts", "--no-compare", cwd=folder)
        assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (folder / "parts").iterdir()) == ["manifest.json", "part-00000.npz",
                                                                    "part-00001.npz"]
    assert_clean_failure(run_cli("partition", graph, "--parts", "201", cwd=folder), 2,
                         "--parts 201 is more than the graph's 200 nodes")


def test_slurm_checks_the_jobs_files_when_it_writes_the_script(folder):
    proc = run_cli("slurm", "m.mp", "--nodes", "1", "--ntasks-per-node", "2", "--json", "m.mp", cwd=folder)
    assert_clean_failure(proc, 2, "--json m.mp: is the program being trained")
    proc = run_cli("slurm", "m.mp", "--nodes", "1", "--ntasks-per-node", "2", "-o", "m.mp", "--force", cwd=folder)
    assert_clean_failure(proc, 2, "-o m.mp is the program being trained")
    proc = run_cli("slurm", "m.mp", "--nodes", "1", "--ntasks-per-node", "2", "--dataset", "synthetic:nodes=-1",
                   cwd=folder)
    assert_clean_failure(proc, 2, "synthetic: nodes: must be >= 2, got -1")
    assert not (folder / "m.sbatch").exists()
