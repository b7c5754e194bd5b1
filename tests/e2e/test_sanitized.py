"""The small-graph fixtures also pass on an -fsanitize=address,undefined build.

The sanitized libraries are loaded in a subprocess that preloads the ASan runtime (Python
itself is not instrumented); any sanitizer report, or a mismatch with the interpreter, fails.
"""
import os
import subprocess
import sys

import pytest

from morphgen import toolchain
from tests.e2e import sanitized_worker
from tests.e2e.support import EXAMPLES, REPO


def _run_worker(*args):
    env = dict(os.environ, LD_PRELOAD=str(toolchain.asan_runtime_path()),
               ASAN_OPTIONS="detect_leaks=0:halt_on_error=1",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1", OMP_NUM_THREADS="2")
    return subprocess.run([sys.executable, "-m", "tests.e2e.sanitized_worker", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


def test_fixtures_pass_under_sanitizers():
    """Every fixture agrees with the interpreter without a sanitizer report; then the same
    set-up with a corrupted graph layout is reported (so the check can fail).  One test, so
    that the slow sanitized builds happen once, here, rather than in two workers at once."""
    for name in sanitized_worker.FIXTURES:      # build outside the preloaded subprocess
        sanitized_worker.fixture(name)
    proc = _run_worker("check")
    report = proc.stdout[-3000:] + proc.stderr[-5000:]
    assert proc.returncode == 0, report
    assert "runtime error" not in proc.stderr and "AddressSanitizer" not in proc.stderr, report
    assert "0 problem(s)" in proc.stdout and "rgcn_featureless" in proc.stdout, report

    proc = _run_worker("out-of-bounds")
    assert proc.returncode != 0, proc.stdout + proc.stderr[-3000:]
    assert "AddressSanitizer" in proc.stderr, proc.stderr[-3000:]


def test_train_with_sanitize_restarts_under_the_sanitizer_and_trains():
    """`morphgen train --sanitize` builds the instrumented library and preloads its runtime itself."""
    from tests.e2e.support import example, run_cli
    proc = run_cli("train", example("gcn"), "--dataset",
                   "synthetic:nodes=150,edges=700,features=12,classes=3,train_per_class=10,val=20,test=30,seed=2",
                   "--epochs", "2", "--threads", "2", "--quiet", "--sanitize")
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-3000:]
    assert "restarting with the sanitizer runtime preloaded" in proc.stderr
    assert "ERROR: AddressSanitizer" not in text and "runtime error" not in text
    assert "final:" in text


def _example_dataset(name, tmp_path):
    from morphgen.data import save_npz
    from tests.e2e.support import RELATIONAL_EXAMPLES, typed_dataset, write_link_npz
    if name == "rgcn_link":
        return write_link_npz(tmp_path / "kg.npz")
    if name in RELATIONAL_EXAMPLES:
        return save_npz(typed_dataset(features=7), tmp_path / "typed.npz")
    weighted = ",weighted=1" if name == "gcn_weighted" else ""
    return f"synthetic:nodes=150,edges=700,features=12,classes=3,train_per_class=10,val=20,test=30,seed=2{weighted}"


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("*.mp")))
def test_every_example_trains_under_the_sanitizers(name, tmp_path):
    """Every example, built with ASan + UBSan, trains an epoch on both feature paths' worth of
    kernels (dense synthetic features) without a report."""
    from tests.e2e.support import example, run_cli
    proc = run_cli("train", example(name), "--dataset", _example_dataset(name, tmp_path), "--epochs", "2",
                   "--threads", "2", "--quiet", "--sanitize")
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    assert "AddressSanitizer" not in text and "runtime error" not in text, text[-4000:]
