"""Which GPU a CUDA run takes, and the refusal, before anything is built or allocated, of a run
whose buffers cannot fit in that GPU's free memory."""
import os

import pytest

from morphgen import resources
from morphgen.errors import UserError
from tests.e2e.support import assert_clean_failure, example, run_cli, small_dataset


def _fake_smi(tmp_path, monkeypatch, script: str):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + script + "\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.parametrize("script,free", [('echo "1234"', 1234 << 20), ('echo "[N/A]"', None), ("exit 9", None)])
def test_free_gpu_memory_is_read_from_nvidia_smi(tmp_path, monkeypatch, script, free):
    _fake_smi(tmp_path, monkeypatch, script)
    assert resources.gpu_free_memory(0) == free


def test_a_run_larger_than_the_gpus_free_memory_is_refused(monkeypatch):
    import morphgen
    from morphgen import pipeline
    monkeypatch.setattr(resources, "gpu_free_memory", lambda device: 4096 if device == 1 else None)
    monkeypatch.setattr(resources, "available_memory", lambda: 1 << 40)
    model = morphgen.compile(example("gcn"), threads=1)
    data = small_dataset()
    model.lower_for(data)
    with pytest.raises(UserError, match=r"needs about .* of GPU memory \(.*\), but GPU 1 has only 0\.0 MiB free"):
        pipeline.check_run_fits(model.program, data, "dense", gpu=1)
    pipeline.check_run_fits(model.program, data, "dense", gpu=0)       # nothing known: not refused


def test_the_gpu_follows_the_device_variable(monkeypatch):
    from morphgen.backends.cuda.toolchain import device_index
    monkeypatch.delenv("MORPHGEN_CUDA_EMULATION", raising=False)
    monkeypatch.setenv("MORPHGEN_CUDA_DEVICE", "3")
    assert device_index() == 3
    monkeypatch.delenv("MORPHGEN_CUDA_DEVICE")
    assert device_index() == 0
    monkeypatch.setenv("MORPHGEN_CUDA_EMULATION", "1")
    assert device_index() is None                    # the emulation's buffers are host memory


def test_a_device_variable_that_is_not_a_number_is_refused(tmp_path):
    proc = run_cli("train", example("gcn"), "--backend", "cuda", "--dataset", "synthetic", "--epochs", 1,
                   env={"MORPHGEN_CUDA_EMULATION": "1", "MORPHGEN_CUDA_DEVICE": "first"})
    assert_clean_failure(proc, 2, "$MORPHGEN_CUDA_DEVICE must be a GPU number, not 'first'")
    assert "prepare:" not in proc.stderr             # refused before the library is built and loaded
