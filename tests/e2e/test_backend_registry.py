"""The backend registry: one table read by the command line, the API and the library loader."""
import pytest

import morphgen
from morphgen import backends
from morphgen.errors import InternalError
from morphgen.library import load

from tests.e2e.support import assert_clean_failure, example, run_cli, small_dataset


def test_every_backend_is_in_the_help_with_its_state():
    proc = run_cli("train", "--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    for name in backends.names():
        assert name in text
    assert "cuda (one NVIDIA GPU" in text


def test_an_unknown_backend_lists_the_known_ones():
    with pytest.raises(backends.BackendUnavailable, match="unknown backend 'tpu'; backends: openmp, cuda, mpi"):
        morphgen.compile(example("gcn"), backend="tpu")


def test_a_missing_compiler_is_named_with_the_variable_that_overrides_it(monkeypatch):
    monkeypatch.setenv("MORPHGEN_CXX", "no-such-compiler-here")
    with pytest.raises(backends.BackendUnavailable, match="'no-such-compiler-here' is not on PATH.*MORPHGEN_CXX"):
        morphgen.compile(example("gcn"), backend="openmp")


def test_a_missing_compiler_from_the_command_line(tmp_path):
    proc = run_cli("compile", example("gcn"), env={"MORPHGEN_CXX": str(tmp_path / "nothing")})
    assert_clean_failure(proc, 2, "is not on PATH", "MORPHGEN_CXX")


def test_capabilities_decide_the_pipeline():
    openmp = backends.require("openmp")
    assert openmp.capabilities.sparse_features and openmp.capabilities.hoist_invariants
    assert backends.REGISTRY["mpi"].capabilities.distributed
    assert backends.REGISTRY["cuda"].capabilities.device_memory


def test_the_library_says_which_backend_built_it():
    model = morphgen.compile(example("gcn"), threads=1).build(small_dataset())
    assert load(str(model.library_path), "openmp") is not None
    with pytest.raises(InternalError, match="built by the openmp backend, not by cuda"):
        load(str(model.library_path), "cuda")


def test_a_missing_nvcc_is_named(tmp_path):
    proc = run_cli("compile", example("gcn"), "--backend", "cuda", env={"MORPHGEN_NVCC": str(tmp_path / "nothing")})
    assert_clean_failure(proc, 2, "is not on PATH", "MORPHGEN_NVCC")


def test_a_missing_mpi_compiler_is_named(tmp_path):
    proc = run_cli("compile", example("gcn"), "--backend", "mpi", env={"MORPHGEN_MPICXX": str(tmp_path / "nothing")})
    assert_clean_failure(proc, 2, "is not on PATH", "MORPHGEN_MPICXX")


def test_a_library_of_one_process_refuses_a_partition():
    """Every library exports the whole ABI; the parts another backend needs fail with a reason."""
    from morphgen.library import RuntimeFailure
    model = morphgen.compile(example("gcn"), threads=1)
    model.bind(small_dataset())
    with pytest.raises(RuntimeFailure, match="built by the openmp backend, which does not split the graph"):
        model.session._bind_partition({"comm": 0, "num_owned": 1, "global_nodes": 1, "peers": [],
                                       "send_ptr": [0], "send_idx": [], "recv_ptr": [0], "node_gid": [0],
                                       "edge_gid": [], "in_degree": [0], "out_degree": [0]})
