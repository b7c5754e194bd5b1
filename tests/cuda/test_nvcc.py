"""Examples build with nvcc: the kernel sources that the SIMT emulation runs in the other tests
are valid CUDA.  These builds are for sm_90 alone (half the ptxas time); test_report.py builds for
both targets, sm_80 and sm_90.  These examples (rgcn_link for the
link-prediction kernels), the extra-ops program and the featureless rgcn_bases and rgcn below (the
basis lookups, the row-wise Adam) instantiate every kernel of ops.cuh between them
(`MORPHGEN_NVCC_ALL=1` builds every example)."""
import os
from pathlib import Path

import pytest

from morphgen.library import load
from tests.backend.test_math_parity import SOURCE as MATH_SOURCE
from tests.cuda.conftest import require_nvcc
from tests.e2e.support import example, run_cli

@pytest.fixture(autouse=True)
def one_architecture(monkeypatch):
    monkeypatch.setenv("MORPHGEN_CUDA_ARCHS", "90")


ALL = ["gcn", "gcn3", "sage", "gin", "gat", "appnp", "rgcn", "rgcn_bases", "rgat", "hgt", "rgcn_link"]
EXAMPLES = ALL if os.environ.get("MORPHGEN_NVCC_ALL") else ["gcn", "gat", "rgat", "hgt", "rgcn_link"]


@pytest.mark.parametrize("model", EXAMPLES)
def test_every_example_builds_with_nvcc(tmp_path, model):
    require_nvcc()
    proc = run_cli("compile", example(model), "--backend", "cuda", "-o", tmp_path, timeout=900,
                   env={"MORPHGEN_CUDA_EMULATION": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    built = list(tmp_path.glob("*.so"))
    assert len(built) == 1 and built[0].stat().st_size > 0
    assert load(str(built[0]), "cuda") is not None     # loads (no GPU call yet) and says who built it


# Row softmax, the math functions, concat and its backward's slices, layer and batch norm, the
# mean over heads: no example of the four uses them.
EXTRA_OPS = MATH_SOURCE.replace(
    "v.out = Sum(e in v.incoming_edges(): e.src.s * W2) + v.s * W2;",
    "v.out = Sum(e in v.incoming_edges(): e.src.s * W2) + layer_norm(relu(concat(v.s, v.h))) * W3"
    " + batch_norm(mean_heads(concat(v.s, v.h), heads = 2)) * W2;").replace(
    "weight<float[6]> b1 = glorot;", "weight<float[6]> b1 = glorot;\n    weight<float[12][C]> W3 = glorot;")


def test_the_ops_no_example_uses_build_with_nvcc(tmp_path):
    require_nvcc()
    program = tmp_path / "maths.mp"
    program.write_text(EXTRA_OPS)
    assert "concat(" in EXTRA_OPS and "W3" in EXTRA_OPS
    proc = run_cli("compile", program, "--backend", "cuda", "-o", tmp_path / "out", timeout=900,
                   env={"MORPHGEN_CUDA_EMULATION": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    source = (tmp_path / "out" / "model.cu").read_text()
    for call in ("mg::row_softmax_fwd", "mg::math_fwd", "mg::concat_fwd", "mg::op::slice", "mg::layer_standardize_bwd",
                 "mg::batch_standardize_bwd", "mg::head_sum", "mg::head_repeat"):
        assert call in source, call


FEATURELESS_CALLS = {
    # the lookups read the bases (passes/basis_lookup.py)
    "rgcn_bases": ("mg::op::basis_lookup(", "mg::op::basis_lookup_coef_grad(", "mg::op::basis_lookup_bases_grad("),
    # per-relation tables: only the looked-up rows get a gradient, and Adam steps by rows
    "rgcn": ("mg::op::embedding_rows(", "mg::op::embedding_rows_grad_rows(", "mg::op::adam_rows("),
}


@pytest.mark.parametrize("model", sorted(FEATURELESS_CALLS))
def test_featureless_lookups_build_with_nvcc(monkeypatch, model):
    """`morphgen compile` knows no dataset, so it builds these programs for dense features; the
    featureless lowering, as `morphgen train` builds it for aifb, is built here."""
    require_nvcc()
    monkeypatch.setenv("MORPHGEN_CUDA_EMULATION", "")
    from morphgen.backends import require
    from morphgen.pipeline import lower
    cuda = require("cuda")
    program = lower(example(model), {"F": 64, "C": 3, "N": 64, "etypes": 3, "ntypes": 1}, featureless=True,
                    bases_per_lookup=cuda.capabilities.bases_per_lookup)
    sources = cuda.emitter_class()(program).emit()
    text = "".join(sources.values())
    for call in FEATURELESS_CALLS[model]:
        assert call in text, call
    assert load(str(cuda.build(sources)), "cuda") is not None


def test_typed_linears_of_gathered_rows_build_with_nvcc(monkeypatch):
    """`morphgen compile` knows no graph, so it gathers the rows of HGT's typed linears first; the
    lowering `morphgen train` builds, which reads them in place (passes/edge_typed_linear.py), is
    built here."""
    require_nvcc()
    monkeypatch.setenv("MORPHGEN_CUDA_EMULATION", "")
    from morphgen.backends import require
    from morphgen.pipeline import lower
    cuda = require("cuda")
    program = lower(example("hgt"), {"F": 64, "C": 3, "N": 64, "etypes": 3, "ntypes": 2}, edge_typed_layout="compact")
    sources = cuda.emitter_class()(program).emit()
    text = "".join(sources.values())
    for call in ("mg::op::edge_typed_linear(", "mg::op::edge_typed_linear_input_grad(",
                 "mg::op::edge_typed_linear_weight_grad("):
        assert call in text, call
    assert load(str(cuda.build(sources)), "cuda") is not None


def test_the_gpu_calibration_builds_with_nvcc():
    """calibrate.cu, which sets a CUDA model's feature path on a GPU, is valid CUDA too."""
    from morphgen.backends.cuda import calibrate, toolchain
    nvcc = require_nvcc()
    source = (Path(calibrate.__file__).parent / "calibrate.cu").read_text()
    built = toolchain.build({"calibrate.cu": source}, "mg_cuda_calibrate", nvcc, emulation=False)
    assert built.stat().st_size > 0
