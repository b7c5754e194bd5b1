"""The GPU's ceilings for the kernel table of `morphgen bench --backend cuda`.

Two numbers, measured on the GPU the run uses, through the peers' torch in a child process (so
its CUDA context and memory are gone before anything is timed): the device-to-device copy
bandwidth (bytes read plus bytes written, as STREAM counts a copy) and FP32 sgemm with TF32 off
(morphgen's products are FP32 cuBLAS calls).  A kernel's achieved rate is then held against the
one that binds it, as the CPU's kernels are against STREAM triad and sgemm.
"""
from __future__ import annotations

import functools
import json
import subprocess
import sys

_SCRIPT = r"""
import json, sys
import torch
device, quick = int(sys.argv[1]), sys.argv[2] == "1"
if not torch.cuda.is_available():
    print(json.dumps({"error": f"torch {torch.__version__} has no CUDA device here"}))
    sys.exit(0)
dev = torch.device(f"cuda:{device}")
torch.backends.cuda.matmul.allow_tf32 = False

def median_seconds(fn, reps):
    for _ in range(3):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    return sorted(times)[len(times) // 2]

n = 1 << (24 if quick else 28)              # 64 MiB or 1 GiB of floats: far beyond the L2
x = torch.rand(n, device=dev)
y = torch.empty_like(x)
copy_s = median_seconds(lambda: y.copy_(x), 10)
del x, y
size = 2048 if quick else 8192
a, b = torch.rand(size, size, device=dev), torch.rand(size, size, device=dev)
gemm_s = median_seconds(lambda: torch.mm(a, b), 5)
print(json.dumps({"device_name": torch.cuda.get_device_name(dev), "device_copy_gbs": 2 * 4 * n / copy_s / 1e9,
                  "sgemm_gflops": 2 * size ** 3 / gemm_s / 1e9, "quick": quick}))
"""


@functools.lru_cache(maxsize=None)
def measure_gpu_limits(device: int, quick: bool = False, timeout_s: float = 300) -> dict:
    """{"device_copy_gbs", "sgemm_gflops", "device_name", "quick"}, or {"error": why} (no torch,
    no CUDA device, a failed or hung child): never raises, the benchmark goes on without them."""
    try:
        proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(device), "1" if quick else "0"],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"the measurement took over {timeout_s:g} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"the measurement failed: {last}"}
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError:
        return {"error": f"the measurement printed {lines[-1]!r}"}


def as_ceilings(limits: dict | None) -> dict | None:
    """The ceilings report.kernel_limits holds a kernel against (its "triad" is the device copy),
    or None when there are none."""
    if not limits or limits.get("error"):
        return None
    return {"triad_gbs": limits["device_copy_gbs"], "sgemm_gflops": limits["sgemm_gflops"]}
