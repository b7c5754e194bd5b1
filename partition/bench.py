"""Partitioner benchmark: ours (auto) against vertex-balanced METIS.

    python -m morphgen.partition.bench [--datasets-dir DIR] [--parts 2,4,8,16] [--json OUT] [--tradeoff]

Graphs: cora, snap_facebook (symmetrised), and a synthetic R-MAT graph (2^17 nodes, 1M directed
edges, seed 0, from morphgen.data.synthetic.rmat).  For each K it reports, for both partitioners,
the directed edge cut, our cut over the reference's, the edge-load imbalance (load = in-degree + 1,
what we balance), the pure in-edge imbalance, the node imbalance, ghosts and seconds.
--tradeoff adds a second table: our cut relative to the reference's at a series of load bounds,
up to the imbalance the reference itself leaves (see tradeoff.py).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

from .compare import REFERENCE, evaluate
from .inputs import load_input_graph, rmat_graph
from .table import render
from .tradeoff import cut_vs_bound, describe

RMAT_NODES, RMAT_EDGES = 1 << 17, 1_000_000


def _default_datasets_dir() -> Path:
    env = os.environ.get("MORPHGEN_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "datasets"


def graphs(datasets_dir: Path):
    yield "cora", load_input_graph(str(datasets_dir / "cora.npz"))
    yield "snap_facebook (sym.)", load_input_graph(str(datasets_dir / "snap_facebook.npz"), symmetric=True)
    yield f"rmat {RMAT_NODES}/{RMAT_EDGES}", rmat_graph(RMAT_NODES, RMAT_EDGES, seed=0)


HEADERS = ["graph", "K", "cut ours", "cut METIS-v", "cut ratio", "load imb. ours", "load imb. METIS-v",
           "edge imb. ours", "edge imb. METIS-v", "node imb. ours", "node imb. METIS-v",
           "ghosts ours", "ghosts METIS-v", "phase", "s ours", "s METIS-v"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m morphgen.partition.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--datasets-dir", type=Path, default=None)
    ap.add_argument("--parts", default="2,4,8,16")
    ap.add_argument("--json", dest="json_out", default=None)
    ap.add_argument("--tradeoff", action="store_true", help="also measure the cut at looser load bounds")
    args = ap.parse_args(argv)
    parts = [int(k) for k in args.parts.split(",")]
    rows, records, curves = [], [], []
    for name, graph in graphs(args.datasets_dir or _default_datasets_dir()):
        print(f"# {name}: {graph.num_nodes} nodes, {graph.num_edges} edges", file=sys.stderr)
        for k in parts:
            ours, _ = evaluate(graph, k, "auto")
            ref, _ = evaluate(graph, k, REFERENCE)
            ratio = ours["edge_cut"] / ref["edge_cut"] if ref["edge_cut"] else float("nan")
            rows.append([name, k, ours["edge_cut"], ref["edge_cut"], ratio,
                         ours["load_imbalance_load"], ref["load_imbalance_load"],
                         ours["load_imbalance_edges"], ref["load_imbalance_edges"],
                         ours["load_imbalance_nodes"], ref["load_imbalance_nodes"],
                         ours["ghost_nodes"], ref["ghost_nodes"], ours["phase"],
                         ours["seconds"], ref["seconds"]])
            record = {"graph": name, "parts": k, "ours": ours, "vertex_metis": ref, "cut_ratio": ratio}
            if args.tradeoff:
                curve = cut_vs_bound(graph, k, ref["edge_cut"], ref["load_imbalance_load"])
                record["tradeoff"] = curve
                curves.append([name, k, ref["load_imbalance_load"], describe(curve)])
            records.append(record)
            print(f"  K={k} done", file=sys.stderr)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}")
    print(render(HEADERS, rows))
    if curves:
        print()
        print(render(["graph", "K", "load imb. METIS-v", "cut ours / cut METIS-v at load bound"], curves))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(records, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
