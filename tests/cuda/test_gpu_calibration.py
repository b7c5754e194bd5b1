"""The CUDA backend's feature path follows the GPU's calibration (backends/cuda/calibrate.cu), not
the host CPU's.  Here its sweep runs through the SIMT emulation on a small shape: the numbers are
the CPU's, but the sweep, the crossover, the cache and the choice they feed are the GPU's code."""
import functools
from pathlib import Path

import pytest

from morphgen import calibrate as cpu
from morphgen.api import CompiledModel
from morphgen.backends.cuda import calibrate as gpu
from morphgen.calibrate import Calibration
from morphgen.data import load_dataset
from tests.e2e.support import example

SMALL = dict(rows=384, K=256, F=16, reps=1)


def small_crossover():
    ffi, lib = gpu.library()
    return gpu.crossover(ffi, lib, **SMALL)


def test_the_sweep_runs_and_its_figures_agree():
    rho, sparse, dense = small_crossover()
    assert gpu.GRID_FLOOR <= rho <= 0.5          # clamped to calibrate.cu's grid
    assert dense > 0 and sparse == pytest.approx(rho * dense, rel=1e-9)


@functools.lru_cache(maxsize=None)
def emulated_library():
    """calibrate.cu built for the SIMT emulation, whatever this machine has."""
    import cffi
    from morphgen.backends import REGISTRY
    ffi = cffi.FFI()
    ffi.cdef(gpu.CDEF)
    source = (Path(gpu.__file__).parent / "calibrate.cu").read_text()
    path = gpu.toolchain.build({"calibrate.cu": source}, "mg_cuda_calibrate", REGISTRY["cuda"].compiler, emulation=True)
    return ffi, ffi.dlopen(str(path))


@pytest.fixture
def gpu_here(monkeypatch, tmp_path):
    """As on a machine with a GPU: the emulated library stands for the GPU's, the small shape for
    the benchmark's; the cache file is the test's own."""
    monkeypatch.setattr(gpu, "library", emulated_library)
    monkeypatch.setattr(gpu, "gpu_present", lambda: True)
    monkeypatch.setattr(gpu.toolchain, "emulated", lambda: False)
    monkeypatch.setattr(gpu, "_crossover", lambda ffi, lib: gpu.crossover(ffi, lib, **SMALL))
    monkeypatch.setattr(cpu, "_cache_file", lambda: tmp_path / "calibration.json")
    monkeypatch.delenv("MORPHGEN_TAU", raising=False)


def test_measured_once_per_gpu_then_read_from_the_cache(gpu_here, monkeypatch):
    first = gpu.calibrate()
    assert first.source == "morphgen SIMT emulation (sm_80), measured"
    assert first.tau == pytest.approx(1 - first.rho)
    monkeypatch.setattr(gpu, "_crossover", lambda ffi, lib: pytest.fail("measured again despite the cache"))
    again = gpu.calibrate()
    assert again.source == "morphgen SIMT emulation (sm_80), cache"
    assert (again.rho, again.dense_gflops) == (first.rho, first.dense_gflops)


def test_a_failed_gpu_calibration_falls_back_to_the_cpus_and_says_why(gpu_here, monkeypatch):
    def broken(ffi, lib):
        raise gpu.CalibrationError("the GPU calibration failed: CUDA error in calibration events")
    monkeypatch.setattr(gpu, "_crossover", broken)
    monkeypatch.setattr(cpu, "calibrate", lambda threads=None, force=False: Calibration(
        0.25, 0.75, 1.0, 1.0, 1.0, 2, "cache"))      # this CPU's, without measuring it in the test's cache
    cal = gpu.calibrate()
    assert cal.tau == 0.75 and cal.source.startswith("cache, ")
    assert cal.source.endswith("the host CPU's: the GPU calibration failed: CUDA error in calibration events")


def test_without_a_gpu_the_host_cpus_calibration_stands_in_and_says_so(monkeypatch):
    monkeypatch.setattr(gpu, "gpu_present", lambda: False)
    monkeypatch.setattr(gpu.toolchain, "emulated", lambda: False)
    monkeypatch.delenv("MORPHGEN_TAU", raising=False)
    cal = gpu.calibrate()
    assert cal.tau == cpu.calibrate().tau
    assert cal.source.endswith("the host CPU's: no GPU here to measure the GPU's")


def bag_of_words(sparsity: float):
    return load_dataset(f"synthetic:nodes=200,edges=800,features=400,classes=3,sparsity={sparsity},val=20,test=20,seed=0")


@pytest.mark.parametrize("gpu_rho, path", [(0.2, "sparse"), (0.002, "dense")])
def test_the_cuda_backend_takes_the_gpus_threshold(monkeypatch, gpu_rho, path):
    """97% sparse features: sparse where the GPU's crossover says so, dense where it does not,
    whatever the CPU's threshold (pinned at the opposite choice)."""
    cpu_tau = 0.999 if path == "sparse" else 0.5
    monkeypatch.setattr(cpu, "calibrate", lambda threads=None, force=False: Calibration(
        1 - cpu_tau, cpu_tau, 1.0, 1.0, 1.0, 2, "cache"))
    monkeypatch.setattr(gpu, "calibrate", lambda threads=None: Calibration(
        gpu_rho, 1 - gpu_rho, 1.0, 1.0, float("nan"), 0, "NVIDIA H100 80GB HBM3 (sm_90), cache"))
    model = CompiledModel(example("gcn"), backend="cuda")
    model.lower_for(bag_of_words(0.97))
    chosen, sparsity, tau, source = model.feature_path
    assert chosen == path and tau == pytest.approx(1 - gpu_rho)
    assert "NVIDIA H100" in source
    openmp = CompiledModel(example("gcn"), backend="openmp")
    openmp.lower_for(bag_of_words(0.97))
    assert openmp.feature_path[0] != path and openmp.feature_path[2] == cpu_tau
