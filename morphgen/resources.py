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
from typing import Iterator, Optional

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


def _cgroup_dirs(controller: str) -> Iterator[tuple[int, Path]]:
    """(cgroup version, directory) of each hierarchy this process's cgroup is in that may hold
    `controller`'s files: v2's single hierarchy, and v1's hierarchy of that controller (a hybrid
    system has both, with the controller in one of them)."""
    try:
        entries = Path(PROC_CGROUP).read_text().splitlines()
    except OSError:
        return
    for entry in entries:
        parts = entry.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, rel = parts
        if hierarchy == "0" and controllers == "":
            yield 2, Path(CGROUP_ROOT) / rel.lstrip("/")
        elif controller in controllers.split(","):
            yield 1, Path(CGROUP_ROOT) / controller / rel.lstrip("/")   # "cpu" links to "cpu,cpuacct"


def _read_words(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def _cgroup_headroom() -> Optional[int]:
    """Limit minus usage of this process's cgroup; None when unlimited or unknown."""
    for version, base in _cgroup_dirs("memory"):
        if version == 2:
            limit, usage = _read_int(base / "memory.max"), _read_int(base / "memory.current")
        else:
            limit, usage = _read_int(base / "memory.limit_in_bytes"), _read_int(base / "memory.usage_in_bytes")
            if limit is not None and limit >= 1 << 60:                 # v1 spells "no limit" so
                limit = None
        if limit is not None:
            return max(limit - (usage or 0), 0)
    return None


def _cgroup_cpu_quota() -> Optional[int]:
    """Whole cores this process's cgroup may use per period (docker --cpus, a Kubernetes CPU
    limit), rounded down but at least 1; None when unlimited or unknown.  Rounded down because
    OpenMP threads that wait spinning are throttled as a group once the quota is spent: 2
    threads on 1.5 cores lose whole periods."""
    for version, base in _cgroup_dirs("cpu"):
        if version == 2:
            words = _read_words(base / "cpu.max") + ["", ""]       # "max 100000" or "150000 100000"
            quota, period = (int(w) if w.isdigit() else None for w in words[:2])
        else:
            quota, period = _read_int(base / "cpu.cfs_quota_us"), _read_int(base / "cpu.cfs_period_us")
        if quota and period:                                       # v1's -1 (no limit) reads as None
            return max(quota // period, 1)
    return None


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, which taskset, a SLURM job's cpuset or
    a container's leave it, and no more than its cgroup's CPU quota allows.  os.cpu_count()
    counts the whole machine: a job given 8 of a node's 128 cores that started 128 threads would
    have them take turns on 8."""
    try:
        cores = len(os.sched_getaffinity(0)) or 1
    except AttributeError:        # not Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    return cores if quota is None else min(cores, quota)


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
