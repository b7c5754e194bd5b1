"""Random well-typed programs (tests/fuzz/generator.py) and the math test program trained by the
CUDA backend and by the numpy interpreter (tests/fuzz/differential.py with backend="cuda"):
every epoch's loss and every weight gradient, with the passes on and off, dense, sparse and
featureless inputs.  `MORPHGEN_CUDA_FUZZ_PROGRAMS` sets how many generated programs run."""
import os

import pytest

from tests.backend.test_math_parity import SOURCE as MATH_SOURCE
from tests.fuzz.differential import check, variants_for
from tests.fuzz.generator import FuzzProgram, generate

PROGRAMS = int(os.environ.get("MORPHGEN_CUDA_FUZZ_PROGRAMS", "10"))


@pytest.mark.parametrize("seed", range(PROGRAMS))
def test_generated_program_matches_interpreter_on_cuda(seed):
    fp = generate(seed)
    for variant in variants_for(fp):
        check(fp, variant, backend="cuda")


@pytest.mark.parametrize("variant", ["plain", "passes", "sparse"])
def test_math_functions_match_interpreter_on_cuda(variant):
    check(FuzzProgram(seed=3, source=MATH_SOURCE, style="explicit", typed=False), variant, backend="cuda")


def test_concat_and_its_slices_match_interpreter_on_cuda():
    """A concat that stays materialised (an activation reads it) and the slices of its backward."""
    from tests.cuda.test_nvcc import EXTRA_OPS
    check(FuzzProgram(seed=5, source=EXTRA_OPS, style="explicit", typed=False), "passes", backend="cuda")
