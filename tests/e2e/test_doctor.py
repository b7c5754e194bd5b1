"""`morphgen doctor`: a diagnosis of this machine that always exits 0."""
from pathlib import Path

from morphgen import backends

from tests.e2e.support import run_cli


def test_doctor_names_every_backend_and_the_vector_units():
    proc = run_cli("doctor")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for name in backends.names():
        assert any(line.split()[:1] == [name] for line in lines), f"{name} missing:\n{proc.stdout}"
    flags = next((ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("flags")), "")
    expected = "AVX-512: yes" if "avx512f" in flags.split() else "AVX-512: no"
    assert expected in proc.stdout, proc.stdout


def test_doctor_says_why_a_backend_is_missing_and_still_exits_0(tmp_path):
    proc = run_cli("doctor", env={"MORPHGEN_MPICXX": str(tmp_path / "mpicxx"), "PATH": "/usr/bin:/bin",
                                  "MORPHGEN_CUDA_EMULATION": "0", "MORPHGEN_NVCC": str(tmp_path / "nvcc")})
    assert proc.returncode == 0, proc.stderr
    assert "mpi      not available: its compiler" in proc.stdout, proc.stdout
    assert "cuda     not available: its compiler" in proc.stdout, proc.stdout
