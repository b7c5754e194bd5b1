"""The SIMT emulation (backends/cuda/simt.h): CUDA kernels built by g++ run on the CPU.

The kernels are real CUDA programs (tests/cuda/simt_cases/*.cu, which nvcc compiles too); each
is built once per test run with g++ against device.cuh + simt.h and run as a subprocess, and its
output is compared with a numpy reference.  Shared-memory reductions, warp shuffles and votes,
atomics from blocks on several OS threads, planted races that the schedule shuffling must catch,
a divergent-barrier deadlock that must abort, launch-configuration errors, the runtime API, and
two translation units linked together.
"""
import fcntl
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from tests.cuda.conftest import require_nvcc

ROOT = Path(__file__).resolve().parents[2]
CUDA_DIR = ROOT / "backends" / "cuda"
CASES = Path(__file__).resolve().parent / "simt_cases"
CASE_FILES = sorted(p.name for p in CASES.glob("*.cu"))

CXXFLAGS = ["-std=c++17", "-O2", "-fopenmp", "-Wall", "-Wextra", "-Werror"]
JOBS = max(1, min(4, os.cpu_count() or 1))

# name -> (sources, extra flags)
TARGETS = {
    "reduce": (["reduce.cu"], []),
    "warp": (["warp.cu"], []),
    "atomics": (["atomics.cu"], []),
    "runtime": (["runtime.cu"], []),
    "link": (["link_a.cu", "link_b.cu"], []),
    "warp_ucontext": (["warp.cu"], ["-DMORPHGEN_SIMT_UCONTEXT"]),
    # As `morphgen ... --sanitize` builds the emulation: the fiber switches are annotated for ASan.
    "warp_asan": (["warp.cu"], ["-O0", "-fsanitize=address,undefined", "-fno-omit-frame-pointer"]),
}


def gxx_command(sources, out, flags=()):
    """The emulation build: g++ treats the .cu files as C++ and finds device.cuh and simt.h."""
    return ["g++", *CXXFLAGS, *flags, "-x", "c++", "-I", str(CUDA_DIR),
            *[str(CASES / s) for s in sources], "-o", str(out)]


def nvcc_command(nvcc, source):
    return [nvcc, "-std=c++17", "-c", "-o", os.devnull, "-x", "cu", "-I", str(CUDA_DIR),
            "-gencode", "arch=compute_80,code=sm_80", str(CASES / source)]


def _compile(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def _compile_once(cmd, stamp: Path):
    """_compile(cmd), done once per test run: xdist workers share `stamp` (the outcome), and the
    first to take its lock builds while the others wait for it."""
    with open(stamp.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists():
            outcome = json.loads(stamp.read_text())
            return outcome["rc"], outcome["log"]
        rc, log = _compile(cmd)
        stamp.write_text(json.dumps({"rc": rc, "log": log}))
        return rc, log


def _shared_dir(tmp_path_factory, name) -> Path:
    """A directory of this test run shared by its xdist workers (each has its own basetemp)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    directory = base / name
    directory.mkdir(exist_ok=True)
    return directory


class Builds:
    """All targets built concurrently, in the background; binary(name) waits for one."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.pool = ThreadPoolExecutor(max_workers=JOBS)
        self.futures = {}
        for name, (sources, flags) in TARGETS.items():
            cmd = gxx_command(sources, directory / name, flags)
            self.futures[name] = (cmd, self.pool.submit(_compile_once, cmd, directory / f"{name}.build"))

    def binary(self, name) -> Path:
        cmd, future = self.futures[name]
        rc, log = future.result()
        if rc != 0:
            pytest.fail(f"build failed: {' '.join(cmd)}\n{log}")
        return self.directory / name


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    b = Builds(_shared_dir(tmp_path_factory, "simt_build"))
    yield b
    b.pool.shutdown(wait=True)


def run(binary, *args, shuffle=None, env=None, check=True):
    environment = dict(os.environ)
    environment.pop("MORPHGEN_SIMT_SHUFFLE", None)
    environment["OMP_NUM_THREADS"] = "2"  # blocks on two OS threads, whatever the machine
    if shuffle is not None:
        environment["MORPHGEN_SIMT_SHUFFLE"] = str(shuffle)
    environment.update(env or {})
    proc = subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True,
                          env=environment, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"{binary.name} {' '.join(map(str, args))} exited {proc.returncode}\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


def threads_of(block: str) -> int:
    return int(np.prod([int(d) for d in block.split("x")]))


# ---------------------------------------------------------------------------------------------
# Block-wide reductions, planted races
# ---------------------------------------------------------------------------------------------

def _reduce(builds, tmp_path, kernel, block, x, seeds=None, shuffle=None):
    inp, out = tmp_path / "x.bin", tmp_path / f"{kernel}.out"
    x.astype(np.float32).tofile(inp)
    args = [kernel, block, inp, out] + ([",".join(map(str, seeds))] if seeds else [])
    run(builds.binary("reduce"), *args, shuffle=shuffle)
    result = np.fromfile(out, dtype=np.float32)
    return result.reshape(len(seeds), -1) if seeds else result[None, :]


def _block_sums(x, threads):
    padded = np.zeros(-(-len(x) // threads) * threads, dtype=np.float64)
    padded[: len(x)] = x
    return padded.reshape(-1, threads).sum(axis=1)


def _neighbor_diffs(x, threads):
    prev = np.concatenate([[0.0], x[:-1]])
    prev[np.arange(len(x)) % threads == 0] = 0.0
    return x - prev


@pytest.mark.parametrize("block", ["32", "96", "128", "256", "1000", "1024", "32x3", "16x4x2"])
def test_tree_reduction_normal_and_shuffled(builds, tmp_path, block):
    threads = threads_of(block)
    x = np.random.default_rng(threads).integers(-50, 50, size=3 * threads + threads // 3 + 1)
    got = _reduce(builds, tmp_path, "tree", block, x, seeds=[0, 1, 2, 3, 4])
    # Integer values: every summation order gives the exact sums.
    np.testing.assert_array_equal(got, np.broadcast_to(_block_sums(x, threads), got.shape))


def test_shuffle_seed_from_the_environment(builds, tmp_path):
    x = np.random.default_rng(1).integers(-50, 50, size=5000)
    for seed in (0, 11, 12):
        got = _reduce(builds, tmp_path, "tree", "96", x, shuffle=seed)[0]
        np.testing.assert_array_equal(got, _block_sums(x, 96))


def test_planted_race_in_tree_reduction_is_caught_by_shuffling(builds, tmp_path):
    x = np.random.default_rng(2).integers(1, 50, size=256 * 6)
    seeds = list(range(1, 9))
    expected = _block_sums(x, 256)
    right = _reduce(builds, tmp_path, "tree", "256", x, seeds=seeds)
    np.testing.assert_array_equal(right, np.broadcast_to(expected, right.shape))
    racy = _reduce(builds, tmp_path, "tree_racy", "256", x, seeds=seeds)
    wrong = [s for s, r in zip(seeds, racy) if not np.array_equal(r, expected)]
    assert wrong, "the missing __syncthreads went unnoticed under every shuffle seed"


def _cross_warp(x, threads):
    t = np.arange(len(x)) % threads
    return np.where(t >= 32, x[np.maximum(np.arange(len(x)) - 32, 0)], x)


# Races the normal schedule cannot see -- it runs threads in index order, so data written by a
# lower thread is there in time -- and shuffling must: reading the left neighbour's slot with no
# barrier at all, and reading another warp's slot after only __syncwarp.
@pytest.mark.parametrize("kernel,reference", [("neighbor", _neighbor_diffs), ("cross_warp", _cross_warp)])
def test_race_hidden_by_index_order_is_caught_by_shuffling(builds, tmp_path, kernel, reference):
    x = np.random.default_rng(3).integers(-50, 50, size=128 * 5).astype(np.float32)
    expected = reference(x.astype(np.float64), 128)
    normal = _reduce(builds, tmp_path, f"{kernel}_racy", "128", x)[0]
    np.testing.assert_array_equal(normal, expected)
    seeds = list(range(1, 9))
    racy = _reduce(builds, tmp_path, f"{kernel}_racy", "128", x, seeds=seeds)
    assert any(not np.array_equal(r, expected) for r in racy)
    right = _reduce(builds, tmp_path, kernel, "128", x, seeds=seeds)
    np.testing.assert_array_equal(right, np.broadcast_to(expected, right.shape))


# ---------------------------------------------------------------------------------------------
# Warp intrinsics
# ---------------------------------------------------------------------------------------------

def _warp_reference(x, threads):
    """Per thread, the 15 columns warp_ops writes (see warp.cu), lane by lane as PTX shfl."""
    rows = np.zeros((len(x), 15))
    for b in range(len(x) // threads):
        block = x[b * threads:(b + 1) * threads].astype(np.float64)
        positives = int((block > 0).sum())
        for w in range(0, threads, 32):
            v = block[w:w + 32]
            n = len(v)
            r = rows[b * threads + w: b * threads + w + n]

            s = v.copy()
            for o in (16, 8, 4, 2, 1):
                s = np.array([s[l] + s[l + o] if l + o < n else s[l] for l in range(n)])
            r[:, 0] = s
            s = v.copy()
            for o in (16, 8, 4, 2, 1):
                s = np.array([s[l] + s[l ^ o] if (l ^ o) < n else s[l] for l in range(n)])
            r[:, 1] = s
            r[:, 2] = sum(1 << l for l in range(n) if v[l] > 0)
            r[:, 3] = int((v > 5).any()) | (int((v > -100).all()) << 1) | (int((v > 0).all()) << 2)
            r[:, 4] = [v[l & ~7: l + 1].sum() for l in range(n)]
            r[:, 5] = [v[(l & ~15) + 3] if (l & ~15) + 3 < n else v[l] for l in range(n)]
            nxt = v[(np.arange(n) + 1) % n]
            r[:, 6] = nxt * 0.5
            r[:, 7] = nxt
            r[:, 8] = nxt - 7
            r[:, 9] = nxt + 1000
            r[:, 10] = [v[l ^ 1] if (l ^ 1) < n else v[l] for l in range(n)]
            r[:, 11] = positives

            def pick(j, hi, l):
                return v[j] if j <= hi and j < n else v[l]

            r[:, 12] = [pick(l ^ 8, (l & ~7) | 7, l) for l in range(n)]
            r[:, 13] = [pick(l + 4, (l & ~15) | 15, l) for l in range(n)]
            r[:, 14] = (1 << n) - 1
    return rows


def _warp_ops(binary, tmp_path, block, blocks=3, seed=0, **kw):
    threads = threads_of(block)
    x = np.random.default_rng(threads + seed).integers(-9, 10, size=blocks * threads).astype(np.float32)
    inp, out = tmp_path / "w.bin", tmp_path / "w.out"
    x.tofile(inp)
    run(binary, "ops", block, inp, out, **kw)
    got = np.fromfile(out, dtype=np.float64).reshape(len(x), 15)
    return got, _warp_reference(x, threads)


# 100 and 1000 threads end with partial warps (4 and 8 lanes); 10x7 and 8x4x2 are 2-D and 3-D
# blocks, whose warps are runs of 32 linear thread ids.
@pytest.mark.parametrize("block", ["32", "64", "100", "1000", "10x7", "8x4x2"])
def test_warp_shuffles_votes_and_syncwarp(builds, tmp_path, block):
    got, want = _warp_ops(builds.binary("warp"), tmp_path, block)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("seed", [3, 4])
def test_warp_intrinsics_under_shuffled_schedules(builds, tmp_path, seed):
    got, want = _warp_ops(builds.binary("warp"), tmp_path, "100", seed=seed, shuffle=seed)
    np.testing.assert_array_equal(got, want)


def test_ucontext_fallback_and_stack_size(builds, tmp_path):
    # The portable context switch (swapcontext) instead of the x86-64 one, with 32 KiB stacks.
    for block in ("100", "10x7"):
        got, want = _warp_ops(builds.binary("warp_ucontext"), tmp_path, block, blocks=2,
                              env={"MORPHGEN_SIMT_STACK": "32k"})
        np.testing.assert_array_equal(got, want)


def test_fibers_under_address_sanitizer(builds, tmp_path):
    # Stacks are reused by new fibers after others ended on them without returning: no false
    # reports, normal or shuffled.
    for block, shuffle in (("1000", None), ("10x7", 6)):
        got, want = _warp_ops(builds.binary("warp_asan"), tmp_path, block, blocks=2, shuffle=shuffle)
        np.testing.assert_array_equal(got, want)


def test_builtin_index_variables(builds, tmp_path):
    grid, block = (3, 2, 2), (5, 3, 2)
    out = tmp_path / "idx.out"
    run(builds.binary("warp"), "index", "x".join(map(str, grid)), "x".join(map(str, block)), out)
    got = np.fromfile(out, dtype=np.int32).reshape(-1, 8)
    want = [(tx, ty, tz, bx, by, bz, 50302, 30202)
            for bz in range(2) for by in range(2) for bx in range(3)
            for tz in range(2) for ty in range(3) for tx in range(5)]
    np.testing.assert_array_equal(got, np.array(want))


# ---------------------------------------------------------------------------------------------
# Atomics
# ---------------------------------------------------------------------------------------------

def test_atomics_across_many_blocks(builds, tmp_path):
    n = 2000 * 128
    x = np.random.default_rng(4).random(n).astype(np.float32)
    inp, prefix = tmp_path / "a.bin", tmp_path / "a"
    x.tofile(inp)
    proc = run(builds.binary("atomics"), "128", inp, prefix)
    t = dict(line.split() for line in proc.stdout.splitlines())
    i = np.arange(n, dtype=np.int64)
    milli = (x * np.float32(1000)).astype(np.int32)
    assert int(t["count"]) == n
    assert float(t["fsum"]) == pytest.approx(float(x.astype(np.float64).sum()), rel=1e-4)
    assert float(t["dsum"]) == pytest.approx(float(x.astype(np.float64).sum()), rel=1e-12)
    assert int(t["usum"]) == int((i * 1000003).sum())
    assert (int(t["imax"]), int(t["imin"])) == (milli.max(), milli.min())
    assert int(t["umax"]) == n - 1
    assert (int(t["llmin"]), int(t["llmax"])) == (-(1 << 40), n - 1 + (1 << 40))
    assert np.float32(float(t["fmax"])) == x.max()
    assert np.float32(float(t["fexch"])) in x
    assert int(t["ticket"]) == n and int(t["ucas"]) == n
    assert int(t["inc"]) == n % 100
    assert int(t["bits"]) == 0xFFFFFFFF
    assert int(t["sub"]) == -2 * n
    # Every atomicExch returned a distinct earlier value, and every ticket is distinct.
    olds = np.fromfile(f"{prefix}.exch", dtype=np.int32)
    np.testing.assert_array_equal(np.sort(np.append(olds, int(t["exch"]))), np.arange(-1, n))
    np.testing.assert_array_equal(np.sort(np.fromfile(f"{prefix}.ticket", dtype=np.uint32)), np.arange(n))


# ---------------------------------------------------------------------------------------------
# Deadlock, launch errors, the runtime API, two translation units
# ---------------------------------------------------------------------------------------------

def test_divergent_barrier_deadlock_aborts_with_a_message(builds):
    proc = run(builds.binary("runtime"), "deadlock", check=False)
    assert proc.returncode != 0
    assert "simt: deadlock in block (0,0,0)" in proc.stderr
    assert "16 waiting at __syncthreads" in proc.stderr
    assert "finished" not in proc.stdout


def test_invalid_launch_configuration_names_the_kernel(builds):
    out = run(builds.binary("runtime"), "invalid_launch").stdout.splitlines()
    for name in ("planted_too_many_threads", "planted_block_z", "planted_grid_y"):
        assert f"caught: CUDA error in {name}: invalid configuration argument" in out
    assert out.count("last error after: cudaSuccess") == 3
    assert "good launch ok" in out


def test_runtime_api_subset(builds):
    out = dict(line.split(" ", 1) for line in run(builds.binary("runtime"), "api").stdout.splitlines())
    assert out["device_count"] == "cudaSuccess 1"
    assert out["set_device_0"] == "cudaSuccess"
    assert out["set_device_1"] == "cudaErrorInvalidDevice"
    assert out["get_device"] == "cudaSuccess 0"
    assert out["name"] == "morphgen SIMT emulation"
    assert (out["warp_size"], out["max_threads"]) == ("32", "1024")
    assert out["sm_count_positive"] == out["shared_per_block_positive"] == "1"
    assert out["props_bad_device"] == "cudaErrorInvalidDevice"
    assert out["aligned"] == "1"
    assert out["malloc_null"] == "cudaErrorInvalidValue"
    assert out["error_string"] == "invalid argument"
    assert out["malloc_zero"] == "cudaSuccess 1"
    assert out["copies"] == "ok"
    assert out["elapsed_unrecorded"] == "cudaErrorInvalidResourceHandle"
    assert out["elapsed_nonnegative"] == "1"
    assert out["final_error"] == "cudaSuccess"


def test_runtime_last_error_is_returned_then_cleared(builds):
    out = run(builds.binary("runtime"), "api").stdout.splitlines()
    errors = [line.split()[1] for line in out if line.startswith("last_error ")]
    # cudaPeekAtLastError keeps it, cudaGetLastError returns it once.
    assert errors == ["cudaErrorInvalidDevice", "cudaErrorInvalidDevice", "cudaSuccess"]


def test_stream_capture_records_then_replays_and_refuses_what_would_synchronise(builds):
    """The CUDA graph of a training epoch (backends/cuda/graph.cuh) rests on these: a captured
    stream's work runs only when its graph is launched, once per launch; a synchronous copy, or
    work on the legacy stream, during a capture is refused and spoils it (as in the CUDA
    runtime's global capture mode), so an epoch that would need one falls back instead of
    replaying a wrong graph."""
    out = dict(line.split(" ", 1) for line in run(builds.binary("runtime"), "graph").stdout.splitlines())
    assert out["captured_ran_nothing"] == "1"
    assert out["replays"] == "2 fill 12"
    assert out["sync_copy"] == "cudaErrorStreamCaptureUnsupported"
    assert out["end_after_sync_copy"] == "cudaErrorStreamCaptureInvalidated graph 0"
    assert out["legacy_stream"] == "cudaErrorStreamCaptureImplicit"
    assert out["end_after_legacy"] == "cudaErrorStreamCaptureInvalidated graph 0"
    assert out["counter_after"] == "2"


def test_two_translation_units_link(builds):
    out = run(builds.binary("link")).stdout.split()
    assert out == ["a", "528", "b", "768"]


# ---------------------------------------------------------------------------------------------
# The same sources under nvcc
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def nvcc_builds(tmp_path_factory):
    nvcc = require_nvcc()
    directory = _shared_dir(tmp_path_factory, "simt_nvcc")
    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        futures = {name: (nvcc_command(nvcc, name),
                          pool.submit(_compile_once, nvcc_command(nvcc, name), directory / f"{name}.build"))
                   for name in CASE_FILES}
        return {name: (cmd, f.result()) for name, (cmd, f) in futures.items()}


@pytest.mark.parametrize("case", CASE_FILES)
def test_cases_compile_with_nvcc(nvcc_builds, case):
    cmd, (rc, log) = nvcc_builds[case]
    assert rc == 0, f"{' '.join(cmd)}\n{log}"
