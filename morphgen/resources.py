"""What this process may use: the cores it may run on, and how much memory it may still
allocate (the smaller of the kernel's MemAvailable and what the process's cgroup -- container,
SLURM job -- allows beyond what it already uses).

The memory figure is used to refuse, before allocating, a dataset or a run that cannot fit, with
the figure, rather than grow until the kernel's OOM killer ends the process without a word."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Optional

GIB = 1 << 30
PROC_MEMINFO = "/proc/meminfo"
PROC_CGROUP = "/proc/self/cgroup"
CGROUP_ROOT = "/sys/fs/cgroup"


def _read_int(path: Path) -> Optional[int]:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None       # "max" (no limit) reads as None


def _mem_available() -> Optional[int]:
    try:
        for line in Path(PROC_MEMINFO).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_headroom() -> Optional[int]:
    """Limit minus usage of this process's cgroup (v2, else v1); None when unlimited or unknown."""
    try:
        entries = Path(PROC_CGROUP).read_text().splitlines()
    except OSError:
        return None
    for entry in entries:
        parts = entry.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, rel = parts
        if hierarchy == "0" and controllers == "":                     # cgroup v2
            base = Path(CGROUP_ROOT) / rel.lstrip("/")
            limit, usage = _read_int(base / "memory.max"), _read_int(base / "memory.current")
        elif "memory" in controllers.split(","):                       # cgroup v1
            base = Path(CGROUP_ROOT) / "memory" / rel.lstrip("/")
            limit, usage = (_read_int(base / "memory.limit_in_bytes"),
                            _read_int(base / "memory.usage_in_bytes"))
            if limit is not None and limit >= 1 << 60:                 # v1 spells "no limit" so
                limit = None
        else:
            continue
        if limit is not None:
            return max(limit - (usage or 0), 0)
    return None


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, which taskset, a SLURM job's cpuset or
    a container's leave it.  os.cpu_count() counts the whole machine: a job given 8 of a node's 128
    cores that started 128 threads would have them take turns on 8."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:        # not Linux
        return os.cpu_count() or 1


def available_memory() -> Optional[int]:
    """Bytes this process may still allocate, or None when the system does not say."""
    figures = [f for f in (_mem_available(), _cgroup_headroom()) if f is not None]
    return min(figures) if figures else None


def gpu_free_memory(device: int) -> Optional[int]:
    """Bytes free on GPU `device` as nvidia-smi reports them, or None when it cannot say (no
    nvidia-smi, no such GPU, an answer that is not a number)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        proc = subprocess.run([smi, "--query-gpu=memory.free", "--format=csv,noheader,nounits", "-i", str(device)],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = proc.stdout.strip().splitlines()[:1]
    if proc.returncode != 0 or not first or not first[0].strip().isdigit():
        return None
    return int(first[0].strip()) << 20             # MiB


def gib(nbytes: float) -> str:
    return f"{nbytes / GIB:.2f} GiB" if nbytes >= GIB / 100 else f"{nbytes / (1 << 20):.1f} MiB"
