"""The partition judged by what it buys: MPI epoch time with each partitioner.

    python -m morphgen.backends.mpi.bench_partition --data-dir ../shared/datasets --ranks 2 4

For snap_facebook and an R-MAT graph (structure only: the features and labels are random, which
changes nothing in an epoch's cost), trains examples/gcn.mp with --backend mpi on each
partitioner (morphgen's edge-load balanced one at its fixed 1.03 bound, vertex-balanced METIS, a
random split, and auto: the candidate with the fastest predicted epoch, epoch_cost.py) and prints
one markdown table: median epoch, slowest rank / mean rank, halo bytes per epoch, ghost rows, and
for auto the candidate it chose with its predicted epoch.  With --repeat N each partitioner runs
N times, the rounds interleaved, and the table gives the median with the fastest and slowest run.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from morphgen.bench import harness
from morphgen.data import Dataset
from morphgen.data.npz import save_npz

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gcn.mp"


def _with_random_labels(graph, name: str, features: int = 64, classes: int = 8) -> Dataset:
    rng = np.random.default_rng(0)
    n = graph.num_nodes
    order = rng.permutation(n)
    masks = [np.zeros(n, bool) for _ in range(3)]
    masks[0][order[: n // 2]] = True
    masks[1][order[n // 2: 3 * n // 4]] = True
    masks[2][order[3 * n // 4:]] = True
    return Dataset(name=name, graph=graph, features=rng.normal(size=(n, features)).astype(np.float32),
                   labels=rng.integers(0, classes, n).astype(np.int64), train_mask=masks[0], val_mask=masks[1],
                   test_mask=masks[2], num_classes=classes)


def graphs(data_dir: Path):
    from morphgen.data import load_graph
    from morphgen.data.synthetic import rmat
    yield "snap_facebook", load_graph("snap_facebook", data_dir=str(data_dir))
    yield "rmat-65k", rmat(65536, 1_000_000, seed=0, symmetric=True, dedup=True)


def run(dataset_path: Path, ranks: int, partitioner: str, out: Path, epochs: int, round_: int = 0) -> dict:
    """The run's --json report, with the partition's manifest entry under "partition".  The part
    files are written by the first round and reused by the later ones."""
    report = out / f"{dataset_path.stem}-{ranks}-{partitioner}-{round_}.json"
    parts = out / f"parts-{dataset_path.stem}-{ranks}-{partitioner}"
    cmd = harness.morphgen_command(EXAMPLE, dataset_path, epochs, 0, 1, report, profile=False, backend="mpi")
    cmd += ["--ranks", str(ranks), "--partitioner", partitioner, "--parts-dir", str(parts)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    result = json.loads(report.read_text())
    result["partition"] = json.loads((parts / "manifest.json").read_text())["partition"]
    return result


def _choice(partition: dict) -> str:
    """For auto: the chosen candidate and its predicted epoch; '-' for the fixed partitioners."""
    if partition.get("partitioner") != "auto":
        return "-"
    chosen = next(p for p in partition["predictions"] if p["candidate"] == partition["chosen"])
    return f"{chosen['candidate']} ({chosen['epoch_s'] * 1e3:.2f} ms predicted)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default="../shared/datasets")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per partitioner, the rounds interleaved; the median of their median epochs")
    args = ap.parse_args(argv)
    partitioners = ("morphgen", "metis", "random", "auto")
    print("| graph | ranks | partitioner | median epoch (ms) | slowest / mean rank | halo MB / epoch (all ranks) "
          "| ghost rows (all ranks) | auto's choice |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for name, graph in graphs(Path(args.data_dir)):
            path = save_npz(_with_random_labels(graph, name), out / f"{name}.npz")
            for ranks in args.ranks:
                runs = {p: [] for p in partitioners}
                for round_ in range(args.repeat):      # interleaved: a slow spell hits every partitioner
                    for partitioner in partitioners:
                        runs[partitioner].append(run(path, ranks, partitioner, out, args.epochs, round_))
                for partitioner in partitioners:
                    ms = [statistics.median(r["epoch_times_s"]) * 1e3 for r in runs[partitioner]]
                    r = runs[partitioner][-1]
                    per = r["per_rank"]
                    epoch = [p["median_epoch_s"] for p in per]
                    spread = f" ({min(ms):.2f}-{max(ms):.2f})" if len(ms) > 1 else ""
                    print(f"| {name} | {ranks} | {partitioner} | {statistics.median(ms):.2f}{spread} "
                          f"| {max(epoch) / statistics.mean(epoch):.2f} "
                          f"| {sum(p['halo_bytes_per_epoch'] for p in per) / 1e6:.2f} "
                          f"| {sum(p['ghosts'] for p in per)} | {_choice(r['partition'])} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
