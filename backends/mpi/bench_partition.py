"""The partition judged by what it buys: MPI epoch time with each partitioner (issue 10 §4).

    python -m morphgen.backends.mpi.bench_partition --data-dir ../shared/datasets --ranks 2 4

For snap_facebook and an R-MAT graph (structure only: the features and labels are random, which
changes nothing in an epoch's cost), trains examples/gcn.mp with --backend mpi on each
partitioner (morphgen's edge-load balanced one, vertex-balanced METIS, a random split) and prints
one markdown table: median epoch, slowest rank / mean rank, halo bytes per epoch, ghost rows.
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


def run(dataset_path: Path, ranks: int, partitioner: str, out: Path, epochs: int) -> dict:
    report = out / f"{dataset_path.stem}-{ranks}-{partitioner}.json"
    cmd = [sys.executable, "-m", "morphgen", "train", str(EXAMPLE), "--backend", "mpi", "--ranks", str(ranks),
           "--threads", "1", "--dataset", str(dataset_path), "--epochs", str(epochs), "--partitioner", partitioner,
           "--parts-dir", str(out / f"parts-{dataset_path.stem}-{ranks}-{partitioner}"), "--json", str(report),
           "--quiet"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads(report.read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default="../shared/datasets")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--epochs", type=int, default=30)
    args = ap.parse_args(argv)
    print("| graph | ranks | partitioner | median epoch (ms) | slowest / mean rank | halo MB / epoch (all ranks) "
          "| ghost rows (all ranks) |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for name, graph in graphs(Path(args.data_dir)):
            path = save_npz(_with_random_labels(graph, name), out / f"{name}.npz")
            for ranks in args.ranks:
                for partitioner in ("morphgen", "metis", "random"):
                    r = run(path, ranks, partitioner, out, args.epochs)
                    per = r["per_rank"]
                    epoch = [p["median_epoch_s"] for p in per]
                    print(f"| {name} | {ranks} | {partitioner} | {statistics.median(r['epoch_times_s']) * 1e3:.2f} "
                          f"| {max(epoch) / statistics.mean(epoch):.2f} "
                          f"| {sum(p['halo_bytes_per_epoch'] for p in per) / 1e6:.2f} "
                          f"| {sum(p['ghosts'] for p in per)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
