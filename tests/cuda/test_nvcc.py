"""Every example builds with nvcc for the GPUs morphgen targets (sm_80, sm_90): the kernel sources
that the SIMT emulation runs in the other tests are valid CUDA, every template instance included."""
import os
import shutil

import pytest

from morphgen.library import load
from tests.e2e.support import example, run_cli

EXAMPLES = ["gcn", "gcn3", "sage", "gin", "gat", "appnp", "rgcn", "rgat", "hgt"]
NVCC = os.environ.get("MORPHGEN_NVCC", "nvcc")


@pytest.mark.skipif(shutil.which(NVCC) is None, reason=f"no CUDA compiler ({NVCC}) on this machine")
@pytest.mark.parametrize("model", EXAMPLES)
def test_every_example_builds_with_nvcc(tmp_path, model):
    proc = run_cli("compile", example(model), "--backend", "cuda", "-o", tmp_path, timeout=900,
                   env={"MORPHGEN_CUDA_EMULATION": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    built = list(tmp_path.glob("*.so"))
    assert len(built) == 1 and built[0].stat().st_size > 0
    assert load(str(built[0]), "cuda") is not None     # loads (no GPU call yet) and says who built it
