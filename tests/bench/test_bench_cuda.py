"""`morphgen bench --backend cuda`: morphgen's CUDA backend against the peers on the same GPU.

Nothing here needs a GPU. morphgen's side runs in the CPU SIMT emulation
($MORPHGEN_CUDA_EMULATION=1); the peers are started with CUDA_VISIBLE_DEVICES="" so that they find
no GPU on any machine, which is the case whose handling is tested: a clean error in the result,
never a traceback and never a quiet CPU run. Timings and device memory on a real GPU are not
checked here (see docs/benchmarks.md, "GPU runs").
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from morphgen.bench import harness, report, runs, suite_cli
from morphgen.bench.peers.random_graph import write_random_graph
from morphgen.bench.peers.runner import DEVICE_KEYS, RESULT_KEYS
from morphgen.bench.peers.spec import SpecError, parse_spec
from morphgen.cli import main

ROOT = Path(__file__).resolve().parents[2]
GCN = ROOT / "examples" / "gcn.mp"
# val and test must fit beside the training nodes of a 200-node graph (the defaults do not).
SMALL = "synthetic:nodes=200,edges=1000,features=8,classes=3,val=40,test=60"
NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}


# ----------------------------------------------------------------------------- morphgen's command
def test_cuda_command_names_backend_and_device(tmp_path):
    cmd = harness.morphgen_command(GCN, "d.npz", 3, 0, 2, tmp_path / "o.json", backend="cuda", device=1)
    assert cmd[cmd.index("--backend") + 1] == "cuda"
    assert cmd[cmd.index("--device") + 1] == "1"
    assert cmd[cmd.index("--threads") + 1] == "2"                 # still the CPU side's threads


def test_openmp_command_is_unchanged(tmp_path):
    cmd = harness.morphgen_command(GCN, "d.npz", 3, 0, 2, tmp_path / "o.json")
    assert "--backend" not in cmd and "--device" not in cmd


def _args(**over) -> argparse.Namespace:
    base = dict(model=str(GCN), dataset=SMALL, data_dir=None, peers="pyg", epochs=3, warmup=1, out="o",
                parity=False, sweep=None, sparsity_threshold=None, threads=1, memory_cap_gib=None,
                backend="openmp", device=None)
    return argparse.Namespace(**{**base, **over})


def test_device_is_always_pinned_for_cuda(monkeypatch):
    # morphgen and the peers must not pick their GPUs separately: bench always passes a number.
    monkeypatch.delenv(harness.CUDA_DEVICE_ENV, raising=False)
    assert runs.resolve_device(_args(backend="cuda")) == 0
    assert runs.resolve_device(_args(backend="cuda", device=2)) == 2
    monkeypatch.setenv(harness.CUDA_DEVICE_ENV, "3")
    assert runs.resolve_device(_args(backend="cuda")) == 3
    assert runs.resolve_device(_args()) is None
    assert "--backend cuda --device 3" in runs.command_line(_args(backend="cuda"))
    assert "--backend" not in runs.command_line(_args())
    monkeypatch.setenv(harness.CUDA_DEVICE_ENV, "gpu0")
    with pytest.raises(harness.BenchError, match="MORPHGEN_CUDA_DEVICE"):
        runs.resolve_device(_args(backend="cuda"))


def test_no_address_space_cap_on_gpu_runs_unless_asked():
    assert runs.resolve_cap(_args(backend="cuda")) is None
    assert runs.resolve_cap(_args(backend="cuda", memory_cap_gib=8.0)) == 8.0
    assert runs.resolve_cap(_args()) == harness.default_memory_cap_gib()


def test_device_option_needs_cuda(tmp_path, capsys):
    assert main(["bench", str(GCN), "--device", "1", "--out", str(tmp_path)]) == 2
    assert "--device: picks a GPU for --backend cuda" in capsys.readouterr().err
    assert main(["bench", str(GCN), "--backend", "cuda", "--device", "-1", "--out", str(tmp_path)]) == 2
    assert "--device: must be 0 or more" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the peers' spec
def test_spec_device_field():
    layers = {"layers": [4, 8, 3]}
    assert parse_spec(layers).device == "cpu" and not parse_spec(layers).on_cuda
    assert parse_spec({**layers, "device": "cuda:1"}).device == "cuda:1"
    assert parse_spec({**layers, "device": "cuda"}).device == "cuda:0"          # the index is written out
    for bad in ("gpu", "cuda:x", "cuda:", 0):
        with pytest.raises(SpecError, match="'device'"):
            parse_spec({**layers, "device": bad})


def test_peer_spec_names_the_gpu_only_on_cuda(tmp_path):
    shape = harness.program_shape(GCN)
    data = harness.prepare_dataset(SMALL, None, tmp_path)
    cpu = harness.peer_spec(shape, data, epochs=3, warmup=1, threads=1, sparse_features=False)
    assert "device" not in cpu                                     # a CPU spec is what it always was
    gpu = harness.peer_spec(shape, data, epochs=3, warmup=1, threads=1, sparse_features=False,
                            device=harness.device_name("cuda", 1))
    assert gpu["device"] == "cuda:1" and parse_spec(gpu).on_cuda


# ----------------------------------------------------------------------------- no GPU for the peers
@pytest.fixture(scope="module")
def tiny_graph(tmp_path_factory):
    return write_random_graph(tmp_path_factory.mktemp("cuda") / "g.npz", num_nodes=30, num_edges=120,
                              num_features=4, num_classes=3, seed=0)


@pytest.mark.parametrize("peer", ["pyg", "dgl"])
def test_peer_without_cuda_reports_a_clean_error(tiny_graph, tmp_path, peer):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"layers": [4, 8, 3], "epochs": 3, "warmup": 1, "device": "cuda:0"}))
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-m", f"morphgen.bench.peers.{peer}", "--data", str(tiny_graph),
                           "--spec", str(spec), "--out", str(out)],
                          env={**os.environ, **NO_GPU}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    r = json.loads(out.read_text())
    assert set(r) == set(RESULT_KEYS) | set(DEVICE_KEYS)
    assert "torch has no CUDA device here" in r["error"] and "cuda:0" in r["error"]
    # nothing was measured: not a CPU run passed off as a GPU one
    assert r["device"] == "cuda:0" and r["peak_device_bytes"] is None
    assert r["epoch_times_s"] == [] and r["epoch_time_s"] is None and r["first_epoch_loss"] is None


def test_dgl_without_cuda_support_is_named(tmp_path):
    # torch may see a GPU that dgl (the PyPI wheel is CPU-only) cannot use; that check is dgl's own.
    code = ("import torch\n"
            "from morphgen.bench.peers.dgl import import_dgl, require_cuda\n"
            "dgl = import_dgl()\n"
            "require_cuda(dgl, torch.device('cpu'))\n"
            "try:\n"
            "    require_cuda(dgl, torch.device('cuda:0'))\n"
            "except Exception as exc:\n"
            "    print(type(exc).__name__, exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, **NO_GPU}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("UserError device cuda:0: dgl has no CUDA device here")


# ----------------------------------------------------------------------------- end to end
def test_bench_cuda_end_to_end_in_emulation(tmp_path, monkeypatch):
    monkeypatch.setenv("MORPHGEN_CUDA_EMULATION", "1")
    monkeypatch.delenv(harness.CUDA_DEVICE_ENV, raising=False)
    out = tmp_path / "b"
    code = main(["bench", str(GCN), "--backend", "cuda", "--peers", "none", "--dataset", SMALL, "--epochs", "3",
                 "--warmup", "1", "--threads", "1", "--out", str(out), "--quick-machine",
                 "--sparsity-threshold", "0.5"])
    assert code == 0
    data = json.loads((out / "bench.json").read_text())
    assert data["backend"] == "cuda" and data["device"] == "cuda:0"
    assert "--backend cuda --device 0" in data["command"]
    [m] = data["systems"]
    assert m["error"] is None and len(m["epoch_times_s"]) == 3
    assert m["config"]["backend"] == "cuda" and m["device"] == "cuda:0"
    assert m["config"]["cuda_emulation"] is True
    assert m["peak_device_bytes"] == m["allocated_bytes"] > 200 * 8 * 4          # at least the features
    assert all(k["bound"] is None for k in data["kernels"])       # no CPU ceilings for GPU kernels
    # the timed run records no events; the kernel table comes from a separate run (3 epochs here)
    assert m["config"]["profiled"] == "kernel timers from a separate run of 3 epochs" and data["kernels"]
    md = (out / "bench.md").read_text()
    assert "Backend: cuda, GPU cuda:0" in md and "peak device (MiB)" in md and "SIMT emulation" in md
    assert "GPU ceilings: not measured (the SIMT emulation ran morphgen's kernels)" in md
    assert (out / "peak_device_memory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------------- report and suite
def _gpu_systems():
    return [{"system": "morphgen", "epoch_time_s": 0.002, "peak_rss_bytes": 100 << 20, "baseline_rss_bytes": 90 << 20,
             "peak_device_bytes": 10 << 20, "error": None, "config": {"backend": "cuda"}},
            {"system": "pyg", "epoch_time_s": 0.006, "peak_rss_bytes": 900 << 20, "baseline_rss_bytes": 800 << 20,
             "peak_device_bytes": 30 << 20, "error": None,
             "config": {"device": "cuda:0", "device_name": "NVIDIA H100"}},
            {"system": "dgl", "epoch_time_s": None, "peak_rss_bytes": 500 << 20, "peak_device_bytes": None,
             "error": "device cuda:0: dgl has no CUDA device here", "config": {}}]


def test_ratios_and_table_with_device_memory():
    systems = _gpu_systems()
    report.add_ratios(systems)
    assert systems[1]["time_ratio_vs_morphgen"] == pytest.approx(3.0)
    assert systems[1]["device_memory_ratio_vs_morphgen"] == pytest.approx(3.0)
    assert systems[2]["device_memory_ratio_vs_morphgen"] is None
    lines = report.systems_table(systems, 1 << 20, device=True)
    widths = {line.count("|") for line in lines}
    assert len(widths) == 1, "every row has the header's number of cells"
    assert "peak device (MiB)" in lines[0] and "| 30.0 | 3.00 |" in lines[3]
    cpu = [{k: v for k, v in s.items() if k != "peak_device_bytes"} for s in _gpu_systems()]
    report.add_ratios(cpu)
    assert "device_memory_ratio_vs_morphgen" not in cpu[1]
    assert "device" not in report.systems_table(cpu, 1 << 20)[0]


def test_backend_line_names_the_gpu():
    rpt = {"backend": "cuda", "device": "cuda:0", "threads": 4, "systems": _gpu_systems()}
    [line, _] = report.backend_line(rpt)
    assert line.startswith("Backend: cuda, GPU cuda:0 (NVIDIA H100)") and "--threads 4" in line
    assert report.backend_line({"threads": 4, "systems": []}) == []


def test_gpu_suite_section_leaves_the_cpu_one_alone():
    cpu = f"{suite_cli.BEGIN_MARK}\ncpu table\n{suite_cli.END_MARK}\n"
    text = suite_cli.replace_between_markers(cpu, "gpu table", suite_cli.marks("cuda"))
    assert "cpu table" in text and "gpu table" in text and text.startswith(cpu)
    again = suite_cli.replace_between_markers(text, "gpu table 2", suite_cli.marks("cuda"))
    assert "gpu table 2" in again and "gpu table\n" not in again and again.startswith(cpu)
    assert {p[3] for p in suite_cli.GPU_PLOTS}.isdisjoint({p[3] for p in suite_cli.PLOTS})


def test_suite_table_device_columns():
    r = {"dataset": {"nodes": 10, "edges": 20, "features": 4, "feature_sparsity": 0.0},
         "systems": _gpu_systems(), "analytic_minimum_bytes": 1 << 20}
    lines = suite_cli.suite_table([(suite_cli.SUITE[0], r)], ("pyg", "dgl"), device=True)
    assert "morphgen device MiB" in lines[0] and "dgl device MiB" in lines[0]
    assert "| 10 | 30 | – |" in lines[2]
    assert np.all([line.count("|") == lines[0].count("|") for line in lines])


def test_gpu_ceilings_are_measured_on_the_gpu_or_say_why_not():
    from morphgen.bench.gpu_limits import measure_gpu_limits
    from tests.cuda.conftest import gpu_present
    limits = measure_gpu_limits(0, quick=True)
    if gpu_present():
        assert limits["device_copy_gbs"] > 100 and limits["sgemm_gflops"] > 1000, limits
    else:
        assert "no CUDA device" in limits["error"], limits


def test_gpu_kernels_are_held_against_the_gpu_ceilings():
    from morphgen.bench.gpu_limits import as_ceilings
    gpu = {"device_name": "NVIDIA H100", "device_copy_gbs": 3000.0, "sgemm_gflops": 50000.0, "quick": False}
    profile = [{"kernel": "aggregate", "calls": 4, "seconds": 0.001, "bytes": 1.5e9, "flops": 1e8},
               {"kernel": "gemm", "calls": 2, "seconds": 0.001, "bytes": 1e8, "flops": 2.5e10}]
    rows = {r["kernel"]: r for r in report.kernel_limits(profile, as_ceilings(gpu))}
    assert rows["aggregate"]["bound"] == "memory" and rows["aggregate"]["fraction_of_limit"] == pytest.approx(0.5)
    assert rows["gemm"]["bound"] == "compute" and rows["gemm"]["fraction_of_limit"] == pytest.approx(0.5)
    assert as_ceilings({"error": "torch has no CUDA device here"}) is None
    lines = report._gpu_limits_lines(gpu)
    assert "device-to-device copy 3000 GB/s" in lines[0] and "sgemm 50000 GFLOP/s" in lines[0]
    assert "not measured (no torch)" in report._gpu_limits_lines({"error": "no torch"})[0]
