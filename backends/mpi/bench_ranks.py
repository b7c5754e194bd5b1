"""The MPI backend at equal cores: N ranks x T threads against one process and against the peers.

    python -m morphgen.backends.mpi.bench_ranks --dataset D --cores 2 --ranks 1 2 4 [--epochs 10]

Every system gets the same cores: single-process OpenMP with `--cores` threads, MPI with each
rank count R at max(1, cores / R) threads per rank (more ranks than cores oversubscribe, and the
table says so), and PyG and DGL with `--cores` threads.  The dataset is written once and every
system reads the same arrays (`morphgen.bench.harness.prepare_dataset`); the peers train the model
that `morphgen bench` derives from the program.  One markdown table: median epoch after warm-up,
ratio to one process, the peers' ratios to each morphgen run, final loss, test accuracy, and for
MPI the halo, the all-reduce and the slowest/mean rank.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

from morphgen.bench import harness

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gcn3.mp"


def train(model: Path, data: Path, work: Path, tag: str, epochs: int, threads: int,
          ranks: Optional[int] = None) -> dict:
    """One `morphgen train` run (MPI when `ranks` is given); its --json report."""
    out = work / f"{tag}.json"
    cmd = [sys.executable, "-m", "morphgen", "train", str(model), "--dataset", str(data), "--epochs", str(epochs),
           "--threads", str(threads), "--json", str(out), "--quiet"]
    if ranks is not None:
        cmd += ["--backend", "mpi", "--ranks", str(ranks), "--parts-dir", str(work / f"parts-{ranks}")]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def _median(times: list, warmup: int) -> float:
    return harness.median_after_warmup([float(t) for t in times], warmup)


def _mpi_columns(r: dict) -> str:
    per = r.get("per_rank")
    if not per:
        return "- | - | -"
    epochs = [p["median_epoch_s"] for p in per]
    halo_mb = sum(p["halo_bytes_per_epoch"] for p in per) / 1e6
    hidden = r.get("allreduce_hidden")
    reduce_ms = max(p["allreduce_s_per_epoch"] for p in per) * 1e3
    return (f"{halo_mb:.1f} | {reduce_ms:.2f} ms, {'-' if hidden is None else f'{hidden:.0%}'} hidden "
            f"| {max(epochs) / statistics.mean(epochs):.2f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=EXAMPLE)
    ap.add_argument("--dataset", required=True, help="dataset name, .npz path or synthetic:... spec")
    ap.add_argument("--data-dir", default="../shared/datasets")
    ap.add_argument("--cores", type=int, default=2, help="threads for one process and the peers")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--peers", default="pyg,dgl", help="comma-separated, or none")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds before a peer run is abandoned")
    args = ap.parse_args(argv)
    peers = [] if args.peers == "none" else args.peers.split(",")

    shape = harness.program_shape(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = harness.prepare_dataset(args.dataset, args.data_dir, work,
                                       feature_normalization=shape.feature_normalization)
        runs = [("OpenMP", f"1 process x {args.cores} threads",
                 train(args.model, data.path, work, "omp", args.epochs, args.cores))]
        for ranks in args.ranks:
            threads = max(1, args.cores // ranks)
            note = " (oversubscribed)" if ranks * threads > args.cores else ""
            runs.append(("MPI", f"{ranks} ranks x {threads} threads{note}",
                         train(args.model, data.path, work, f"mpi{ranks}", args.epochs, threads, ranks)))
        peer_ms = {}
        for system in peers:
            spec = harness.peer_spec(shape, data, epochs=args.epochs, warmup=args.warmup, threads=args.cores,
                                     sparse_features=runs[0][2].get("feature_path") == "sparse")
            entry = harness.run_peer_capped(system, data.peer_path, spec, work, cap_gib=None, timeout_s=args.timeout)
            peer_ms[system] = None if entry.get("error") else entry["epoch_time_s"] * 1e3
            if entry.get("error"):
                print(f"{system}: {entry['error']}", file=sys.stderr)

    base = _median(runs[0][2]["epoch_times_s"], args.warmup)
    print(f"{data.name}: {data.num_nodes:,} nodes, {data.num_edges:,} edges, {data.num_features} features; "
          f"{args.cores} cores; {args.epochs} epochs, median after {args.warmup}")
    print()
    print("| system | layout | median epoch (ms) | vs one process | "
          + "".join(f"{p} / this | " for p in peers)
          + "final loss | test acc | halo MB / epoch (all ranks) | gradient all-reduce (blocking) | slowest / mean rank |")
    print("|---|---|---|---|" + "---|" * len(peers) + "---|---|---|---|---|")
    for system, layout, r in runs:
        ms = _median(r["epoch_times_s"], args.warmup) * 1e3
        ratios = "".join(f"{'-' if peer_ms[p] is None else f'{peer_ms[p] / ms:.1f}x'} | " for p in peers)
        print(f"| {system} | {layout} | {ms:.1f} | {ms / (base * 1e3):.2f} | {ratios}"
              f"{r['final_loss']:.6f} | {r['test_acc']:.4f} | {_mpi_columns(r)} |")
    for p in peers:
        ms = peer_ms[p]
        print(f"| {p} | 1 process x {args.cores} threads | {'failed' if ms is None else f'{ms:.1f}'} "
              f"| {'-' if ms is None else f'{ms / (base * 1e3):.2f}'} | " + "- | " * len(peers) + "- | - | - | - | - |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
