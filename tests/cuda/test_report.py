"""`morphgen compile --backend cuda --emit report`: ptxas' registers, spills and shared memory per
kernel, read from the nvcc build log (backends/cuda/report.py)."""

import re

import pytest

from morphgen.backends.cuda import report
from tests.cuda.conftest import require_nvcc
from tests.e2e.support import assert_clean_failure, example, run_cli

# ptxas -v as nvcc 13 writes it (trimmed): a kernel that spills, a callee whose stack frame must
# not be taken for its caller's, a templated kernel on two architectures.
CANNED_LOG = """\
$ nvcc -Xptxas=-v model.cu -o libmg_cuda.so
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN2mg4cuda16aggregate_kernelILi4EEEvPKfPfi' for 'sm_80'
ptxas info    : Function properties for _ZN2mg4cuda6helperEv
    24 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Function properties for _ZN2mg4cuda16aggregate_kernelILi4EEEvPKfPfi
    16 bytes stack frame, 12 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 2176 bytes smem, 416 bytes cmem[0]
ptxas info    : Compile time = 25.386 ms
ptxas info    : Compiling entry function '_ZN2mg4cuda17typed_gemm_kernelILi16EEEvPKfPf' for 'sm_90'
ptxas info    : Function properties for _ZN2mg4cuda17typed_gemm_kernelILi16EEEvPKfPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 2176 bytes smem
ptxas info    : Compiling entry function '_ZN2mg4cuda10map_kernelINS0_6AdamOpEEEvlT_' for 'sm_90'
ptxas info    : Function properties for _ZN2mg4cuda10map_kernelINS0_6AdamOpEEEvlT_
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers, 424 bytes cmem[0]
"""

SOURCE = """\
template <int TILE>
__global__ void __launch_bounds__(TILE *TILE) typed_gemm_kernel(const float *A, float *C) {}
template <int WARPS>
__global__ void __launch_bounds__(kBlock, 2) aggregate_kernel(const float *X, float *Y, int n) {}
constexpr int kBlock = 128;
"""


def test_the_parser_reads_registers_spills_and_shared_memory():
    agg, gemm, adam = report.parse_log(CANNED_LOG)
    assert (agg.arch, agg.registers, agg.smem) == ("sm_80", 255, 2176)
    assert (agg.stack, agg.spill_stores, agg.spill_loads) == (16, 12, 8)    # its own frame, not helper's
    assert (gemm.arch, gemm.registers, gemm.smem, gemm.spill_stores) == ("sm_90", 32, 2176, 0)
    assert (adam.registers, adam.smem) == (40, 0)                           # no smem field: none used


def test_names_are_demangled_and_shortened():
    assert report.short_name("void mg::cuda::map_kernel<mg::cuda::AdamOp>(long, mg::cuda::AdamOp)") \
        == "map_kernel<AdamOp>"
    assert report.short_name("mg::cuda::row_total_kernel(float const*, float*, long, long)") == "row_total_kernel"
    if report.shutil.which("c++filt"):
        name = "_ZN2mg4cuda10map_kernelINS0_6AdamOpEEEvlT_"
        assert report.short_name(report.demangle([name])[name]) == "map_kernel<AdamOp>"


def test_block_sizes_come_from_launch_bounds():
    bounds = report.LaunchBounds([SOURCE])
    assert bounds.block_size("typed_gemm_kernel<16>") == 256      # TILE * TILE, TILE = 16
    assert bounds.block_size("aggregate_kernel<4>") == 128        # a constant; min blocks ignored
    assert bounds.block_size("map_kernel<AdamOp>") is None        # no bounds: the table assumes 256


def test_occupancy_follows_the_per_sm_limits():
    # 32 registers: 8 blocks of 256 threads fill the SM's 2048 threads
    assert report.occupancy(32, 0, 256, "sm_80") == (1.0, "threads")
    # 48 registers -> 1536 per warp: 42 warps fit, 5 blocks of 8 warps = 40 of 64
    assert report.occupancy(48, 0, 256, "sm_90") == (40 / 64, "registers")
    # 255 registers -> 8192 per warp: one block of 8 warps
    assert report.occupancy(255, 0, 256, "sm_80") == (8 / 64, "registers")
    # 40 KiB of shared memory (+1 KiB reserved): 4 blocks on sm_80's 164 KiB, 5 on sm_90's 228 KiB
    assert report.occupancy(16, 40 * 1024, 256, "sm_80") == (32 / 64, "shared memory")
    assert report.occupancy(16, 40 * 1024, 256, "sm_90") == (40 / 64, "shared memory")
    assert report.occupancy(16, 0, 32, "sm_80") == (32 / 64, "blocks")   # 32 blocks of one warp
    assert report.occupancy(32, 0, 256, "sm_75") is None


def test_spills_are_listed_in_the_summary():
    text = report.render(report.parse_log(CANNED_LOG), report.LaunchBounds([SOURCE]))
    last = text.splitlines()[-1]
    assert last.startswith("3 kernels on sm_80, sm_90; register spills: aggregate_kernel<4> on sm_80")
    assert "256*" in text and "no __launch_bounds__" in text                  # map_kernel's assumed block


def test_report_on_gcn(tmp_path):
    require_nvcc()         # --emit report builds with nvcc
    # conftest sets MORPHGEN_CUDA_EMULATION=1 without a GPU: the report still builds with nvcc
    proc = run_cli("compile", example("gcn"), "--backend", "cuda", "--emit", "report", "-o", tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # a row: kernel name (template arguments may hold spaces), architecture, registers, ...
    rows = [re.match(r"(\S.*?)\s+(sm_\d+)\s+(\d+)\s", line) for line in proc.stdout.splitlines()]
    aggregation = {r[2]: int(r[3]) for r in rows if r and r[1].startswith("aggregate_kernel<")}
    from morphgen.backends.cuda.toolchain import architectures
    assert set(aggregation) == {f"sm_{a}" for a in architectures()} and min(aggregation.values()) > 0, proc.stdout
    assert proc.stdout.splitlines()[-1].endswith("no register spills"), proc.stdout
    header, table = (tmp_path / "report.txt").read_text().split("\n", 1)
    assert header.startswith("# morphgen compile --emit report of ") and table == proc.stdout   # the mark: ours to replace


def test_report_is_for_the_cuda_backend():
    proc = run_cli("compile", example("gcn"), "--backend", "openmp", "--emit", "report")
    assert_clean_failure(proc, 2, "--emit report reads ptxas' register and shared-memory use: "
                                  "it is for --backend cuda")


def test_report_names_a_missing_nvcc_even_under_emulation(tmp_path):
    proc = run_cli("compile", example("gcn"), "--backend", "cuda", "--emit", "report",
                   env={"MORPHGEN_NVCC": str(tmp_path / "nvcc"), "MORPHGEN_CUDA_EMULATION": "1"})
    assert_clean_failure(proc, 2, "--emit report builds with nvcc", "is not on PATH", "MORPHGEN_NVCC")


def test_the_architectures_follow_the_environment(monkeypatch):
    from morphgen.backends.cuda import toolchain
    from morphgen.errors import UserError
    monkeypatch.delenv(toolchain.ARCHITECTURES_ENV, raising=False)
    assert toolchain.architectures() == ("80", "90")
    monkeypatch.setenv(toolchain.ARCHITECTURES_ENV, "sm_90")
    assert [f for f in toolchain.nvcc_flags() if f.startswith("-gencode")] == ["-gencode=arch=compute_90,code=sm_90"]
    monkeypatch.setenv(toolchain.ARCHITECTURES_ENV, "80, 90")
    assert toolchain.architectures() == ("80", "90")
    monkeypatch.setenv(toolchain.ARCHITECTURES_ENV, "hopper")
    with pytest.raises(UserError, match="MORPHGEN_CUDA_ARCHS.*'hopper'"):
        toolchain.architectures()
