"""The CUDA tests run on a GPU when this machine has one, else through the SIMT emulation
(backends/cuda/simt.h): the same kernel sources, run on the CPU."""
import shutil
import subprocess

import pytest


def gpu_present() -> bool:
    smi = shutil.which("nvidia-smi")
    return bool(smi) and subprocess.run([smi, "-L"], capture_output=True).returncode == 0


@pytest.fixture(autouse=True)
def cuda_target(monkeypatch):
    """MORPHGEN_CUDA_EMULATION=1 unless a GPU is here (then the real device, as users run it)."""
    if not gpu_present():
        monkeypatch.setenv("MORPHGEN_CUDA_EMULATION", "1")
    yield
