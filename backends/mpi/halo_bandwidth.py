"""How fast two ranks exchange halo rows here: the bandwidth the partition's cost model uses.

Run by the launcher as ``mpiexec -n 2 python -m morphgen.backends.mpi.halo_bandwidth``: each
rank packs 8 MiB of scattered 64-float rows (the rows its peer has as ghosts) and both post
MPI_Irecv/MPI_Isend to each other at once, as a halo exchange does; rank 0 prints the bytes
each rank sent per second (best of several rounds) as JSON.  The figure
is measured once per machine and cached; ``MORPHGEN_HALO_GBS`` sets it instead (a cluster whose
ranks talk over a network the launcher's node cannot measure).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROW_FLOATS, ROWS, ROUNDS = 64, 1 << 15, 8       # 32,768 rows of 64 floats: 8 MiB per message


def measure_in_ranks() -> float:
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    peer = 1 - comm.Get_rank()
    rng = np.random.default_rng(comm.Get_rank())
    rows = rng.standard_normal((4 * ROWS, ROW_FLOATS)).astype(np.float32)
    sent_rows = np.sort(rng.choice(4 * ROWS, ROWS, replace=False))
    send = np.empty((ROWS, ROW_FLOATS), np.float32)
    recv = np.empty_like(send)
    best = float("inf")
    for _ in range(ROUNDS):
        comm.Barrier()
        t0 = time.perf_counter()
        np.take(rows, sent_rows, axis=0, out=send)
        reqs = [comm.Irecv(recv, source=peer, tag=7), comm.Isend(send, dest=peer, tag=7)]
        MPI.Request.Waitall(reqs)
        best = min(best, time.perf_counter() - t0)
    slowest = comm.allreduce(best, op=MPI.MAX)
    return send.nbytes / slowest / 1e9


def _cache_file() -> Path:
    from morphgen.toolchain import cache_root
    return cache_root() / "halo_bandwidth.json"


def _machine() -> str:
    import hashlib
    from morphgen.toolchain import _cpu_identity
    return f"{os.uname().nodename}-{hashlib.sha256(_cpu_identity().encode()).hexdigest()[:12]}"


def halo_gbs() -> float:
    """GB/s one rank sends to another during an exchange: $MORPHGEN_HALO_GBS, the cached figure
    for this machine, or a fresh measurement (about a second)."""
    override = os.environ.get("MORPHGEN_HALO_GBS")
    if override:
        try:
            value = float(override)
        except ValueError:
            value = -1.0
        if not value > 0:
            from morphgen.errors import UserError
            raise UserError(f"morphgen: error: MORPHGEN_HALO_GBS must be a positive number, got {override!r}")
        return value
    path, machine = _cache_file(), _machine()
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        table = {}
    if isinstance(table.get(machine), (int, float)) and table[machine] > 0:
        return float(table[machine])
    from .launch import mpiexec
    out = subprocess.run([mpiexec(), "-n", "2", sys.executable, "-m", "morphgen.backends.mpi.halo_bandwidth"],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if out.returncode != 0:
        from morphgen.errors import UserError
        raise UserError(f"morphgen: error: measuring the halo bandwidth with 2 MPI ranks failed:\n{out.stderr[-2000:]}")
    value = float(json.loads(out.stdout.strip().splitlines()[-1])["halo_gbs"])
    table[machine] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(table, indent=1) + "\n")
    os.replace(tmp, path)
    return value


if __name__ == "__main__":
    gbs = measure_in_ranks()
    from mpi4py import MPI
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(json.dumps({"halo_gbs": gbs}))
