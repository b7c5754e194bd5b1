"""The MPI backend at equal cores: N ranks x T threads against one process and against the peers.

    python -m morphgen.backends.mpi.bench_ranks --dataset D --cores 2 --ranks 1 2 4 [--epochs 10]

Every system gets the same cores: single-process OpenMP with `--cores` threads, MPI with each
rank count R at max(1, cores / R) threads per rank (more ranks than cores oversubscribe, and the
table says so), and PyG and DGL with `--cores` threads.  The dataset is written once and every
system reads the same arrays (`morphgen.bench.harness.prepare_dataset`); the peers train the model
that `morphgen bench` derives from the program.  With `--repeat N` every system runs N times,
the rounds interleaved (one run of each system per round), and a system's time is the median of
its runs' medians, with the spread: on a shared or small machine consecutive runs of the same
binary differ by 10% or more, and interleaving keeps a slow spell from landing on one system.
One markdown table: epoch time, ratio to one process, the peers' ratios to each morphgen run,
final loss, test accuracy, and for MPI the halo, the all-reduce and the slowest/mean rank.
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
    cmd = harness.morphgen_command(model, data, epochs, 0, threads, out, profile=False,
                                   backend="openmp" if ranks is None else "mpi")
    if ranks is not None:
        cmd += ["--ranks", str(ranks), "--parts-dir", str(work / f"parts-{ranks}")]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


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
    ap.add_argument("--repeat", type=int, default=1, help="runs per system, interleaved (median of their medians)")
    ap.add_argument("--peers", default="pyg,dgl", help="comma-separated, or none")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds before a peer run is abandoned")
    args = ap.parse_args(argv)
    peers = [] if args.peers == "none" else args.peers.split(",")
    if not 0 <= args.warmup < args.epochs or args.repeat < 1 or args.cores < 1 or min(args.ranks) < 1:
        ap.error("need 0 <= --warmup < --epochs, and --repeat, --cores and every --ranks at least 1")
    try:
        return _compare(args, peers)
    except harness.BenchError as err:
        print(f"bench_ranks: error: {err}", file=sys.stderr)
    except subprocess.CalledProcessError as err:
        print(f"bench_ranks: error: `{' '.join(err.cmd[3:6])} ...` failed (exit status {err.returncode}); "
              f"its message is above", file=sys.stderr)
    return 2


def _compare(args, peers: list) -> int:
    shape = harness.program_shape(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = harness.prepare_dataset(args.dataset, args.data_dir, work,
                                       feature_normalization=shape.feature_normalization)
        systems = [("OpenMP", f"1 process x {args.cores} threads", None, args.cores)]
        for ranks in args.ranks:
            threads = max(1, args.cores // ranks)
            note = " (oversubscribed)" if ranks * threads > args.cores else ""
            systems.append(("MPI", f"{ranks} ranks x {threads} threads{note}", ranks, threads))
        reports = {layout: [] for _, layout, _, _ in systems}
        peer_ms = {p: [] for p in peers}
        spec = None
        for round_ in range(args.repeat):
            for system, layout, ranks, threads in systems:
                tag = f"{'omp' if ranks is None else f'mpi{ranks}'}-{round_}"
                reports[layout].append(train(args.model, data.path, work, tag, args.epochs, threads, ranks))
            if spec is None:
                spec = harness.peer_spec(shape, data, epochs=args.epochs, warmup=args.warmup, threads=args.cores,
                                         sparse_features=reports[systems[0][1]][0].get("feature_path") == "sparse")
            for system in peers:
                entry = harness.run_peer_capped(system, data.peer_path, spec, work, cap_gib=None,
                                                timeout_s=args.timeout, tag=f"{system}-{round_}")
                if entry.get("error"):
                    print(f"{system}: {entry['error']}", file=sys.stderr)
                else:
                    peer_ms[system].append(entry["epoch_time_s"] * 1e3)

    def ms_of(layout):
        return [harness.median_after_warmup(r["epoch_times_s"], args.warmup) * 1e3 for r in reports[layout]]

    base = statistics.median(ms_of(systems[0][1]))
    peer = {p: statistics.median(v) if v else None for p, v in peer_ms.items()}
    print(f"{data.name}: {data.num_nodes:,} nodes, {data.num_edges:,} edges, {data.num_features} features; "
          f"{args.cores} cores; {args.epochs} epochs, median after {args.warmup}; "
          f"{args.repeat} interleaved run(s) per system, median of the runs (min-max)")
    print()
    print("| system | layout | epoch (ms) | vs one process | "
          + "".join(f"{p} / this | " for p in peers)
          + "final loss | test acc | halo MB / epoch (all ranks) | gradient all-reduce (blocking) | slowest / mean rank |")
    print("|---|---|---|---|" + "---|" * len(peers) + "---|---|---|---|---|")
    for system, layout, _, _ in systems:
        runs = ms_of(layout)
        ms = statistics.median(runs)
        ratios = "".join(f"{'-' if peer[p] is None else f'{peer[p] / ms:.1f}x'} | " for p in peers)
        last = reports[layout][-1]
        print(f"| {system} | {layout} | {_spread(ms, runs)} | {ms / base:.2f} | {ratios}"
              f"{last['final_loss']:.6f} | {last['test_acc']:.4f} | {_mpi_columns(last)} |")
    for p in peers:
        ms = peer[p]
        print(f"| {p} | 1 process x {args.cores} threads | {'failed' if ms is None else _spread(ms, peer_ms[p])} "
              f"| {'-' if ms is None else f'{ms / base:.2f}'} | " + "- | " * len(peers) + "- | - | - | - | - |")
    return 0


def _spread(ms: float, runs: list) -> str:
    return f"{ms:.1f}" if len(runs) < 2 else f"{ms:.1f} ({min(runs):.1f}-{max(runs):.1f})"


if __name__ == "__main__":
    sys.exit(main())
