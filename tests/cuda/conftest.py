"""The CUDA tests run on a GPU when this machine has one, else through the SIMT emulation
(backends/cuda/simt.h): the same kernel sources, run on the CPU."""
import shutil
import subprocess

import pytest


def gpu_present() -> bool:
    smi = shutil.which("nvidia-smi")
    return bool(smi) and subprocess.run([smi, "-L"], capture_output=True).returncode == 0


def require_nvcc() -> str:
    """The CUDA compiler the build tests use: every kernel must compile with nvcc in `make test`,
    so a machine without it (or without cuBLAS) fails these tests saying why; they never skip."""
    from morphgen.backends import REGISTRY
    from morphgen.backends.cuda.toolchain import nvcc_missing
    nvcc = REGISTRY["cuda"].compiler
    problem = nvcc_missing(nvcc)
    if problem is not None:
        pytest.fail(f"the CUDA build tests need nvcc and cuBLAS: {problem}")
    return shutil.which(nvcc)


@pytest.fixture(autouse=True)
def cuda_target(monkeypatch):
    """MORPHGEN_CUDA_EMULATION=1 unless a GPU is here (then the real device, as users run it)."""
    if not gpu_present():
        monkeypatch.setenv("MORPHGEN_CUDA_EMULATION", "1")
    yield
