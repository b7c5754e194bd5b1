"""Timing script (not a test): the elementwise kernels' bandwidth next to a STREAM-like triad.

    .venv/bin/python backends/openmp/kernels/bench_elementwise.py [--threads 2]

For a cache-resident size (Cora's 2,708 nodes x 64) and one far beyond the last-level cache
(ogbn-arxiv's 169,343 nodes x 128), prints each kernel's time and effective GB/s (bytes = the
arrays it reads and writes once each), the way `--profile-ops` counts them.
"""
from __future__ import annotations

import argparse

from morphgen.calibrate import TRIAD_FLOATS, library
from morphgen.toolchain import compile_shared, kernel_include_dir

CDEF = """
double mg_elementwise_seconds(int kind, int64_t n, int reps);
void mg_set_threads(int n);
"""
# kind -> (name, arrays streamed: read + written)
KERNELS = {0: ("scale", 2), 1: ("relu", 2), 2: ("relu backward", 3), 3: ("elu", 2), 4: ("sigmoid", 2),
           5: ("accumulate", 3), 6: ("copy", 2), 7: ("tanh", 2), 8: ("softplus", 2), 9: ("log", 2)}
SIZES = (("cora hidden, 2,708 x 64", 2708 * 64, 2000), ("arxiv, 169,343 x 128", 169343 * 128, 20))


def main() -> None:
    import cffi

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    src = (kernel_include_dir() / "bench_elementwise.cpp").read_text()
    lib = ffi.dlopen(str(compile_shared({"bench_elementwise.cpp": src}, name="mg_bench_elementwise")))
    lib.mg_set_threads(args.threads)
    _, calib = library()
    calib.mg_set_threads(args.threads)
    triad = calib.mg_stream_triad_gbs(TRIAD_FLOATS, 5)
    print(f"threads={args.threads}; triad {triad:.1f} GB/s (3 x 64 MiB)")
    for label, n, reps in SIZES:
        print(label)
        for kind, (name, arrays) in KERNELS.items():
            s = lib.mg_elementwise_seconds(kind, n, reps)
            gbs = arrays * 4 * n / s / 1e9
            print(f"  {name:14s} {s * 1e6:9.1f} us  {gbs:7.1f} GB/s  ({gbs / triad * 100:5.0f}% of triad)")


if __name__ == "__main__":
    main()
